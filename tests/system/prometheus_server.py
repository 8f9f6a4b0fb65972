"""A real Prometheus server on loopback, for system tests.

    with PrometheusServer(["127.0.0.1:9100"]) as prom:
        series = prom.wait_for_series("esault_tuples_processed_total > 0", timeout=15)

It runs the ``prometheus`` binary (Debian package ``prometheus``) on
127.0.0.1 with a free port, a temporary config that scrapes the given
``host:port`` targets every second, and temporary TSDB storage; leaving the
``with`` block terminates it and deletes the directory. Waiting is always a
condition polled against a deadline, never a bare sleep.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml

PROMETHEUS_BINARY = "prometheus"
_POLL_INTERVAL = 0.1
_START_ATTEMPTS = 3


class PrometheusError(AssertionError):
    """Prometheus did not start, answered an error, or a wait ran out of time."""


class PrometheusServer:
    """One Prometheus process scraping ``targets`` (``"host:port"`` strings) at /metrics."""

    def __init__(
        self,
        targets: Sequence[str],
        *,
        scrape_interval: float = 1.0,
        job: str = "esault",
        startup_timeout: float = 20.0,
        binary: str = PROMETHEUS_BINARY,
    ) -> None:
        if not targets:
            raise ValueError("PrometheusServer needs at least one 'host:port' target to scrape")
        self.targets = list(targets)
        self._poll_gate = threading.Event()
        self.scrape_interval = scrape_interval
        self.job = job
        self.startup_timeout = startup_timeout
        self.binary = binary
        self.port: int | None = None
        self._dir: Path | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._log_path: Path | None = None

    # -- lifecycle ---------------------------------------------------------

    @property
    def url(self) -> str:
        if self.port is None:
            raise PrometheusError("PrometheusServer is not running; use it as a context manager")
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> PrometheusServer:
        executable = shutil.which(self.binary)
        if executable is None:
            raise PrometheusError(
                f"{self.binary!r} is not on PATH; install it with `apt-get install prometheus`"
            )
        self._dir = Path(tempfile.mkdtemp(prefix="esault-prometheus-"))
        config = self._dir / "prometheus.yml"
        config.write_text(yaml.safe_dump(self.config()))
        # The free port is found by binding port 0 and closing; another process
        # could take it before Prometheus binds, so retry with a new port.
        for attempt in range(1, _START_ATTEMPTS + 1):
            self.port = _free_port()
            self._log_path = self._dir / f"prometheus-{attempt}.log"
            with self._log_path.open("wb") as log:
                self._process = subprocess.Popen(
                    [
                        executable,
                        f"--config.file={config}",
                        f"--storage.tsdb.path={self._dir / 'data'}",
                        f"--web.listen-address=127.0.0.1:{self.port}",
                        "--storage.tsdb.retention.time=1h",
                        "--log.level=warn",
                    ],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                )
            if self._wait_ready():
                return self
            if "address already in use" not in self.log():
                break
        output = self.log()
        self.stop()
        raise PrometheusError(f"Prometheus did not become ready in {self.startup_timeout}s; its log:\n{output}")

    def _wait_ready(self) -> bool:
        assert self._process is not None
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                return False
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as response:
                    if response.status == 200:
                        return True
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            self._poll_gate.wait(_POLL_INTERVAL)  # a poll interval inside a deadline loop
        self._terminate()
        return False

    def stop(self) -> None:
        """Terminate Prometheus and delete its config and storage. Idempotent."""
        self._terminate()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def _terminate(self) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)

    def __enter__(self) -> PrometheusServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def config(self) -> dict[str, Any]:
        """The prometheus.yml this server runs with."""
        interval = f"{int(self.scrape_interval * 1000)}ms"
        return {
            "global": {"scrape_interval": interval, "evaluation_interval": interval},
            "scrape_configs": [
                {
                    "job_name": self.job,
                    "scrape_interval": interval,
                    "scrape_timeout": interval,
                    "metrics_path": "/metrics",
                    "static_configs": [{"targets": self.targets}],
                }
            ],
        }

    def log(self) -> str:
        if self._log_path is None or not self._log_path.exists():
            return ""
        return self._log_path.read_text(errors="replace")

    # -- HTTP API ----------------------------------------------------------

    def api(self, path: str, **params: str) -> Any:
        """GET /api/v1/<path>; returns ``data`` or raises PrometheusError with Prometheus's message."""
        url = f"{self.url}/api/v1/{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                body = json.load(response)
        except urllib.error.HTTPError as exc:
            # A bad query comes back as 400/422 with a JSON error body.
            try:
                body = json.load(exc)
            except ValueError:
                raise PrometheusError(f"GET {url}: HTTP {exc.code}") from None
        if body.get("status") != "success":
            raise PrometheusError(f"{path} {params}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """Instant query; the result vector as ``[{"metric": {...}, "value": [t, "v"]}, ...]``.

        A scalar or string result comes back as a one-element list of the same shape.
        """
        data = self.api("query", query=expr)
        if data["resultType"] in ("scalar", "string"):
            return [{"metric": {}, "value": data["result"]}]
        return data["result"]

    def wait_for_series(
        self,
        expr: str,
        timeout: float = 15.0,
        predicate: Callable[[list[dict[str, Any]]], bool] = bool,
    ) -> list[dict[str, Any]]:
        """Poll ``query(expr)`` until ``predicate(result)`` (default: non-empty) or the deadline.

        On timeout raises PrometheusError naming the last result and the scrape
        targets' health, which usually says why (connection refused, bad format).
        """
        deadline = time.monotonic() + timeout
        last: list[dict[str, Any]] = []
        while True:
            last = self.query(expr)
            if predicate(last):
                return last
            if time.monotonic() >= deadline:
                raise PrometheusError(
                    f"no result satisfying the condition for {expr!r} within {timeout}s; "
                    f"last result: {last!r}; targets: {self.target_health()!r}"
                )
            self._poll_gate.wait(_POLL_INTERVAL)  # a poll interval inside a deadline loop

    def target_health(self) -> list[dict[str, str]]:
        """Each active target's scrape URL, health ("up"/"down"/"unknown") and last error."""
        data = self.api("targets", state="active")
        return [
            {"url": t["scrapeUrl"], "health": t["health"], "error": t.get("lastError", "")}
            for t in data["activeTargets"]
        ]


def values(result: list[dict[str, Any]]) -> list[float]:
    """The float values of an instant-query result."""
    return [float(item["value"][1]) for item in result]


DASHBOARDS = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "dashboards"

GRAFANA_VARIABLES = {
    "$__rate_interval": "1m",
    "$__interval": "15s",
    "$__range": "5m",
    "$topology": ".*",
    "$unit": ".*",
}
"""What Grafana substitutes before a dashboard query reaches Prometheus (All selected)."""


def dashboard_queries(path: Path, annotations: bool = True) -> list[tuple[str, str]]:
    """(panel title, PromQL) of every target of every panel of one Grafana dashboard JSON, rows'
    nested panels included; with `annotations`, also the annotation queries ("annotation NAME")."""
    dashboard = json.loads(path.read_text())
    queries: list[tuple[str, str]] = []

    def walk(panels: list[dict[str, Any]]) -> None:
        for panel in panels:
            walk(panel.get("panels", []))
            for target in panel.get("targets", []):
                if target.get("expr"):
                    queries.append((panel["title"], target["expr"]))

    walk(dashboard.get("panels", []))
    if annotations:
        for annotation in dashboard.get("annotations", {}).get("list", []):
            if annotation.get("expr"):
                queries.append((f"annotation {annotation['name']}", annotation["expr"]))
    return queries


def with_grafana_variables(expr: str, variables: dict[str, str] | None = None) -> str:
    """`expr` with Grafana's variables replaced (GRAFANA_VARIABLES, overridden by `variables`)."""
    table = {**GRAFANA_VARIABLES, **(variables or {})}
    for name in sorted(table, key=len, reverse=True):
        expr = expr.replace(name, table[name])
    leftover = re.search(r"\$\{?\w+", expr)
    if leftover:
        raise ValueError(f"unknown Grafana variable {leftover.group()!r} left in {expr!r}; add it to GRAFANA_VARIABLES")
    return expr


def has_data(result: list[dict[str, Any]]) -> bool:
    """A query result a panel would draw: at least one sample that is a number (not NaN, e.g. a
    histogram_quantile over buckets that saw no observation in the window)."""
    return any(not math.isnan(float(item["value"][1])) for item in result)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
