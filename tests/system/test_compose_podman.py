"""The real docker-compose.yml runs under podman, offline: the word count end to end in containers.

deploy/podman/build-images.sh builds every image with no registry and no package index in the
builds (a debootstrap base image, cached in podman's store under a hash of its recipe; a
wheelhouse built on the host). podman-compose then starts docker-compose.yml with
deploy/podman/compose.offline.yml (the images that cannot be pulled) and a small override
this test writes (its own keys, free host ports): the driver, the workers (replicas of one service
sharing an enrollment key: two, or three with `--scale worker=3` on the quiet run), a Spark standalone
master and worker, Prometheus and the Kafka-compatible broker.

Checked: the healthchecks pass; `esault status` answers through the published port; a worker
container killed with kill -9 mid-job is restarted by compose's restart policy and the job
ends exact; the Spark table, read back with Spark SQL on the compose Spark cluster, holds every
running count exactly once; every Prometheus target is up; every PromQL expression of the
shipped Grafana dashboards returned data while the job ran; `down -v` leaves nothing behind.

Run as root on a Debian host with podman, runc, the dnsname plugin, debootstrap and
podman-compose (.ci/run installs them): python -m pytest -m compose tests/system/test_compose_podman.py
The build and start-up times are printed (-s) and written to /tmp/esault-compose-timings.json.

The Kafka example (examples/kafka_clicks.py) runs in the compose file's kafka-clicks service
(profile kafka) against the broker, with its input topic filled by this test.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from esault.testing import wait_until
from cpu_load import busy_cores
from prometheus_server import DASHBOARDS, dashboard_queries, has_data, with_grafana_variables

pytestmark = [pytest.mark.compose, pytest.mark.timeout(1800)]  # not `system`: -m system leaves it out too

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "examples"))
import kafka_clicks  # noqa: E402
import wordcount  # noqa: E402

PROJECT = "esault-compose-test"
TAG = "compose-test"
SPARK_VERSION = "4.0.1"
CONTAINERS_CONF = REPO / "deploy" / "podman" / "containers.conf"
OFFLINE_OVERRIDE = REPO / "deploy" / "podman" / "compose.offline.yml"
SERVICES = ["driver", "worker-1", "worker-2", "spark-master", "spark-worker", "prometheus", "broker"]
HEALTHCHECKED = ["driver", "broker", "objects"]
IMAGES = ["esault", "esault-broker", "esault-objects", "esault-spark", "esault-prometheus"]  # build-images.sh
TIMINGS = Path("/tmp/esault-compose-timings.json")
RATE_WINDOW = "30s"
"""$__rate_interval for the compose Prometheus's 5 s scrape: enough samples for rate() and quantiles."""

WORDS = sum(wordcount.oracle(20000).values())  # the driver's command runs the example's default: 20000 sentences


