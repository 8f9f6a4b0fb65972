"""The driver's REST API on a running job: reads, operations, and every way a request can be wrong."""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.request

import pytest

from esault import KEY_SPACE_MAX, ConfigError
from esault.errors import ScalingError
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
    assert units["units"]["check"]["reconfiguring"] is None  # the unit runs no operation now
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


def raw_call(api, method: str, path: str, body: bytes | None = None) -> tuple[int, dict | None, dict]:
    """Any method, any path, any bytes: (status, the JSON answer or None for a HEAD, the headers)."""
    connection = http.client.HTTPConnection(api.host, api.port, timeout=60)
    try:
        connection.putrequest(method, path, skip_accept_encoding=True)
        connection.putheader("Content-Length", str(len(body or b"")))
        connection.endheaders(body)
        response = connection.getresponse()
        data = response.read()
        headers = {k.lower(): v for k, v in response.getheaders()}
        assert headers.get("content-type") == "application/json", (method, path, response.status, data[:200])
        return response.status, (json.loads(data) if method != "HEAD" else None), headers
    finally:
        connection.close()


DEEP = b"[" * 2000 + b"]" * 2000
"""Nested deeper than json's recursion allows."""


def test_every_route_answers_404_for_what_it_does_not_find_and_405_with_json_for_every_other_method(cluster, config,
                                                                                                    api):
    items = sequenced_items(10, 2, seed=44)
    job = cluster.submit(build("routes", items, "routes", hold_at=len(items), parallelism=2), config)
    spu = job.spus("check")[0]
    routes = {  # path with {job}, {unit}, {spu} -> the method it serves
        "/": "GET", "/index.html": "GET", "/api/jobs": "GET", "/api/jobs/{job}": "GET",
        "/api/jobs/{job}/units": "GET", "/api/jobs/{job}/history": "GET",
        "/api/jobs/{job}/units/{unit}/rescale": "POST", "/api/jobs/{job}/units/{unit}/workload": "POST",
        "/api/jobs/{job}/units/{unit}/swap": "POST", "/api/jobs/{job}/units/{unit}/spus/{spu}/move": "POST",
        "/api/jobs/{job}/units/{unit}/spus/{spu}/split": "POST", "/api/jobs/{job}/units/{unit}/spus/{spu}/merge": "POST",
        "/api/jobs/{job}/savepoint": "POST",
    }
    good = {"job": "routes", "unit": "check", "spu": str(spu)}
    for template, served in routes.items():
        path = template.format(**good)
        for method in ("GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS", "FROB"):
            if method == served:
                continue
            status, answer, headers = raw_call(api, method, path, b'{"spus": 2}')
            assert (status, headers.get("allow")) == (405, served), (method, path, status, answer)
            assert answer is None or f"is not served" in answer["error"], (method, path, answer)
        if served == "POST":  # a body that cannot be parsed is a 400, whatever the route
            for body, says in ((DEEP, "nested too deeply"), (b"{not json", "the body is not JSON"),
                               (b"1" * 5000, "the body is not JSON"), (b"[1]", "must be a JSON object")):
                status, answer, _ = raw_call(api, "POST", path, body)
                assert status == 400 and says in answer["error"], (path, body[:20], status, answer)
        for name, wrong, says in (("job", "nosuch", "no job 'nosuch'; jobs: routes"),
                                  ("unit", "nosuch", "job 'routes' has no unit 'nosuch'; units: src, check, out"),
                                  ("spu", "424242", f"unit 'check' of job 'routes' has no SPU '424242'; its SPUs: "),
                                  ("spu", "9" * 5000, "has no SPU '99999"), ("spu", "x1", "has no SPU 'x1'")):
            if "{" + name + "}" not in template:
                continue
            path = template.format(**{**good, name: wrong})
            for body in (b'{"spus": 2, "worker": "w1", "version": "v2"}', DEEP):  # routed before it is parsed
                status, answer, _ = raw_call(api, served, path, body if served == "POST" else None)
                assert status == 404 and says in answer["error"], (path, status, answer)
    assert raw_call(api, "GET", "/api/nosuch")[:2] == (404, {"error": "no route /api/nosuch; start at GET /api/jobs"})
    assert raw_call(api, "GET", "/api/jobs/routes/units")[0] == 200  # still serving
    assert len(job.spus("check")) == 2 and not job.scaling_history  # nothing was applied
    GATES["routes"].set()
    assert job.wait(60), job.status()
    assert_exact("routes", 10, 2)
    job.stop()
    status, answer, _ = raw_call(api, "POST", f"/api/jobs/routes/units/check/spus/{spu}/split", b"{}")
    assert (status, answer) == (409, {"error": "job 'routes' has stopped: it takes no more operations"})


