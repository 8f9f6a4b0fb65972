"""The /metrics HTTP endpoint of one esault process (driver or worker).

prometheus_client's WSGI app and threading WSGI server, served by wsgiref on a
daemon thread; nothing here parses HTTP. (Not start_http_server: its thread
polls for shutdown every 0.5 s, which makes stop() slow.)
"""

from __future__ import annotations

import ipaddress
import socket
import threading
from dataclasses import dataclass, field
from collections.abc import Iterable, Iterator
from types import TracebackType
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.metrics_core import Metric
from prometheus_client.exposition import ThreadingWSGIServer

from esault.errors import ConfigError
from esault.metrics.collector import SpuStatsCollector, register_stats_collector
from esault.metrics.forwarded import FORWARDED_METRICS, WithForwardedSamples
from esault.metrics.registry import REGISTRY
from esault.metrics.stats import STATS, StatsRegistry

_SHUTDOWN_TIMEOUT = 5.0
_POLL_INTERVAL = 0.05
"""How often the serving thread checks for stop(); bounds stop()'s latency."""


@dataclass(eq=False)
class MetricsServer:
    """A running /metrics endpoint. Stop it with ``stop()`` or use it as a context manager."""

    host: str
    port: int
    _httpd: WSGIServer = field(repr=False)
    _thread: threading.Thread = field(repr=False)
    _stopped: bool = field(default=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def url(self) -> str:
        """The scrape URL; for a wildcard bind (0.0.0.0, ::) it names loopback."""
        return f"http://{_url_host(self.host)}:{self.port}/metrics"

    @property
    def target(self) -> str:
        """``host:port`` as a Prometheus static_configs target."""
        return f"{_url_host(self.host)}:{self.port}"

    def stop(self) -> None:
        """Stop serving and close the socket. Idempotent; returns once the port is free."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(_SHUTDOWN_TIMEOUT)

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def start_metrics_server(
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    registry: CollectorRegistry = REGISTRY,
    stats: StatsRegistry = STATS,
    worker: bool = False,
) -> MetricsServer:
    """Serve ``registry`` (with the SpuStats collector of ``stats``) on http://host:port/metrics.

    ``port=0`` picks a free port; read it back from ``.port``. Bind ``0.0.0.0``
    inside a container so Prometheus can reach it. Registering the collector is
    idempotent, so calling this twice in one process serves the same series twice.
    ``worker=True`` (a worker of a cluster) leaves out what the driver serves for
    it from its heartbeats -- its SPUs' series and the forwarded metrics
    (esault.metrics.forwarded) -- since serving them twice would double every
    sum over both scrape targets; the rest (process_*, python_gc_*) is served.
    Raises ConfigError if the port is invalid or already in use.
    """
    if not isinstance(port, int) or isinstance(port, bool) or not 0 <= port <= 65535:
        raise ConfigError(f"metrics port must be 0-65535 (0 = pick a free port), got {port!r}")
    # The process registry also carries the workers' forwarded samples (a driver's; empty elsewhere).
    served: Any = WithForwardedSamples(registry) if registry is REGISTRY else registry
    if worker:
        served = _WithoutDriverExported(served)
    else:
        register_stats_collector(registry, stats)
    try:
        family, bind_host = _best_family(host, port)

        class _Server(ThreadingWSGIServer):
            address_family = family

        httpd = make_server(bind_host, port, make_wsgi_app(served), _Server,
                            handler_class=_QuietHandler)
    except OSError as exc:
        raise ConfigError(
            f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}; "
            "pick another --metrics-port, or 0 for any free port"
        ) from None
    thread = threading.Thread(
        target=httpd.serve_forever,
        kwargs={"poll_interval": _POLL_INTERVAL},
        name=f"esault-metrics-{httpd.server_port}",
        daemon=True,
    )
    thread.start()
    return MetricsServer(host=host, port=httpd.server_port, _httpd=httpd, _thread=thread)


class _WithoutDriverExported:
    """A view of a CollectorRegistry without the families the driver exports for a worker: the SpuStats
    collector's (whoever registered it) and the forwarded metrics."""

    _NAMES = frozenset(family.name for family in SpuStatsCollector(StatsRegistry()).describe()) | frozenset(
        family.name for metric in FORWARDED_METRICS for family in metric.describe())

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry

    def collect(self) -> Iterator[Metric]:
        return (family for family in self.registry.collect() if family.name not in self._NAMES)

    def restricted_registry(self, names: Iterable[str]) -> Any:
        return _WithoutDriverExported(self.registry.restricted_registry(names))


class _QuietHandler(WSGIRequestHandler):
    """Does not log every scrape to stderr."""

    def log_message(self, format: str, *args: Any) -> None:
        pass


def _best_family(host: str, port: int) -> tuple[socket.AddressFamily, str]:
    """IPv4 or IPv6, whichever ``host`` resolves to first (as prometheus_client does)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, _, _, _, sockaddr = infos[0]
    return family, str(sockaddr[0])


def _url_host(host: str) -> str:
    if host in ("", "0.0.0.0"):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    try:
        if ipaddress.ip_address(host).version == 6:
            return f"[{host}]"
    except ValueError:
        pass
    return host
