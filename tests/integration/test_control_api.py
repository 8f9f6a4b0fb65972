"""The driver's REST API on a running job: reads, operations, and every way a request can be wrong."""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.request

import pytest

from esault import KEY_SPACE_MAX, ConfigError
from esault.api import ControlApi
from esault.testing import wait_until
from test_split_merge import assert_exact, build, sequenced_items
from topology_parts import GATES


def call(url: str, method: str = "GET", body: object = None, token: str | None = None,
         raw: bytes | None = None) -> tuple[int, dict]:
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    request = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


@pytest.fixture
def api(cluster):
    server = ControlApi(lambda: cluster.jobs).start()
    yield server
    server.stop()


def test_reads_and_operations_through_the_api_keep_every_key_exact(cluster, config, api):
    keys, per_key = 100, 40
    items = sequenced_items(keys, per_key, seed=41)
    job = cluster.submit(build("api", items, "api", hold_at=len(items) // 2, parallelism=2), config)
    base = f"{api.url}/api/jobs/api"
    assert call(f"{api.url}/api/jobs") == (200, {"jobs": ["api"]})
    status, info = call(base)
    assert status == 200 and info["units"] == ["src", "check", "out"] and info["guarantee"] == "exactly_once"
    assert {"from": "src", "to": "check", "grouping": "key"} in info["edges"]
    status, units = call(f"{base}/units")
    spus = units["units"]["check"]["spus"]
    assert status == 200 and len(spus) == 2 and units["units"]["check"]["key_grouped"] is True
    assert sorted(iv for row in spus.values() for iv in row["intervals"])[0][0] == 0

    status, result = call(f"{base}/units/check/rescale", "POST", {"spus": 3})
    assert status == 200 and result["action"] == "assign_workload" and len(result["started"]) == 1
    assert len(job.spus("check")) == 3
    a, b, c = job.spus("check")
    half = (KEY_SPACE_MAX + 1) // 2
    status, result = call(f"{base}/units/check/workload", "POST",
                          {"assignment": {str(a): [[0, half - 1]], str(c): [[half, KEY_SPACE_MAX]]}})
    assert status == 200 and result["retired"] == [b]
    status, result = call(f"{base}/units/check/spus/{a}/split", "POST", {})
    assert status == 200 and result["giver"] == a
    status, result = call(f"{base}/units/check/spus/{a}/merge", "POST", {"into": c})
    assert status == 200 and result["receiver"] == c
    status, history = call(f"{base}/history")
    assert [r["action"] for r in history["reconfigurations"]] == ["assign_workload", "assign_workload", "split",
                                                                  "merge"]
    GATES["api"].set()
    assert job.wait(60), job.status()
    assert_exact("api", keys, per_key)


def test_a_swap_names_a_declared_version_and_each_key_goes_on_from_its_state(cluster, config, api):
    from test_assign_workload import swapped_exactly
    from topology_parts import SequenceCheckBoltV2

    keys, per_key = 60, 30
    items = sequenced_items(keys, per_key, seed=43)
    job = cluster.submit(build("swap", items, "swap", hold_at=len(items) // 2, versions={"v2": SequenceCheckBoltV2}),
                         config)
    base = f"{api.url}/api/jobs/swap/units"
    wait_until(lambda: job.status()["units"]["check"]["processed"] >= len(items) // 2, 30,
               message="the first half processed by the declared code")
    status, units = call(base)
    assert (units["units"]["check"]["versions"], units["units"]["check"]["version"]) == (["declared", "v2"], "declared")
    got, answer = call(f"{base}/check/swap", "POST", {"version": "SequenceCheckBoltV2"})
    assert got == 400 and "has no version 'SequenceCheckBoltV2'; declared: declared, v2" in answer["error"]
    status, result = call(f"{base}/check/swap", "POST", {"version": "v2"})
    assert status == 200 and result["action"] == "assign_logic" and len(result["retired"]) == 2
    assert call(base)[1]["units"]["check"]["version"] == "v2" and job.logic_version("check") == "v2"
    GATES["swap"].set()
    assert job.wait(60), job.status()
    assert_exact("swap", keys, per_key)
    assert swapped_exactly("swap") == keys * (per_key - per_key // 2), "the second half ran on the new code"


def test_every_bad_request_gets_a_clear_error_and_the_api_goes_on(cluster, config, api):
    items = sequenced_items(10, 2, seed=42)
    job = cluster.submit(build("bad", items, "bad", hold_at=len(items), parallelism=2), config)
    base = f"{api.url}/api/jobs/bad"
    spu = job.spus("check")[0]
    cases = [
        (f"{api.url}/api/jobs/nope", "GET", None, None, 404, "no job 'nope'; jobs: bad"),
        (f"{api.url}/api/nothing", "GET", None, None, 404, "no route /api/nothing"),
        (f"{base}/units/check/rescale", "GET", None, None, 405, "GET is not served at"),
        (f"{base}/units/check/rescale", "POST", None, b"{not json", 400, "the body is not JSON"),
        (f"{base}/units/check/rescale", "POST", None, b"[1, 2]", 400, "must be a JSON object"),
        (f"{base}/units/check/rescale", "POST", {}, None, 400, "the body needs 'spus'"),
        (f"{base}/units/check/rescale", "POST", {"spus": "3"}, None, 400, "'spus' must be a whole number"),
        (f"{base}/units/check/rescale", "POST", {"spus": True}, None, 400, "'spus' must be a whole number"),
        (f"{base}/units/out/rescale", "POST", {"spus": 2}, None, 409, "reads with global_grouping"),
        (f"{base}/units/check/workload", "POST", {"assignment": {"x": [[0, 1]]}}, None, 400,
         "assignment['x'] must map an SPU id"),
        (f"{base}/units/check/workload", "POST", {"assignment": {str(spu): [[0, 5]]}}, None, 409,
         "are assigned to no SPU"),
        (f"{base}/units/check/spus/{spu}/move", "POST", {"worker": "w1"}, None, 409, "runs every SPU in one process"),
        (f"{base}/units/check/spus/999999/split", "POST", {}, None, 404, "unit 'check' of job 'bad' has no SPU '999999'"),
    ]
    for url, method, body, raw, status, message in cases:
        got, answer = call(url, method, body, raw=raw)
        assert got == status and message in answer["error"], (url, body, raw, got, answer)
    # A body announced as 2 MiB is refused before a byte of it is read.
    connection = http.client.HTTPConnection(api.host, api.port, timeout=30)
    connection.putrequest("POST", "/api/jobs/bad/units/check/rescale")
    connection.putheader("Content-Length", str(2 << 20))
    connection.endheaders()
    response = connection.getresponse()
    assert response.status == 413 and "at most 1048576" in json.loads(response.read())["error"]
    connection.close()
    assert call(f"{base}/units")[0] == 200  # still serving


def test_a_token_guards_every_route_and_an_exposed_api_needs_one(cluster, config):
    with pytest.raises(ConfigError, match="not loopback, without a token"):
        ControlApi(lambda: cluster.jobs, host="0.0.0.0")
    server = ControlApi(lambda: cluster.jobs, token="s3cret").start()
    try:
        for token in (None, "wrong", "s3cret "):
            got, answer = call(f"{server.url}/api/jobs", token=token)
            assert got == 401 and "missing or wrong token" in answer["error"]
        assert call(f"{server.url}/api/jobs", token="s3cret") == (200, {"jobs": []})
        got, _ = call(f"{server.url}/api/jobs/x/units/check/rescale", "POST", {"spus": 2})
        assert got == 401
    finally:
        server.stop()