def test_numbers_beyond_their_limits_are_refused_with_409_naming_the_limit_before_anything_is_built(cluster,
                                                                                                   config, api):
    items = sequenced_items(10, 2, seed=45)
    job = cluster.submit(build("limits", items, "limits", hold_at=len(items), parallelism=2), config)
    base = f"{api.url}/api/jobs/limits/units/check"
    spu = job.spus("check")[0]
    many = {str(-i): [[i, i]] for i in range(1, 10)}
    cases = [
        ("rescale", {"spus": 10**12}, "rescale of 'check' to 1000000000000 SPUs: it runs at most 8 (its max_spus"),
        ("rescale", {"spus": 9}, "at most 8 (its max_spus; raise it with set_bolt(..., max_spus=N), up to "
                                 "MAX_SPUS=1024)"),
        ("rescale", {"spus": 0}, "give a whole number >= 1"),
        ("rescale", {"spus": -10**12}, "give a whole number >= 1"),
        ("workload", {"assignment": many}, "names 9 SPUs; 'check' runs at most 8"),
        ("workload", {"assignment": {str(spu): [[0, 10**30]]}}, f"range [0, {10**30}] is not within the key space"),
        ("workload", {"assignment": {str(spu): [[-1, 5]]}}, "is not within the key space: give whole numbers 0 <= lo"),
        ("workload", {"assignment": {"-" + "9" * 30: [[0, 5]]}}, None),  # an id of 31 digits: 400, not read
        (f"spus/{spu}/split", {"at": 2**31}, f"at {2**31}: give an SPU id and a hash 0 <= at <= {KEY_SPACE_MAX}"),
        (f"spus/{spu}/split", {"at": -1}, "give an SPU id and a hash 0 <= at"),
        (f"spus/{spu}/merge", {"into": 10**30}, f"SPU {10**30} is not in the table"),
        (f"spus/{spu}/move", {"worker": "w9"}, "there is no worker 'w9'"),
    ]
    for route, body, says in cases:
        status, answer = call(f"{base}/{route}", "POST", body)
        if says is None:
            assert status == 400 and "must map an SPU id" in answer["error"], (route, body, answer)
        else:
            assert status == 409 and says in answer["error"], (route, str(body)[:80], status, answer)
    with pytest.raises(ScalingError, match=r"rescale of 'check' to 1000000000 SPUs: it runs at most 8"):
        job.rescale("check", 10**9)
    with pytest.raises(ScalingError, match=r"names 1025 SPUs; 'check' runs at most 8"):
        job.assign_workload("check", {-i: [(i, i)] for i in range(1, 1026)})
    with pytest.raises(ScalingError, match=r"split of 'check' SPU .* at 10\*\*40|give an SPU id and a hash"):
        job.split("check", spu, 10**40)
    assert len(job.spus("check")) == 2 and not job.scaling_history  # nothing was applied
    GATES["limits"].set()
    assert job.wait(60), job.status()
    assert_exact("limits", 10, 2)


LIMITS_UNDER_A_MEMORY_CAP = r"""
import json, resource, sys, urllib.request, urllib.error
sys.path[:0] = {paths!r}
from esault import JobConfig, LocalCluster, ScalingError
from esault.api import ControlApi
from test_split_merge import build, sequenced_items
from topology_parts import GATES

def vm_bytes():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmSize:"))

with LocalCluster() as cluster:
    job = cluster.submit(build("capped", sequenced_items(4, 2, 1), "capped", hold_at=4),
                         JobConfig(data_dir={data!r}, elasticity=False))
    api = ControlApi(lambda: cluster.jobs).start()
    resource.setrlimit(resource.RLIMIT_AS, (vm_bytes() + (256 << 20), resource.RLIM_INFINITY))
    out = {{}}
    request = urllib.request.Request(f"{{api.url}}/api/jobs/capped/units/check/rescale",
                                     data=json.dumps({{"spus": 10**12}}).encode(), method="POST")
    try:
        urllib.request.urlopen(request, timeout=60)
    except urllib.error.HTTPError as err:
        out["api"] = [err.code, json.loads(err.read())["error"]]
    try:
        job.rescale("check", 10**9)
    except (ScalingError, MemoryError) as exc:
        out["python"] = type(exc).__name__ + ": " + str(exc)
    GATES["capped"].set()
    out["completed"] = job.wait(60)
    api.stop()
print(json.dumps(out))
"""


def test_a_huge_spu_count_is_refused_at_once_under_a_memory_cap_from_the_api_and_from_python(tmp_path):
    """Under a cap of 256 MiB above what the driver holds, one request for 10**12 SPUs (it allocated until
    MemoryError) and job.rescale(unit, 10**9) are refused at once, and the job goes on."""
    import subprocess
    import sys

    script = LIMITS_UNDER_A_MEMORY_CAP.format(paths=[p for p in sys.path if p], data=str(tmp_path / "data"))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["api"][0] == 409 and "it runs at most 8 (its max_spus" in out["api"][1], out
    assert out["python"].startswith("ScalingError: rescale of 'check' to 1000000000 SPUs: it runs at most 8"), out
    assert out["completed"] is True


