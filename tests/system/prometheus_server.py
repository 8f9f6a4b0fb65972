"""A real Prometheus server on loopback, for system tests.

    with PrometheusServer(["127.0.0.1:9100"]) as prom:
        series = prom.wait_for_series("esault_tuples_processed_total > 0", timeout=15)

It runs the ``prometheus`` binary (Debian package ``prometheus``) on
127.0.0.1 with a free port, a temporary config that scrapes the given
``host:port`` targets every second, and temporary TSDB storage; leaving the
``with`` block kills it and deletes the directory. Waiting is always a
condition polled against a deadline, never a bare sleep.
"""

from __future__ import annotations

import json
import math
import re
import shutil
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

from esault.errors import ConfigError
from esault.testing.server_process import ServerProcess

PROMETHEUS_BINARY = "prometheus"
_POLL_INTERVAL = 0.1


class PrometheusError(AssertionError):
    """Prometheus answered an error, or a wait ran out of time."""


class PrometheusServer(ServerProcess):
    """One Prometheus process scraping ``targets`` (``"host:port"`` strings) at /metrics; started, paused and
    killed by its own pid as every test server is (ServerProcess)."""

    what = "prometheus"

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
        super().__init__(start_timeout=startup_timeout)
        self.targets = list(targets)
        self._poll_gate = threading.Event()
        self.scrape_interval = scrape_interval
        self.job = job
        self.binary = binary
        self._dir: Path | None = None

    @property
    def url(self) -> str:
        if self.process is None:
            raise PrometheusError("PrometheusServer is not running; use it as a context manager")
        return f"http://{self.address}"

    def command(self) -> list[str]:
        executable = shutil.which(self.binary)
        if executable is None:
            raise ConfigError(f"{self.binary!r} is not on PATH; install it with `apt-get install prometheus`")
        if self._dir is None:
            self._dir = Path(tempfile.mkdtemp(prefix="esault-prometheus-"))
        config = self._dir / "prometheus.yml"
        config.write_text(yaml.safe_dump(self.config()))
        return [
            executable,
            f"--config.file={config}",
            f"--storage.tsdb.path={self._dir / 'data'}",
            f"--web.listen-address={self.address}",
            "--storage.tsdb.retention.time=1h",
            "--log.level=warn",
        ]

    def probe(self) -> None:
        with urllib.request.urlopen(f"http://{self.address}/-/ready", timeout=1) as response:
            if response.status != 200:
                raise PrometheusError(f"/-/ready answered HTTP {response.status}")

    def stop(self) -> None:
        """Kill Prometheus and delete its config and storage. Idempotent."""
        super().stop()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def __enter__(self) -> PrometheusServer:
        return self.start()

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