def run(*args: str, timeout: float = 120, check: bool = True, **kwargs: Any) -> subprocess.CompletedProcess:
    done = subprocess.run(args, capture_output=True, text=True, timeout=timeout, **kwargs)
    if check and done.returncode != 0:
        raise AssertionError(f"{' '.join(args)} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done


def missing_tools() -> list[str]:
    tools = ["podman", "runc", "debootstrap", "podman-compose"]
    missing = [tool for tool in tools if shutil.which(tool) is None]
    if not Path("/usr/lib/cni/dnsname").exists():
        missing.append("dnsname CNI plugin (golang-github-containernetworking-plugin-dnsname)")
    return missing


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Compose:
    """podman-compose on the real compose file plus the offline override and this test's override."""

    def __init__(self, override: Path, env: dict[str, str]) -> None:
        self.files = [REPO / "docker-compose.yml", OFFLINE_OVERRIDE, override]
        self.env = env

    def __call__(self, *args: str, timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess:
        files = [arg for path in self.files for arg in ("-f", str(path))]
        return run("podman-compose", "-p", PROJECT, *files, *args, timeout=timeout, check=check,
                   env=self.env, cwd=REPO)

    def container(self, service: str) -> str:
        """podman-compose's container of `service`; "worker-N" is replica N of the worker service."""
        replica = re.fullmatch(r"worker-(\d+)", service)
        return f"{PROJECT}_worker_{replica.group(1)}" if replica else f"{PROJECT}_{service}_1"

    def podman(self, *args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
        return run("podman", *args, timeout=timeout, check=check, env=self.env)

    def inspect(self, service: str) -> dict[str, Any]:
        return json.loads(self.podman("inspect", self.container(service)).stdout)[0]

    def log_of(self, service: str) -> str:
        """The service's whole log (the esault commands log to stderr)."""
        done = self.podman("logs", self.container(service), check=False)
        return done.stdout + done.stderr

    def logs(self) -> str:
        def tail(service: str) -> str:
            done = self.podman("logs", "--tail", "40", self.container(service), check=False)
            return (done.stdout + done.stderr)[-4000:]
        return "\n".join(f"--- {service}\n{tail(service)}" for service in SERVICES)


def leftovers(env: dict[str, str]) -> dict[str, list[str]]:
    """What podman still holds of the test's compose project."""
    label = f"label=io.podman.compose.project={PROJECT}"
    out = {}
    for kind, cmd in {"containers": ["ps", "-a"], "volumes": ["volume", "ls"], "networks": ["network", "ls"]}.items():
        listed = run("podman", *cmd, "--filter", label, "--format", "{{.Name}}" if kind != "containers"
                     else "{{.Names}}", env=env).stdout.split()
        out[kind] = listed
    return out


def write_override(tmp: Path, keys: Path, ports: dict[str, int], rate: int = 500, workers: int = 2) -> Path:
    """This test's own keys and free host ports, the word count's pace (`rate` sentences/s: a busy host
    starts the stack slower, and the job must still be running when the test kills a worker) and the worker
    replicas (what `--scale worker=N` also says, so that `down` knows them all: podman-compose's down removes
    the replicas its files name, and one left behind keeps the warehouse volume); everything else comes from
    the real files."""
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    secrets = {name: {"file": str(keys / Path(spec["file"]).name)} for name, spec in compose["secrets"].items()}
    text = yaml.safe_dump({"secrets": secrets})
    text += f"""
services:
  worker:
    deploy:
      mode: replicated
      replicas: {workers}
  driver:
    environment:
      WORDCOUNT_RATE: "{rate}"
    ports: !override
      - "127.0.0.1:{ports['status']}:5555"
      - "127.0.0.1:{ports['driver_metrics']}:9100"
  spark-master:
    ports: !override
      - "127.0.0.1:{ports['spark_master']}:8080"
  spark-worker:
    ports: !override
      - "127.0.0.1:{ports['spark_worker']}:8081"
  prometheus:
    ports: !override
      - "127.0.0.1:{ports['prometheus']}:9090"
"""
    path = tmp / "compose.test.yml"
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def env() -> dict[str, str]:
    missing = missing_tools()
    if missing:
        pytest.fail(f"the compose test needs {', '.join(missing)}: .ci/run installs them (apt-get install "
                    "podman runc golang-github-containernetworking-plugin-dnsname debootstrap catatonit; "
                    "pip install podman-compose)")
    if os.geteuid() != 0:
        pytest.fail("the compose test runs podman as root (debootstrap, rootful networks): run it as root")
    return {**os.environ, "CONTAINERS_CONF": str(CONTAINERS_CONF), "ESAULT_TAG": TAG,
            "SPARK_VERSION": SPARK_VERSION, "GRAFANA_ADMIN_PASSWORD": os.urandom(12).hex(),
            "OBJECTS_SECRET_KEY": os.urandom(12).hex()}


@pytest.fixture(scope="module")
def timings() -> Iterator[dict[str, Any]]:
    figures: dict[str, Any] = {}
    yield figures
    TIMINGS.write_text(json.dumps(figures, indent=2))
    print(f"\ncompose test timings: {json.dumps(figures)}")


@pytest.fixture(scope="module")
def images(env, timings) -> Iterator[None]:
    """Every image of the compose file, built once for both runs of the stack (the quiet and the busy one)."""
    try:
        started = time.monotonic()
        build = run(str(REPO / "deploy" / "podman" / "build-images.sh"), timeout=1200, env=env)
        timings["build_s"] = round(time.monotonic() - started, 1)
        timings["build_steps"] = [line for line in build.stderr.splitlines() if line.startswith("build-images:")]
        yield
    finally:
        # Only the base and dependencies images stay cached (each tagged by a hash of what makes it: a
        # changed wheelhouse makes a new dependencies image); the others are rebuilt each run.
        run("podman", "rmi", "-f", *(f"localhost/{name}:{TAG}" for name in IMAGES), check=False, env=env)
        run("podman", "image", "prune", "-f", check=False, env=env)


@pytest.fixture(scope="module", params=["quiet", "busy-cores"])
def stack(env, timings, images, tmp_path_factory, request) -> Iterator[tuple[Compose, dict[str, int], Path, bool]]:
    """The cluster, once on a quiet machine and once with every core kept busy by CPU hogs from before `up`
    to the end (issue 48's false success came from a busy host): there each job must be exact or fail loudly."""
    busy = request.param == "busy-cores"
    tmp = tmp_path_factory.mktemp("compose")
    keys = tmp / "keys"
    run(sys.executable, "-m", "esault.cli", "keys", "generate", str(keys), "--workers", "0", "--enroll")
    for secret in keys.glob("*.key_secret"):
        os.chown(secret, 185, 185)  # the images' uid: secrets are bind-mounted as they are (deploy/README.md)
    ports = {name: free_port() for name in ("status", "driver_metrics", "spark_master", "spark_worker", "prometheus")}
    compose = Compose(write_override(tmp, keys, ports, rate=300 if busy else 500, workers=2 if busy else 3), env)
    compose("down", "-v", "--remove-orphans", check=False)  # a previous run killed before its teardown
    try:
        with busy_cores(900) if busy else contextlib.nullcontext():
            started = time.monotonic()
            # The quiet run scales the workers with one number; the busy one runs the file's 2 replicas.
            compose("up", "-d", "--no-build", *(() if busy else ("--scale", "worker=3")))
            timings[f"up_s{'_busy' if busy else ''}"] = round(time.monotonic() - started, 1)
            yield compose, ports, keys, busy
    finally:
        compose("--profile", "kafka", "down", "-v", "--remove-orphans", "-t", "10", check=False)


def healthy(compose: Compose, service: str) -> bool:
    """One run of the service's compose healthcheck (podman runs none by itself without systemd)."""
    return compose.podman("healthcheck", "run", compose.container(service), check=False).returncode == 0


def status(keys: Path, ports: dict[str, int], gateway: str, wait: float = 10) -> subprocess.CompletedProcess:
    """`esault status` from the host through the published port; the driver replies to the bridge's address."""
    return run(sys.executable, "-m", "esault.cli", "status", f"127.0.0.1:{ports['status']}",
               "--secret-key", str(keys / "client-1.key_secret"), "--driver-key", str(keys / "driver.key"),
               "--advertise", gateway, "--timeout", str(wait), timeout=wait + 60, check=False)


def prometheus_api(ports: dict[str, int], endpoint: str, **params: str) -> Any:
    url = f"http://127.0.0.1:{ports['prometheus']}/api/v1/{endpoint}?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(url, timeout=10) as response:
        body = json.loads(response.read())
    assert body["status"] == "success", body
    return body["data"]


def range_has_data(matrix: list[dict[str, Any]]) -> bool:
    """A range-query result with at least one point a panel would draw (has_data, per point)."""
    return any(has_data([{"value": point}]) for series in matrix for point in series["values"])


ESAULT_SERVICES = ["driver", "worker-1", "worker-2"]
DIGEST = Path("/tmp/esault-compose-digest.txt")
"""What a failed run leaves for .ci/run to print last: each esault process's warnings and busy threads."""


def stall_digest(compose: Compose) -> str:
    """Each esault process's warnings and errors, and the stacks of its threads that are not idle.

    The esault command dumps every thread's stack on SIGUSR1 (faulthandler); catatonit, the
    containers' pid 1, forwards the signal. A thread parked in an actor's inbox or a timed wait
    is idle; the others show where a stalled job waits.
    """
    out = []
    for service in ESAULT_SERVICES:
        if not compose.inspect(service)["State"]["Running"]:
            out.append(f"=== {service}: not running")
            continue
        before = len(compose.log_of(service))
        compose.podman("kill", "--signal", "USR1", compose.container(service), check=False)

        def dump(service: str = service) -> str:
            new = compose.log_of(service)[before:]
            return new if "most recent call first" in new else ""
        try:
            stacks = wait_until(dump, 10, interval=0.5, message=f"{service}'s stack dump")
        except AssertionError:
            stacks = "(no stack dump)"
        events = [line[:300] for line in compose.log_of(service).splitlines()
                  if " WARNING " in line or " ERROR " in line]
        out.append(f"=== {service}: {len(events)} warnings/errors, first and last:")
        out += events[:8] + (["..."] if len(events) > 16 else []) + events[max(8, len(events) - 8):]
        out.append(f"=== {service}: busy threads")
        out += busy_threads(stacks)
    return "\n".join(out)


def busy_threads(dump: str) -> list[str]:
    """The threads of a faulthandler dump that are not waiting idle, each as its top frames."""
    threads, current = [], []
    for line in dump.splitlines():
        if line.startswith(("Thread 0x", "Current thread 0x")):
            current = [line]
            threads.append(current)
        elif line.startswith("  File ") and current:
            current.append(line.strip())
    idle = ("in _get", "in get", "in wait", "in poll", "in select", "in serve_forever", "in accept", "in _run_once")
    out = []
    for thread in threads:
        frames = thread[1:]
        if frames and frames[0].endswith(idle) and not any("esault/" in f for f in frames[:2]):
            continue
        out.append(thread[0])
        out += ["  " + f.replace("/opt/venv/lib/python3.11/site-packages/", "") for f in frames[:8]]
    return out or ["(every thread idle)"]


def enrolled_name(compose: Compose, service: str) -> str:
    """The name the driver gave a worker replica, from its log (the latest enrollment, after a restart)."""
    names = wait_until(lambda: re.findall(r"enrolled with the driver at \S+ as (replica-\d+)", compose.log_of(service)),
                       60, interval=1, message=f"{service} enrolled")
    return names[-1]


def worker_pid(compose: Compose, service: str) -> int:
    """The host pid of the `esault worker` process of one worker container (catatonit is its pid 1)."""
    top = compose.podman("top", compose.container(service), "hpid", "args").stdout.splitlines()[1:]
    pids = [int(line.split()[0]) for line in top if "esault worker" in line and "podman-init" not in line]
    assert len(pids) == 1, top
    return pids[0]


READ_BACK = """
import json, socket
from pyspark.sql import SparkSession
from spark_sink import analytics
spark = (SparkSession.builder.master("spark://spark-master:7077").appName("compose-test-read-back")
         .config("spark.driver.host", socket.gethostbyname(socket.gethostname()))
         .config("spark.executor.memory", "512m").getOrCreate())
analytics.open_table("word_counts", "/data/warehouse", spark)
rows = spark.sql("SELECT word, count, COUNT(*) AS n FROM word_counts GROUP BY word, count").collect()
print("ROWS " + json.dumps([[r.word, r["count"], r.n] for r in rows]))
spark.stop()
"""


def test_the_compose_cluster_runs_the_word_count_exactly_and_is_observable(stack, timings):
    compose, ports, keys, busy = stack
    started = time.monotonic()
    try:
        for service in HEALTHCHECKED:
            wait_until(lambda s=service: healthy(compose, s), 240, interval=2,
                       message=f"the {service} container's healthcheck passing")
        timings["up_to_healthy_s_busy" if busy else "up_to_healthy_s"] = round(time.monotonic() - started, 1)
        # The broker answers by its service name on the compose network (what the Kafka example will use).
        compose.podman("exec", compose.container("worker-2"), "python", "-c",
                       "import socket; socket.create_connection(('broker', 9092), 5)")
        network = f"{PROJECT}_default"
        gateway = json.loads(compose.podman("network", "inspect", network).stdout)[0]["subnets"][0]["gateway"]

        answer = status(keys, ports, gateway, wait=60 if busy else 10)  # a loaded driver answers later
        assert answer.returncode == 0 and "wordcount" in answer.stdout, (answer.stdout, answer.stderr)
        job_started = time.time()

        # Each replica enrolled: the driver named it and made its key (esault.cluster.enrollment).
        workers = 2 if busy else 3
        enrolled = {f"worker-{i}": enrolled_name(compose, f"worker-{i}") for i in range(1, workers + 1)}
        assert len(set(enrolled.values())) == workers, enrolled
        killed = enrolled["worker-1"]

        # kill -9 worker-1's esault process mid-job; compose's restart policy (on-failure) restarts it.
        restarts = compose.inspect("worker-1")["RestartCount"]
        os.kill(worker_pid(compose, "worker-1"), 9)
        assert compose.inspect("driver")["State"]["Running"], "the job ended before the worker was killed"
        wait_until(lambda: compose.inspect("worker-1")["RestartCount"] > restarts
                   and compose.inspect("worker-1")["State"]["Running"], 120, interval=1,
                   message="worker-1 restarted by its restart policy")
        # The restarted container is a new process from the same credential: it enrolls again under a new name,
        # the driver declares the killed one dead (its SPUs recovered) and lists the workers again.
        wait_until(lambda: re.search(rf"worker {killed} .*: declared dead", compose.log_of("driver")), 60, interval=1,
                   message=f"the driver retiring the killed {killed}")
        # (the driver answers once the rollback that the death started is through: the job's status asks its
        # units, which the rollback keeps busy; with the Spark sink that takes up to ~25 s here)
        rejoined = status(keys, ports, gateway, wait=90)
        assert rejoined.returncode == 0 and "wordcount" in rejoined.stdout, (rejoined.stdout, rejoined.stderr)
        listed = re.search(r"(\d+) worker\(s\): (.*)", rejoined.stdout)
        assert listed and int(listed.group(1)) == workers and killed not in listed.group(2).split(", "), \
            rejoined.stdout
        assert "already connected" not in compose.log_of("driver")

        # Every Prometheus target up while the job runs: the driver, every worker (DNS alias `worker`,
        # the restarted one included), Prometheus itself.
        def targets_up() -> list[dict[str, Any]] | None:
            active = prometheus_api(ports, "targets")["activeTargets"]
            return active if len(active) == workers + 2 and all(t["health"] == "up" for t in active) else None
        active = wait_until(targets_up, 60, interval=1, message="every Prometheus target up")
        assert compose.inspect("driver")["State"]["Running"], "the job ended before every target was seen up"
        assert sorted(t["labels"]["job"] for t in active) == ["esault-driver", *["esault-worker"] * workers,
                                                               "prometheus"]

        # ~70 s here; a stall must fail with its evidence (stall_digest) well inside CI's budget.
        wait_until(lambda: not compose.inspect("driver")["State"]["Running"], 300, interval=2,
                   message="the word count finishing (the driver exiting)")
        job_ended = time.time()
        timings["job_s_busy" if busy else "job_s"] = round(job_ended - job_started, 1)
        state = compose.inspect("driver")["State"]
        if busy and state["ExitCode"] != 0:  # loud is allowed on a busy host; quiet loss is not
            assert "esault: error: topology 'wordcount'" in compose.log_of("driver"), \
                f"the driver exited {state['ExitCode']} without saying why:\n{compose.logs()}"
            return
        assert state["ExitCode"] == 0, f"the driver exited {state['ExitCode']}:\n{compose.logs()}"

        # Nothing shared but the network (and Spark's warehouse): the checkpoints are on the objects service,
        # and no esault volume is mounted in the driver or the workers.
        for service in ESAULT_SERVICES:
            mounts = {m.get("Destination") for m in compose.inspect(service).get("Mounts", [])}
            assert "/data/esault" not in mounts, (service, mounts)
        assert "MANIFESTS " in in_network(compose, LIST_MANIFESTS, env=store_env(compose.env))

        # The Spark table, with Spark SQL on the compose Spark cluster: every running count exactly once.
        out = run("podman", "exec", "-i", compose.container("spark-worker"), "python", "-",
                  timeout=300, env=compose.env, input=READ_BACK)
        rows = json.loads(next(line for line in out.stdout.splitlines() if line.startswith("ROWS "))[5:])
        expected = {(word, k): 1 for word, n in wordcount.oracle(20000).items() for k in range(1, n + 1)}
        assert {(word, count): n for word, count, n in rows} == expected
        assert sum(n for _, _, n in rows) == WORDS

        # Every dashboard expression returned data at some moment of the run, as a Grafana panel over
        # the run's time range would draw it (a range query, one point a second).
        queries = [(path.name, title, with_grafana_variables(expr, {"$__rate_interval": RATE_WINDOW}))
                   for path in sorted(DASHBOARDS.glob("*.json"))
                   for title, expr in dashboard_queries(path, annotations=False)
                   if "esault_kafka_" not in expr]  # the word count reads no Kafka: test_kafka_operations.py runs those
        assert len(queries) > 20, "the dashboards' queries were not found"
        window = {"start": str(int(job_started) - 10), "end": str(int(job_ended) + 30), "step": "1"}
        empty = [(dashboard, title, query) for dashboard, title, query in queries
                 if not range_has_data(prometheus_api(ports, "query_range", query=query, **window)["result"])]
        if empty:
            raw = prometheus_api(ports, "query_range", query="esault_tuples_processed_total", **{**window, "step": "5"})
            print("esault_tuples_processed_total over the run:", json.dumps([[s["metric"], s["values"]]
                                                                           for s in raw["result"]]))
        assert not empty, "dashboard queries without data during the run:\n" + "\n".join(map(str, empty))

    except BaseException:
        print(compose.logs())
        digest = stall_digest(compose)
        DIGEST.write_text(digest)
        print(digest)
        raise
    finally:
        for service in ESAULT_SERVICES:  # whole logs, for a look after the run
            Path(f"/tmp/esault-compose-{service}.log").write_text(compose.log_of(service))


LIST_MANIFESTS = """
import os
from esault.storage import ObjectStore
names = [o.name for o in ObjectStore(os.environ["ESAULT_CHECKPOINT_STORAGE"] + "/wordcount").list("manifests")]
assert names, "no checkpoint manifest on the objects service"
print("MANIFESTS", len(names))
"""
"""The word count's checkpoints, listed on the objects service (the esault services' env points there)."""


def store_env(env: dict[str, str]) -> dict[str, str]:
    """The esault services' checkpoint-store settings, ${VAR:?...} values taken from the test's `env`."""
    settings = yaml.safe_load((REPO / "docker-compose.yml").read_text())["x-esault-service"]["environment"]
    return {name: env[value[2:].split(":", 1)[0]] if str(value).startswith("${") else str(value)
            for name, value in settings.items() if name.startswith(("AWS_", "ESAULT_CHECKPOINT"))}

KAFKA_CLICKS = 5000
"""Clicks written to the broker's topic `clicks` for the Kafka example (its own default is 20000)."""

FEED = f"""
import sys
sys.path.insert(0, "/opt/esault/examples")
import kafka_clicks
from confluent_kafka.admin import AdminClient, NewTopic
admin = AdminClient({{"bootstrap.servers": "broker:9092"}})
for topic, partitions in (("clicks", 4), ("click-sessions", 1)):
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
assert kafka_clicks.feed("broker:9092", {KAFKA_CLICKS}, timeout=60) == 0, "clicks not delivered"
print("FED")
"""

READ_TOPIC = """
import json
from confluent_kafka import Consumer, TopicPartition
consumer = Consumer({"bootstrap.servers": "broker:9092", "group.id": "compose-test-read", "enable.auto.commit": False,
                     "enable.partition.eof": True, "isolation.level": "read_committed"})
parts = list(consumer.list_topics("click-sessions", timeout=30).topics["click-sessions"].partitions)
consumer.assign([TopicPartition("click-sessions", p, 0) for p in parts])
done, out = set(), []
while len(done) < len(parts):
    for m in consumer.consume(1000, 1.0):
        if m.error():
            done.add(m.partition())
        else:
            out.append([m.key().decode(), json.loads(m.value())])
print("SESSIONS " + json.dumps(out))
"""

READ_SESSIONS = """
import json, socket
from pyspark.sql import SparkSession
from spark_sink import analytics
spark = (SparkSession.builder.master("spark://spark-master:7077").appName("compose-test-read-sessions")
         .config("spark.driver.host", socket.gethostbyname(socket.gethostname()))
         .config("spark.executor.memory", "512m").getOrCreate())
analytics.open_table("click_sessions", "/data/warehouse", spark)
rows = spark.sql("SELECT user, session_start, session_end, clicks FROM click_sessions").collect()
print("ROWS " + json.dumps([list(r) for r in rows]))
spark.stop()
"""


def in_network(compose: Compose, script: str, timeout: float = 300, env: dict[str, str] | None = None) -> str:
    """Run a Python script in a one-off container of the esault image on the compose network (with `env`)."""
    flags = [f"--env={name}={value}" for name, value in (env or {}).items()]
    done = run("podman", "run", "--rm", "-i", "--network", f"{PROJECT}_default", *flags, f"localhost/esault:{TAG}",
               "python", "-", timeout=timeout, env=compose.env, input=script)
    return done.stdout


def test_the_kafka_example_runs_against_the_compose_broker(stack, timings):
    """examples/kafka_clicks.py in the compose file's kafka-clicks service (profile kafka), reading the topic
    `clicks` this test fills on broker:9092: every click is in exactly one session, in the output topic
    (read_committed) and in the Spark table alike, as test_kafka_example.py checks locally."""
    compose, _, _, busy = stack
    wait_until(lambda: healthy(compose, "broker"), 120, interval=2, message="the broker's healthcheck passing")
    assert "FED" in in_network(compose, FEED)
    started = time.monotonic()
    job = compose("--profile", "kafka", "run", "--rm", "--no-deps", "kafka-clicks", timeout=300, check=False)
    timings["kafka_job_s_busy" if busy else "kafka_job_s"] = round(time.monotonic() - started, 1)
    if busy and job.returncode != 0:  # loud is allowed on a busy host; quiet loss is not
        assert "esault: error: topology 'kafka_clicks'" in job.stderr, (job.stdout[-3000:], job.stderr[-5000:])
        return
    assert job.returncode == 0 and "topology 'kafka_clicks' ran" in job.stdout, (job.stdout[-3000:],
                                                                                 job.stderr[-5000:])
    out = in_network(compose, READ_TOPIC)
    sessions = json.loads(next(line for line in out.splitlines() if line.startswith("SESSIONS "))[9:])
    in_topic = sorted((user, s["start"], s["end"], s["clicks"]) for user, s in sessions)
    out = run("podman", "exec", "-i", compose.container("spark-worker"), "python", "-", timeout=300,
              env=compose.env, input=READ_SESSIONS).stdout
    in_table = sorted(tuple(row) for row in
                      json.loads(next(line for line in out.splitlines() if line.startswith("ROWS "))[5:]))
    assert in_topic == in_table
    assert len(set(in_topic)) == len(in_topic), "a session written twice"
    per_user: dict[str, int] = {}
    for user, _, _, clicks in in_topic:
        per_user[user] = per_user.get(user, 0) + clicks
    expected: dict[str, int] = {}
    for user, *_ in kafka_clicks.clicks(KAFKA_CLICKS):
        expected[user] = expected.get(user, 0) + 1
    assert per_user == expected, "each user's clicks, summed over its sessions, are its clicks in the input"


def test_down_v_leaves_no_container_network_or_volume(stack, env):
    compose, _, _, _ = stack
    # --remove-orphans: a container the files do not name (a replica --scale added) goes too
    compose("down", "-v", "--remove-orphans", "-t", "10")
    assert leftovers(env) == {"containers": [], "volumes": [], "networks": []}
