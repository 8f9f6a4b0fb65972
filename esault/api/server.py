"""The driver's REST API: read a running job's layout, metrics and history; apply control-plane operations.

Loopback by default. Bound to any other address it refuses to start without a
token, and then every request must carry ``Authorization: Bearer <token>``
(compared in constant time). Nothing in a request is trusted: bodies are
capped, parsed as JSON and checked field by field; no request names code to
load. A request is routed before its body is parsed. Errors come back as JSON
``{"error": ...}`` with 400 (bad request, a body that cannot be parsed), 401
(no or wrong token), 404 (no such job, unit, SPU or path), 405 (a method the
path does not serve), 409 (the operation was refused or aborted, a number
beyond its limit), 413 (body too large) or 500. Routes: docs/CONTROL_PLANE.md
("REST API").
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Mapping
from urllib.parse import unquote

from esault.control.runner import decisions_as_dicts, take_snapshot
from esault.control.snapshot import SnapshotBuilder
from esault.errors import ConfigError, EsaultError, RoutingError, ScalingError

log = logging.getLogger("esault.api")

MAX_BODY_BYTES = 1 << 20
"""A request body larger than this is refused unread (413): an assignment of many ranges fits easily."""

WEB_PAGE = Path(__file__).with_name("web") / "index.html"


class ApiError(Exception):
    def __init__(self, status: int, message: str, allow: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.allow = allow
        """405: the methods the path serves (the Allow header)."""


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class ControlApi:
    """Serves the jobs `jobs()` returns (name -> Job) over HTTP on a daemon thread."""

    def __init__(self, jobs: Callable[[], Mapping[str, Any]], host: str = "127.0.0.1", port: int = 0,
                 token: str | None = None) -> None:
        if not _is_loopback(host) and not token:
            raise ConfigError(f"the REST API would listen on {host}, which is not loopback, without a token: "
                              "give a token (--api-token) or bind to 127.0.0.1")
        self.jobs = jobs
        self.token = token
        self._builders: dict[str, SnapshotBuilder] = {}
        self._lock = threading.Lock()
        api = self

        class Handler(BaseHTTPRequestHandler):
            server_version = "esault"

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                api._handle(self, "GET")

            def do_POST(self) -> None:  # noqa: N802
                api._handle(self, "POST")

            def do_PUT(self) -> None:  # noqa: N802
                api._handle(self, "PUT")

            def do_DELETE(self) -> None:  # noqa: N802
                api._handle(self, "DELETE")

            def do_PATCH(self) -> None:  # noqa: N802
                api._handle(self, "PATCH")

            def do_HEAD(self) -> None:  # noqa: N802
                api._handle(self, "HEAD")

            def do_OPTIONS(self) -> None:  # noqa: N802
                api._handle(self, "OPTIONS")

            def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
                """What http.server answers itself (a malformed request line, a method it has no handler for,
                headers too long): JSON as every other answer, and 405 for a method, as documented."""
                self.close_connection = True
                if code == 501:  # no do_<method>: the method is not served, or the path is not there
                    path = (self.path or "").split("?", 1)[0]
                    allowed = api._allowed(path)
                    if not allowed:
                        return api._send_error(self, 404, f"no route {path:.200}; start at GET /api/jobs")
                    return api._send_error(self, 405, f"{self.command!r:.40} is not served at {path:.200}; use "
                                                      f"{' or '.join(allowed)}", ", ".join(allowed))
                api._send_error(self, code, message or explain or "bad request")

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                log.debug("api %s " + format, self.client_address[0], *args)

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self.host, self.port = self._server.server_address[:2]
        self._thread = threading.Thread(target=self._server.serve_forever, name="esault-api", daemon=True)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> "ControlApi":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    # --- plumbing --------------------------------------------------------------------

    def _handle(self, request: BaseHTTPRequestHandler, method: str) -> None:
        """Route first, then parse: an unknown job, unit, SPU or path is a 404 and a wrong method a 405 whatever
        the body; only then is the body parsed (a body that cannot be: 400)."""
        try:
            self._check_token(request)
            raw = self._read_body(request)
            path = request.path.split("?", 1)[0]
            handler, args = self._route(method, path)
            if handler is None:
                return self._send(request, 200, WEB_PAGE.read_bytes(), "text/html; charset=utf-8")
            body = self._parse_json(raw) if method == "POST" else {}
            payload = handler(body=body, **args)
            self._send(request, 200, json.dumps(payload, default=_plain).encode(), "application/json")
        except ApiError as exc:
            self._send_error(request, exc.status, str(exc), exc.allow)
        except (ScalingError, RoutingError) as exc:  # refused: a bound, an SPU or hash the unit has not
            self._send_error(request, 409, str(exc))
        except EsaultError as exc:
            self._send_error(request, 400, str(exc))
        except Exception as exc:  # noqa: BLE001 - one bad request never stops the API
            log.exception("api: %s %s failed", method, request.path)
            self._send_error(request, 500, f"{type(exc).__name__}: {exc}")

    def _check_token(self, request: BaseHTTPRequestHandler) -> None:
        if self.token is None:
            return
        given = request.headers.get("Authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {self.token}".encode()):
            raise ApiError(401, "missing or wrong token: send 'Authorization: Bearer <token>'")

    @staticmethod
    def _read_body(request: BaseHTTPRequestHandler) -> bytes:
        """The body's bytes, read whatever the route (a reply before them would reset the connection), at most
        MAX_BODY_BYTES: a larger one is refused unread."""
        try:
            length = int(request.headers.get("Content-Length", "0"))
        except ValueError:
            raise ApiError(400, "Content-Length is not a number") from None
        if length > MAX_BODY_BYTES:
            request.close_connection = True
            raise ApiError(413, f"the body is {length} bytes; at most {MAX_BODY_BYTES} are accepted")
        return request.rfile.read(length) if length > 0 else b""

    @staticmethod
    def _parse_json(raw: bytes) -> dict[str, Any]:
        try:
            body = json.loads(raw or b"{}")
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            why = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
            raise ApiError(400, f"the body is not JSON ({why:.200}); send an object such as {{\"spus\": 3}}") from None
        if not isinstance(body, dict):
            raise ApiError(400, f"the body must be a JSON object, got {type(body).__name__}")
        return body

    @staticmethod
    def _send(request: BaseHTTPRequestHandler, status: int, data: bytes, kind: str,
              allow: str | None = None) -> None:
        request.send_response(status)
        request.send_header("Content-Type", kind)
        request.send_header("Content-Length", str(len(data)))
        request.send_header("Cache-Control", "no-store")
        if allow:
            request.send_header("Allow", allow)
        request.end_headers()
        if request.command != "HEAD":  # a HEAD answer has the headers only
            request.wfile.write(data)

    def _send_error(self, request: BaseHTTPRequestHandler, status: int, message: str,
                    allow: str | None = None) -> None:
        try:
            self._send(request, status, json.dumps({"error": message}).encode(), "application/json", allow)
        except OSError:
            pass  # the client went away

    # --- routes ----------------------------------------------------------------------

    _ROUTES = [
        ("GET", re.compile(r"/|/index\.html"), "page"),
        ("GET", re.compile(r"/api/jobs"), "list_jobs"),
        ("GET", re.compile(r"/api/jobs/(?P<job>[^/]+)"), "show_job"),
        ("GET", re.compile(r"/api/jobs/(?P<job>[^/]+)/units"), "units"),
        ("GET", re.compile(r"/api/jobs/(?P<job>[^/]+)/history"), "history"),
        ("POST", re.compile(r"/api/jobs/(?P<job>[^/]+)/units/(?P<unit>[^/]+)/rescale"), "rescale"),
        ("POST", re.compile(r"/api/jobs/(?P<job>[^/]+)/units/(?P<unit>[^/]+)/workload"), "workload"),
        ("POST", re.compile(r"/api/jobs/(?P<job>[^/]+)/units/(?P<unit>[^/]+)/swap"), "swap"),
        ("POST", re.compile(r"/api/jobs/(?P<job>[^/]+)/units/(?P<unit>[^/]+)/spus/(?P<spu>[^/]+)/move"), "move"),
        ("POST", re.compile(r"/api/jobs/(?P<job>[^/]+)/units/(?P<unit>[^/]+)/spus/(?P<spu>[^/]+)/split"), "split"),
        ("POST", re.compile(r"/api/jobs/(?P<job>[^/]+)/units/(?P<unit>[^/]+)/spus/(?P<spu>[^/]+)/merge"), "merge"),
        ("POST", re.compile(r"/api/jobs/(?P<job>[^/]+)/savepoint"), "savepoint"),
    ]

    def _route(self, method: str, path: str) -> tuple[Callable[..., Any] | None, dict[str, Any]]:
        """The handler for `method` at `path` (None: the web page) and its arguments, the job, unit and SPU
        the path names looked up: 404 for one that is not there, 405 for a method the path does not serve."""
        allowed = []
        for verb, pattern, name in self._ROUTES:
            match = pattern.fullmatch(path)
            if not match:
                continue
            if verb != method:
                allowed.append(verb)
                continue
            args: dict[str, Any] = {key: unquote(value) for key, value in match.groupdict().items()}  # %-quoted
            if "job" in args:
                args["job"] = self._find_job(args["job"])
                if verb == "POST" and getattr(args["job"], "stopped", False):
                    raise ApiError(409, f"job {args['job'].name!r} has stopped: it takes no more operations")
            if "unit" in args:
                _find_unit(args["job"], args["unit"])
            if "spu" in args:
                args["spu"] = _find_spu(args["job"], args["unit"], args["spu"])
            return (None if name == "page" else getattr(self, f"_{name}")), args
        if allowed:
            methods = sorted(set(allowed))
            raise ApiError(405, f"{method} is not served at {path:.200}; use {' or '.join(methods)}",
                           allow=", ".join(methods))
        raise ApiError(404, f"no route {path:.200}; start at GET /api/jobs")

    def _allowed(self, path: str) -> list[str]:
        """The methods served at `path` (none: no such path)."""
        return sorted({verb for verb, pattern, _ in self._ROUTES if pattern.fullmatch(path)})

    def _find_job(self, name: str) -> Any:
        jobs = self.jobs()
        if name not in jobs:
            raise ApiError(404, f"no job {name!r:.200}; jobs: {', '.join(sorted(jobs)) or 'none'}")
        return jobs[name]

    # --- reads -----------------------------------------------------------------------

    def _list_jobs(self, body: dict) -> Any:
        return {"jobs": sorted(self.jobs())}

    def _show_job(self, job: Any, body: dict) -> Any:
        status = job.status()
        topology = job.topology
        edges = [{"from": i.source, "to": spec.name, "grouping": i.grouping.value}
                 for spec in topology.units for i in spec.inputs]
        return {"name": job.name, "guarantee": status["guarantee"], "checkpoints": status["checkpoints"],
                "pending_trees": status["pending_trees"], "spouts_finished": status["spouts_finished"],
                "failures": status.get("failures", []),
                "units": [spec.name for spec in topology.units], "edges": edges,
                "workers": job.workers(), "capacity": status.get("capacity")}

    def _units(self, job: Any, body: dict) -> Any:
        units = {}
        for name, unit in job.status()["units"].items():
            spec = job.topology.unit(name)
            units[name] = {"kind": unit["kind"], "key_grouped": spec.per_key,
                           "chained_into": unit.get("chained_into"), "reconfiguring": unit.get("reconfiguring"),
                           "versions": sorted(spec.versions), "version": job.logic_version(name),
                           "totals": {k: unit[k] for k in ("emitted", "processed", "failed", "pes") if k in unit},
                           "spus": {str(spu): _spu_row(row) for spu, row in unit["spus"].items()}}
            if "partitions" in unit:  # a partitioned source (Kafka): a row per partition, with its SPU
                units[name]["partitions"] = unit["partitions"]
            if unit.get("waiting"):  # stalled outside esault (a broker that does not answer): what, since when
                units[name]["waiting"] = unit["waiting"]
        return {"units": units, "rates": self._rates(job)}

    def _rates(self, job: Any) -> dict[str, dict[str, float | None]]:
        """Per unit and SPU, tuples/s since this API's previous read of the job (None on the first)."""
        with self._lock:
            builder = self._builders.setdefault(job.name, SnapshotBuilder())
            snapshot = take_snapshot(job, builder)
        return {name: {str(spu): (m.processed_rate if unit.kind == "bolt" else m.emitted_rate)
                       for spu, m in unit.spus.items()} for name, unit in snapshot.units.items()}

    def _history(self, job: Any, body: dict) -> Any:
        return {"reconfigurations": [_result(r) for r in job.scaling_history],
                "controllers": [d for runner in job.controllers for d in decisions_as_dicts(runner.decisions)]}

    # --- operations ------------------------------------------------------------------

    def _rescale(self, job: Any, body: dict, unit: str) -> Any:
        spus = _field(body, "spus", int, "a whole number of SPUs, e.g. {\"spus\": 3}")
        return _result(job.rescale(unit, spus, reason="manual"))

    def _workload(self, job: Any, body: dict, unit: str) -> Any:
        raw = _field(body, "assignment", dict, 'an object {"<spu>": [[lo, hi], ...]}')
        assignment: dict[int, list[tuple[int, int]]] = {}
        for spu, ranges in raw.items():
            if not (_NEW_OR_OLD_SPU_ID.fullmatch(spu) and isinstance(ranges, list)
                    and all(isinstance(r, list) and len(r) == 2 and all(_is_whole(x) for x in r) for r in ranges)):
                raise ApiError(400, f"assignment[{spu!r:.40}] must map an SPU id to [[lo, hi], ...] of whole numbers "
                                    f"(a negative id starts a new SPU), got {ranges!r:.100}")
            assignment[int(spu)] = [(lo, hi) for lo, hi in ranges]
        return _result(job.assign_workload(unit, assignment))

    def _swap(self, job: Any, body: dict, unit: str) -> Any:
        version = _field(body, "version", str, 'the name of a version the topology declares, e.g. {"version": "v2"}')
        job.topology.unit(unit).version(version)  # an unknown version is the client's mistake: 400
        return _result(job.swap(unit, version))

    def _move(self, job: Any, body: dict, unit: str, spu: int) -> Any:
        worker = _field(body, "worker", str, 'a worker name, e.g. {"worker": "w2"}')
        return _result(job.assign_resource(unit, spu, worker))

    def _split(self, job: Any, body: dict, unit: str, spu: int) -> Any:
        at = _field(body, "at", int, "a hash, or leave it out", required=False)
        return _result(job.split(unit, spu, at))

    def _merge(self, job: Any, body: dict, unit: str, spu: int) -> Any:
        into = _field(body, "into", int, "an SPU id, or leave it out", required=False)
        return _result(job.merge(unit, spu, into))

    def _savepoint(self, job: Any, body: dict) -> Any:
        stop = _field(body, "stop", bool, "true or false", required=False) or False
        return {"epoch": job.savepoint(stop=stop, timeout=120)}