def test_random_paths_methods_and_bodies_get_a_json_4xx_and_leave_the_job_exact(cluster, config, api):
    """A bounded fuzz (count and time): every answer that is not a read of what exists is JSON with a 4xx
    code, nothing is applied, and the job's every key stays exact."""
    import random
    import time
    from urllib.parse import quote, unquote

    keys, per_key = 40, 10
    items = sequenced_items(keys, per_key, seed=46)
    job = cluster.submit(build("fuzz", items, "fuzz", hold_at=len(items) // 2, parallelism=2), config)
    wait_until(lambda: job.status()["units"]["check"]["processed"] >= len(items) // 2, 30, message="half processed")
    rng = random.Random(2511)
    spus = [str(s) for s in job.spus("check")]
    words = ["fuzz", "check", "src", "out", "nosuch", "api", "jobs", "units", "spus", "rescale", "workload", "swap",
             "move", "split", "merge", "savepoint", "history", "", "..", ".", "-1", "0", "9" * 40, "x" * 300, "é",
             "%00", "%2e%2e", "%66uzz", "a b", "?q=1", "#frag", *spus]
    templates = ["/api/jobs/{}", "/api/jobs/{}/{}", "/api/jobs/{}/units/{}/{}", "/api/jobs/{}/units/{}/spus/{}/{}",
                 "/{}", "/api/{}/{}", "/{}/{}/{}/{}/{}/{}"]
    reads = {"/", "/index.html", "/api/jobs", "/api/jobs/fuzz", "/api/jobs/fuzz/units", "/api/jobs/fuzz/history"}

    def junk(depth: int = 0):
        makers = [lambda: None, lambda: rng.random() < 0.5,
                  lambda: rng.choice([0, -1, 10**rng.randrange(1, 60), -(10**40), 2**31]),
                  lambda: rng.choice([float("nan"), float("inf"), -0.5, 1e308]),
                  lambda: rng.choice(["", "v2", "declared2", "w1", "é" * 50]), lambda: "x" * rng.randrange(0, 2000)]
        if depth < 4:
            makers += [lambda: [junk(depth + 1) for _ in range(rng.randrange(4))],
                       lambda: {rng.choice(["spus", "at", "into", "assignment", "1", "-1"]): junk(depth + 1)
                                for _ in range(3)},
                       lambda: {"spus": junk(depth + 1)}]
        return rng.choice(makers)()

    invalid = {  # every field an operation reads, with a value it must refuse
        "spus": lambda: rng.choice([0, -3, 9, 10**rng.randrange(2, 40), "2", 2.0, True, None, [2], float("nan")]),
        "assignment": lambda: rng.choice([{}, [], "x", {spus[0]: [[0, 5]]}, {"a": [[0, 1]]},
                                          {spus[0]: [[0, 2**31]]}, {str(-i): [[i, i]] for i in range(1, 12)},
                                          {"-" + "9" * 30: [[0, 1]]}, {spus[0]: [[-1, 2**31 - 1]]}]),
        "worker": lambda: rng.choice(["w1", "", "driver", 5, None, "x" * 500]),
        "version": lambda: rng.choice(["v2", "", 3, None, "Declared", "../declared"]),
        "at": lambda: rng.choice([-1, 2**31, 10**50, "5", 1.5, True, [1]]),
        "into": lambda: rng.choice([10**30, "3", -(10**20), 1.5, [], 424242]),
        "stop": lambda: rng.choice(["yes", 1, 0, "false", [], {}]),
    }

    def body() -> bytes:
        kind = rng.randrange(6)
        if kind == 0:
            return DEEP
        if kind == 1:
            return bytes(rng.randrange(256) for _ in range(rng.randrange(0, 200)))
        if kind == 2:
            return json.dumps(junk()).encode()
        fields = {rng.choice(["x", "é", "1"]): junk() for _ in range(rng.randrange(3))}
        fields.update({name: make() for name, make in invalid.items()})  # what each route reads: refused
        return json.dumps(fields).encode()

    started, asked = time.monotonic(), 0
    while asked < 400 and time.monotonic() - started < 60:
        asked += 1
        template = rng.choice(templates)
        path = template.format(*(rng.choice(words) for _ in range(template.count("{}"))))
        if rng.random() < 0.2 or not path.isascii():
            path = quote(path, safe="/%?#")
        method = rng.choice(["GET", "POST", "POST", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS", "FROB"])
        data = body() if method != "GET" or rng.random() < 0.2 else None
        if method == "GET" and unquote(path.split("?", 1)[0]) in reads:
            continue  # a read of what exists: 200 (tested above)
        try:
            status, answer, _ = raw_call(api, method, path, data)
        except http.client.InvalidURL:
            continue  # the client refuses to send it (a space, a control character)
        assert 400 <= status < 500, (method, path, (data or b"")[:200], status, answer)
        assert answer is None or isinstance(answer.get("error"), str), (method, path, answer)
    assert asked >= 100, f"only {asked} requests in 60 s"
    assert len(job.spus("check")) == 2 and not job.scaling_history, "nothing was applied"
    assert raw_call(api, "GET", "/api/jobs/fuzz/units")[0] == 200  # still serving
    GATES["fuzz"].set()
    assert job.wait(60), job.status()
    assert_exact("fuzz", keys, per_key)
