"""A small client of the driver's REST API, for the `esault rescale/move/assign` commands."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from esault.errors import ConfigError, EsaultError, ScalingError


def call(base_url: str, path: str, body: dict[str, Any] | None = None, token: str | None = None,
         timeout: float = 120.0) -> dict[str, Any]:
    """POST `body` (or GET without one) to base_url + path; the answer's JSON, or the server's error raised
    as ScalingError (the operation was refused or aborted) or EsaultError (anything else)."""
    if not base_url.startswith(("http://", "https://")):
        raise ConfigError(f"the API address must be a URL such as http://127.0.0.1:8088, got {base_url!r} "
                          "(esault run --api-port prints it)")
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(base_url.rstrip("/") + path, data=data, method="GET" if data is None else "POST")
    if data is not None:
        request.add_header("Content-Type", "application/json")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as err:
        try:
            message = json.loads(err.read()).get("error", err.reason)
        except ValueError:
            message = str(err.reason)
        raise (ScalingError if err.code == 409 else EsaultError)(f"{message} (HTTP {err.code})") from None
    except urllib.error.URLError as err:
        raise EsaultError(f"no esault API answers at {base_url}: {err.reason}") from None


def describe(result: dict[str, Any]) -> str:
    moves = "; ".join(f"[{lo}, {hi}] {g}->{r}" for lo, hi, g, r in result.get("moves", []))
    return (f"{result['action']} of {result['unit']!r}: {result['moved_keys']} keys moved in {result['ms']:.1f} ms "
            f"(moved keys paused {result['paused_ms']:.1f} ms); started {result['started'] or '-'}, "
            f"retired {result['retired'] or '-'}; moves: {moves or '-'}")