_SPU_ID = re.compile(r"[0-9]{1,18}")
_NEW_OR_OLD_SPU_ID = re.compile(r"-?[0-9]{1,18}")
"""SPU ids as a path or a JSON key holds them: their digits bounded before int() reads them."""


def _is_whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _find_unit(job: Any, unit: str) -> None:
    if unit not in {spec.name for spec in job.topology.units}:
        raise ApiError(404, f"job {job.name!r} has no unit {unit!r:.200}; units: "
                            f"{', '.join(spec.name for spec in job.topology.units)}")


def _find_spu(job: Any, unit: str, spu: str) -> int:
    """The SPU id the path names, if `unit` runs it now (the id's digits bounded before they are read)."""
    spus = job.spus(unit)
    if not (_SPU_ID.fullmatch(spu) and int(spu) in spus):
        raise ApiError(404, f"unit {unit!r} of job {job.name!r} has no SPU {spu!r:.40}; its SPUs: "
                            f"{', '.join(map(str, spus)) or 'none'}")
    return int(spu)


def _field(body: dict[str, Any], name: str, kind: type, expected: str, required: bool = True) -> Any:
    if name not in body or body[name] is None:
        if required:
            raise ApiError(400, f"the body needs {name!r}: {expected}")
        return None
    value = body[name]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ApiError(400, f"{name!r} must be {expected}; got {value!r:.100}")
    return value


def _spu_row(row: dict[str, Any]) -> dict[str, Any]:
    keep = ("worker", "pid", "interval", "intervals", "processed", "emitted", "pes", "queue_depth", "busy_us",
            "partitions", "waiting")
    return {k: row.get(k) for k in keep if k in row}


def _result(result: Any) -> dict[str, Any]:
    return {"action": result.action, "unit": result.unit, "moves": [list(m) for m in result.moves],
            "started": list(result.started), "retired": list(result.retired), "moved_keys": result.moved_keys,
            "paused_ms": result.paused_seconds * 1000, "ms": result.seconds * 1000, "reason": result.reason,
            "giver": result.giver, "receiver": result.receiver}


def _plain(value: Any) -> Any:
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)
