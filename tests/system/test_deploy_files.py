"""The deployment files (compose, Dockerfile, Prometheus, Grafana) are consistent and valid.

No Docker engine is needed: the compose file is parsed with PyYAML and checked
against the repository and the real `esault` CLI parser; Prometheus's config
is checked by `promtool`; the dashboard's PromQL names only metrics esault
(or the Spark sink) defines. tests/system/test_prometheus_server.py runs the
dashboard queries against a real Prometheus.

The CurveZMQ keys are checked end to end without Docker too: `esault keys
generate` writes them, each service's secrets are laid out as compose mounts
them, and the CLI's own key loaders read them at the paths the commands name.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from esault.metrics.registry import exposed_sample_names

pytestmark = pytest.mark.system

REPO = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO / "docker-compose.yml"
DOCKERFILE = REPO / "Dockerfile"
PROMETHEUS_CONFIG = REPO / "deploy" / "prometheus" / "prometheus.yml"
GRAFANA = REPO / "deploy" / "grafana"
DASHBOARD = GRAFANA / "dashboards" / "esault.json"
KEYS = REPO / "deploy" / "keys"

REQUIRED_SERVICES = {"driver", "spark-master", "spark-worker", "prometheus", "grafana"}
ESAULT_SUBCOMMANDS = {"run", "worker", "status"}
METRICS_PORT = "9100"
SECRETS_DIR = "/run/secrets"


def load_compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE_FILE.read_text())


def services() -> dict[str, dict[str, Any]]:
    return load_compose()["services"]


def esault_services() -> dict[str, dict[str, Any]]:
    """Services that run the esault image (built from this repo's Dockerfile, context `.`)."""
    return {name: svc for name, svc in services().items() if (svc.get("build") or {}).get("context") == "."}


def worker_services() -> dict[str, dict[str, Any]]:
    """The esault services that run `esault worker` (replicas of one, each enrolled by the driver)."""
    return {name: svc for name, svc in esault_services().items() if svc["command"][1] == "worker"}


def replicas(service: dict[str, Any]) -> int:
    deploy = service.get("deploy", {})
    if "replicas" in deploy:  # podman-compose starts one container unless the mode is said too
        assert deploy.get("mode") == "replicated", "deploy.replicas needs deploy.mode: replicated for podman-compose"
    return int(deploy.get("replicas", 1))


def top_level_secrets() -> dict[str, dict[str, Any]]:
    return load_compose().get("secrets") or {}


def mounted_secrets(service: dict[str, Any]) -> dict[str, str]:
    """Where each of a service's secrets appears in its container -> the secret's name.

    Short syntax and a long syntax without target mount at /run/secrets/NAME; a
    relative target at /run/secrets/TARGET; an absolute target where it says.
    """
    mounts = {}
    for entry in service.get("secrets", []):
        source = entry if isinstance(entry, str) else entry["source"]
        target = source if isinstance(entry, str) else entry.get("target", source)
        path = target if target.startswith("/") else f"{SECRETS_DIR}/{target}"
        assert path not in mounts, f"two secrets mount at {path}"
        mounts[path] = source
    return mounts


def secret_file(name: str) -> str:
    """The host file of top-level secret `name`."""
    secret = top_level_secrets()[name]
    assert "file" in secret, f"secret {name!r} needs file: (a key file under ./deploy/keys)"
    return secret["file"]


def files_under(service: dict[str, Any], folder: str) -> set[str]:
    """Host files of the secrets a service mounts inside container folder `folder`."""
    return {secret_file(name) for path, name in mounted_secrets(service).items()
            if path.rsplit("/", 1)[0] == folder}


def flag_value(command: list[str], flag: str) -> str:
    assert flag in command, f"{flag} missing from {command}"
    return command[command.index(flag) + 1]


def host_path_of(volume: str | dict[str, Any]) -> str | None:
    """The host path of a bind mount, or None for a named volume."""
    if isinstance(volume, dict):
        return volume["source"] if volume.get("type") == "bind" else None
    source = volume.split(":", 1)[0]
    return source if source.startswith((".", "/", "~")) else None


def published_ports(port: str | int | dict[str, Any]) -> list[int]:
    """Every port number in one `ports:` entry (short or long syntax)."""
    if isinstance(port, dict):
        return [int(port[key]) for key in ("target", "published") if key in port]
    text = str(port).split("/", 1)[0]
    parts = text.rsplit(":", 2)
    numbers = parts[-2:] if len(parts) >= 2 else parts
    result = []
    for number in numbers:
        for bound in number.split("-"):
            result.append(int(bound))
    return result


# -- compose ------------------------------------------------------------------


def test_the_compose_file_parses_and_has_every_service():
    compose = load_compose()
    assert isinstance(compose, dict)
    missing = REQUIRED_SERVICES - set(compose["services"])
    assert not missing, f"docker-compose.yml lacks services {sorted(missing)}"


def test_every_service_has_a_build_or_an_image():
    for name, service in services().items():
        assert "build" in service or "image" in service, f"service {name} has neither build nor image"


def test_every_image_is_pinned_to_a_version():
    for name, service in services().items():
        if "image" in service and "build" not in service:
            image = service["image"]
            assert ":" in image and not image.endswith(":latest"), f"{name}: pin {image!r} to a version"


def test_every_host_path_mount_exists_in_the_repository():
    named = set(load_compose().get("volumes") or {})
    for name, service in services().items():
        for volume in service.get("volumes", []):
            path = host_path_of(volume)
            if path is None:
                source = volume["source"] if isinstance(volume, dict) else volume.split(":", 1)[0]
                assert source in named, f"{name}: volume {source!r} is not declared under volumes:"
                continue
            assert path.startswith("./"), f"{name}: mount {path!r} should be relative to the repo"
            assert (REPO / path).exists(), f"{name}: host path {path} does not exist in the repo"


def test_every_port_is_a_valid_port_number():
    for name, service in services().items():
        for port in service.get("ports", []) + service.get("expose", []):
            numbers = published_ports(port)
            assert numbers, f"{name}: cannot read port {port!r}"
            for number in numbers:
                assert 0 < number <= 65535, f"{name}: port {number} in {port!r} is out of range"


def test_no_two_services_publish_the_same_host_port():
    seen: dict[int, str] = {}
    for name, service in services().items():
        for port in service.get("ports", []):
            host_port = published_ports(port)[0]
            assert host_port not in seen, f"{name} and {seen[host_port]} both publish {host_port}"
            seen[host_port] = name


def test_the_driver_and_at_least_two_workers_run_the_esault_image():
    assert "driver" in esault_services()
    assert sum(map(replicas, worker_services().values())) >= 2, f"expected 2+ workers, got {worker_services()}"


def test_esault_commands_start_with_esault_and_a_known_subcommand():
    for name, service in esault_services().items():
        command = service["command"]
        assert isinstance(command, list), f"{name}: write command as a list, not a shell string"
        assert command[0] == "esault", f"{name}: command must start with esault, got {command}"
        assert command[1] in ESAULT_SUBCOMMANDS, f"{name}: unknown subcommand {command[1]!r}"
    assert services()["driver"]["command"][1] == "run"
    assert set(esault_services()) == {"driver", "kafka-clicks"} | set(worker_services())


def test_the_kafka_example_service_runs_on_request_against_the_compose_broker():
    kafka = services()["kafka-clicks"]
    assert kafka["profiles"] == ["kafka"], "`up` must not start it: its input topic is filled first"
    assert kafka["command"][:3] == ["esault", "run", "examples/kafka_clicks.py"]
    assert (REPO / kafka["command"][2]).exists()
    assert kafka["environment"]["ESAULT_KAFKA_BOOTSTRAP"] == "broker:9092"
    assert "9092" in [str(p) for p in services()["broker"]["expose"]]
    assert kafka["restart"] == "no", "a bounded job that ended must not be started again"


def healthcheck_commands() -> dict[str, list[str]]:
    result = {}
    for name, service in esault_services().items():
        test = service.get("healthcheck", {}).get("test")
        if test:
            assert test[0] == "CMD", f"{name}: use the exec form [\"CMD\", ...] for the healthcheck"
            result[name] = test[1:]
    return result


def test_esault_commands_and_healthchecks_parse_with_the_real_cli():
    from esault.cli import build_parser  # fails, rather than skips, until the CLI exists

    commands = {f"{name} command": svc["command"] for name, svc in esault_services().items()}
    commands.update({f"{name} healthcheck": test for name, test in healthcheck_commands().items()})
    assert "driver healthcheck" in commands
    for where, command in commands.items():
        assert command[0] == "esault"
        assert command[1] in ESAULT_SUBCOMMANDS, f"{where}: unknown subcommand {command[1]!r}"
        try:
            build_parser().parse_args(command[1:])
        except SystemExit as exc:
            pytest.fail(f"{where}: `{' '.join(command)}` is rejected by esault's CLI (exit {exc.code})")


def test_the_driver_runs_a_topology_file_of_the_repository():
    command = services()["driver"]["command"]
    assert (REPO / command[2]).is_file(), f"the driver runs {command[2]}, which is not in the repo"


def test_workers_connect_to_the_port_the_driver_listens_on():
    driver = services()["driver"]["command"]
    listen_host, listen_port = flag_value(driver, "--listen").rsplit(":", 1)
    assert listen_host == "0.0.0.0", "the driver must listen on all interfaces inside its container"
    assert flag_value(driver, "--cluster") == "static"
    for name, worker in worker_services().items():
        assert flag_value(worker["command"], "--driver") == f"driver:{listen_port}", name
        assert flag_value(worker["command"], "--bind-host") == "0.0.0.0", (
            f"{name}: peers in other containers reach its SPUs only on a non-loopback bind"
        )


def test_workers_are_replicas_that_the_driver_names():
    """`--scale worker=N` must give N workers: nothing in a replica may tell it apart from the others."""
    for name, worker in worker_services().items():
        command = worker["command"]
        assert "--name" not in command and "--secret-key" not in command, (
            f"{name}: a replica is named and keyed by the driver (--enroll-key), not by its own flags")
        assert "hostname" not in worker and "--advertise" not in command, (
            f"{name}: replicas share one service definition: no fixed hostname or advertised name")
        assert flag_value(command, "--enroll-key") == f"{SECRETS_DIR}/enroll_key_secret", name


def test_every_esault_process_serves_metrics_where_prometheus_scrapes():
    for name, service in esault_services().items():
        command = service["command"]
        assert flag_value(command, "--metrics-host") == "0.0.0.0", (
            f"{name}: bind metrics to 0.0.0.0 or Prometheus cannot reach them"
        )
        assert flag_value(command, "--metrics-port") == METRICS_PORT
    config = yaml.safe_load(PROMETHEUS_CONFIG.read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert jobs["esault-driver"]["static_configs"][0]["targets"] == [f"driver:{METRICS_PORT}"]
    worker_sd = jobs["esault-worker"]["dns_sd_configs"][0]
    assert worker_sd["names"] == ["worker"] and str(worker_sd["port"]) == METRICS_PORT
    for name, worker in worker_services().items():  # one DNS name, one A record per worker
        aliases = worker.get("networks", {}).get("default", {}).get("aliases", [])
        assert "worker" in aliases, f"{name}: add the network alias 'worker' or Prometheus never scrapes it"


def test_the_driver_waits_for_no_more_workers_than_there_are():
    workers = worker_services()
    for name, worker in workers.items():
        assert "ports" not in worker, f"{name}: workers publish no host port; use expose"
    assert int(flag_value(services()["driver"]["command"], "--min-workers")) <= sum(map(replicas, workers.values()))


def test_the_driver_knows_the_spark_master():
    environment = services()["driver"]["environment"]
    assert environment["ESAULT_SPARK_MASTER"] == "spark://spark-master:7077"
    master = services()["spark-master"]["command"]
    assert flag_value(master, "--port") == "7077"
    assert "spark://spark-master:7077" in services()["spark-worker"]["command"]


def test_spark_images_are_official_and_match_the_pyspark_version():
    build_args = services()["driver"]["build"]["args"]
    for name in ("spark-master", "spark-worker"):
        image = services()[name]["image"]
        assert image.startswith(("spark:", "apache/spark:")), f"{name}: use an official Spark image"
        assert image.split(":", 1)[1].startswith(build_args["SPARK_VERSION"]), (
            f"{name}: {image} and the esault image's SPARK_VERSION {build_args['SPARK_VERSION']} differ"
        )


def test_prometheus_and_grafana_mount_the_repository_configs():
    prometheus_mounts = services()["prometheus"]["volumes"]
    assert "./deploy/prometheus/prometheus.yml:/etc/prometheus/prometheus.yml:ro" in prometheus_mounts
    grafana = services()["grafana"]
    assert "./deploy/grafana/provisioning:/etc/grafana/provisioning:ro" in grafana["volumes"]
    assert any(v.startswith("./deploy/grafana/dashboards:") for v in grafana["volumes"])
    assert "127.0.0.1:3000:3000" in grafana["ports"] or "3000:3000" in grafana["ports"]


# -- secrets: CurveZMQ keys and the Grafana password ---------------------------


def test_grafanas_admin_password_comes_from_the_environment_with_no_default():
    environment = services()["grafana"]["environment"]
    password = environment["GF_SECURITY_ADMIN_PASSWORD"]
    assert re.fullmatch(r"\$\{GRAFANA_ADMIN_PASSWORD:\?[^}]+\}", password), (
        f"GF_SECURITY_ADMIN_PASSWORD is {password!r}; write "
        "${GRAFANA_ADMIN_PASSWORD:?set GRAFANA_ADMIN_PASSWORD in .env or the environment} "
        "(required, no default), not ${GRAFANA_ADMIN_PASSWORD:-admin}"
    )
    assert "GF_SECURITY_ADMIN_PASSWORD__FILE" not in environment
    text = COMPOSE_FILE.read_text()
    assert not re.search(r"GRAFANA_ADMIN_PASSWORD:?-", text), "no default Grafana password in the file"


def test_no_service_has_a_literal_password_or_secret_in_its_environment():
    for name, service in services().items():
        environment = service.get("environment") or {}
        if isinstance(environment, list):
            environment = dict(item.split("=", 1) for item in environment)
        for key, value in environment.items():
            if re.search(r"PASSWORD|SECRET|TOKEN", key) and not key.endswith("__FILE"):
                assert re.fullmatch(r"\$\{\w+:\?[^}]+\}", str(value)), (
                    f"{name}: {key} must come from the environment as ${{VAR:?why}}, not {value!r}"
                )


def test_every_services_secrets_are_declared_at_the_top_level_as_files_under_deploy_keys():
    declared = top_level_secrets()
    assert declared, "docker-compose.yml declares no top-level secrets:"
    for name, secret in declared.items():
        file = secret_file(name)
        assert file.startswith("./deploy/keys/"), f"secret {name}: {file} is not under ./deploy/keys"
        assert re.fullmatch(r"[a-z0-9-]+\.key(_secret)?", file.rsplit("/", 1)[1]), (
            f"secret {name}: {file} is not a file `esault keys generate` writes (NAME.key or NAME.key_secret)"
        )
    used = set()
    for service_name, service in services().items():
        for name in mounted_secrets(service).values():
            assert name in declared, f"{service_name} mounts secret {name!r}, which secrets: does not declare"
            used.add(name)
    assert not set(declared) - used, f"secrets nobody mounts: {sorted(set(declared) - used)}"


def test_only_esault_services_get_keys():
    for name, service in services().items():
        if name not in esault_services():
            assert not service.get("secrets"), f"{name} runs no esault process: give it no keys"


def test_the_driver_gets_its_secret_and_the_public_keys_of_the_workers_it_admits():
    driver = services()["driver"]
    command = driver["command"]
    mounts = mounted_secrets(driver)
    secret = flag_value(command, "--secret-key")
    assert secret == f"{SECRETS_DIR}/driver_key_secret"
    assert secret in mounts and secret_file(mounts[secret]) == "./deploy/keys/driver.key_secret"

    enroll = flag_value(command, "--enroll-key")
    assert enroll == f"{SECRETS_DIR}/enroll_key"
    assert enroll in mounts and secret_file(mounts[enroll]) == "./deploy/keys/enroll.key"
    held = {secret_file(mounted_secrets(w)[f"{SECRETS_DIR}/enroll_key_secret"]).removesuffix("_secret")
            for w in worker_services().values()}
    assert held == {"./deploy/keys/enroll.key"}, f"the driver admits enroll.key but the workers hold {sorted(held)}"


def test_the_driver_gets_no_workers_secret():
    for path, name in mounted_secrets(services()["driver"]).items():
        assert not re.search(r"(worker-\d+|enroll)\.key_secret$", secret_file(name)), (
            f"the driver mounts a worker's secret key ({name} at {path})"
        )


def test_each_worker_gets_the_enrollment_secret_and_the_drivers_public_key_only():
    for name, worker in worker_services().items():
        command = worker["command"]
        mounts = mounted_secrets(worker)
        secret = flag_value(command, "--enroll-key")
        assert secret in mounts, f"{name}: nothing is mounted at {secret}"
        assert secret_file(mounts[secret]) == "./deploy/keys/enroll.key_secret", name

        driver_key = flag_value(command, "--driver-key")
        assert driver_key == f"{SECRETS_DIR}/driver_key"
        assert driver_key in mounts and secret_file(mounts[driver_key]) == "./deploy/keys/driver.key"

        files = {secret_file(n) for n in mounts.values()}
        assert files == {"./deploy/keys/enroll.key_secret", "./deploy/keys/driver.key"}, (
            f"{name} mounts more than it needs: {sorted(files)}")


def test_the_drivers_healthcheck_has_a_status_client_key_the_driver_admits():
    driver = services()["driver"]
    test = healthcheck_commands()["driver"]
    mounts = mounted_secrets(driver)
    client_secret = flag_value(test, "--secret-key")
    assert client_secret in mounts, f"the healthcheck's {client_secret} is not mounted in the driver"
    client = secret_file(mounts[client_secret])
    assert re.fullmatch(r"\./deploy/keys/client-\d+\.key_secret", client), client
    assert secret_file(mounts[flag_value(test, "--driver-key")]) == "./deploy/keys/driver.key"
    admitted = files_under(driver, flag_value(driver["command"], "--client-keys"))
    assert client.removesuffix("_secret") in admitted, f"the driver does not admit the healthcheck's key {client}"


def lay_out_secrets(service: dict[str, Any], keys: Path, root: Path) -> Path:
    """Copy a service's secrets from `keys` (a generated deploy/keys) to where compose mounts them under `root`."""
    for path, name in mounted_secrets(service).items():
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(keys / secret_file(name).removeprefix("./deploy/keys/"), target)
    return root


def test_the_keys_esault_generates_let_every_worker_and_the_healthcheck_in(tmp_path: Path):
    """What each container sees under /run/secrets, read by the loaders `esault run/worker/status` use."""
    from esault.cluster.credentials import ClusterKeys, WorkerKeys
    from esault.transport.keys import generate_key_files

    keys = tmp_path / "keys"
    generate_key_files(keys, workers=0, clients=1, enroll=True)
    for name in top_level_secrets():
        assert (keys / secret_file(name).removeprefix("./deploy/keys/")).is_file(), (
            f"secret {name}: `esault keys generate` writes no {secret_file(name)}"
        )

    driver = services()["driver"]
    at = lay_out_secrets(driver, keys, tmp_path / "driver")
    command = driver["command"]
    cluster = ClusterKeys.from_files(at / flag_value(command, "--secret-key").lstrip("/"), None,
                                     at / flag_value(command, "--client-keys").lstrip("/"),
                                     at / flag_value(command, "--enroll-key").lstrip("/"))
    cluster.ring()  # the driver's KeyRing builds from them
    for name, worker in worker_services().items():
        mine = lay_out_secrets(worker, keys, tmp_path / name)
        own = WorkerKeys.from_files(mine / flag_value(worker["command"], "--enroll-key").lstrip("/"),
                                    mine / flag_value(worker["command"], "--driver-key").lstrip("/"))
        assert own.own.public in cluster.enroll, f"the driver does not admit {name}'s enrollment key"
        assert own.driver == cluster.driver.public, f"{name} would not trust the driver"
    health = healthcheck_commands()["driver"]
    client = WorkerKeys.from_files(at / flag_value(health, "--secret-key").lstrip("/"),
                                   at / flag_value(health, "--driver-key").lstrip("/"))
    assert client.own.public in cluster.clients and client.driver == cluster.driver.public


def test_the_keys_folder_is_git_ignored_but_for_its_gitignore():
    rules = [line.strip() for line in (KEYS / ".gitignore").read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    assert rules == ["*", "!.gitignore"], f"deploy/keys/.gitignore should ignore all but itself, has {rules}"
    git = shutil.which("git")
    if git and (REPO / ".git").exists():
        ignored = subprocess.run([git, "check-ignore", "-q", "deploy/keys/driver.key_secret"], cwd=REPO)
        assert ignored.returncode == 0, "git would commit deploy/keys/driver.key_secret"
        kept = subprocess.run([git, "check-ignore", "-q", "deploy/keys/.gitignore"], cwd=REPO)
        assert kept.returncode == 1, "git ignores deploy/keys/.gitignore itself"


def test_keys_and_the_env_file_stay_out_of_the_image():
    ignored = {line.strip().rstrip("/") for line in (REPO / ".dockerignore").read_text().splitlines()
               if line.strip() and not line.startswith("#")}
    assert {"deploy", "deploy/keys"} & ignored, ".dockerignore must leave deploy/keys (secret keys) out"
    assert ".env" in ignored, ".dockerignore must leave .env (the Grafana password) out"
    assert ".env" in (REPO / ".gitignore").read_text().split(), ".gitignore must ignore .env"


def test_the_deploy_readme_says_how_to_make_the_keys_and_the_password():
    text = (REPO / "deploy" / "README.md").read_text()
    assert "esault keys generate deploy/keys --workers" in text
    assert "GRAFANA_ADMIN_PASSWORD" in text


# -- the broker and the podman offline variant ---------------------------------

OFFLINE_OVERRIDE = REPO / "deploy" / "podman" / "compose.offline.yml"


def test_the_broker_service_runs_tansu_built_from_deploy_broker_and_advertises_its_service_name():
    broker = services()["broker"]
    assert broker["build"]["context"] == "deploy/broker" and (REPO / "deploy/broker/Dockerfile").is_file()
    command = broker["command"]
    assert command[0] == "broker", command
    flags = dict(zip(command[1::2], command[2::2]))
    assert flags["--advertised-listener-url"] == "tcp://broker:9092", (
        "clients on the compose network reconnect to the advertised address: it must be the service name")
    assert flags["--listener-url"].endswith(":9092") and "9092" in [str(p) for p in broker["expose"]]
    assert "ports" not in broker, "the broker is reached on the compose network only"
    assert "healthcheck" in broker


def test_the_offline_override_changes_only_images_and_profiles_of_existing_services():
    """deploy/podman/compose.offline.yml is a variant, not a second copy of the services."""
    override = yaml.safe_load(OFFLINE_OVERRIDE.read_text())
    assert set(override) == {"services"}
    for name, service in override["services"].items():
        assert name in services(), f"the offline override names {name!r}, which docker-compose.yml has not"
        assert set(service) <= {"image", "profiles"}, f"{name}: the override may change image/profiles only, not {set(service)}"
    built = {name for name, svc in services().items() if "build" in svc}
    assert not built & set(override["services"]), "services built from a Dockerfile keep it (build-images.sh builds them)"
    pulled = {name for name, svc in services().items() if "build" not in svc}
    assert pulled == set(override["services"]), "every pulled image needs an offline replacement (or a profile)"


# -- Dockerfile ---------------------------------------------------------------


def test_the_dockerfile_builds_python_311_with_a_jre_and_installs_the_package():
    text = DOCKERFILE.read_text()
    instructions = [line for line in text.splitlines() if line and not line.startswith("#")]
    # The public base by default; deploy/podman/build-images.sh passes an offline one (--build-arg BASE_IMAGE).
    assert instructions[0].startswith("ARG BASE_IMAGE=python:3.11-slim"), instructions[0]
    assert instructions[1] == "FROM ${BASE_IMAGE}", instructions[1]
    assert re.search(r"openjdk-\d+-jre", text), "install a JRE: PySpark starts a JVM"
    assert re.search(r"^COPY \. \.", text, re.M), "copy the repository into the image"
    assert re.search(r"pip install [^\n]*\s\.(\s|$)", text), "pip install the package (.)"
    assert re.search(r"pyspark==\$\{SPARK_VERSION\}", text), "pin PySpark to the cluster's version"
    assert re.search(r"^USER ", text, re.M), "do not run as root"
    assert (REPO / ".dockerignore").is_file()


def test_the_dockerignore_keeps_the_context_small_but_keeps_the_package():
    ignored = {line.strip() for line in (REPO / ".dockerignore").read_text().splitlines()
               if line.strip() and not line.startswith("#")}
    assert ".git" in ignored
    for needed in ("esault", "spark_sink", "examples", "setup.cfg", "pyproject.toml"):
        assert needed not in ignored, f".dockerignore must not exclude {needed}"


# -- Prometheus ---------------------------------------------------------------


def test_promtool_accepts_the_prometheus_config():
    promtool = shutil.which("promtool")
    assert promtool, "promtool is not on PATH; apt-get install prometheus"
    result = subprocess.run(
        [promtool, "check", "config", str(PROMETHEUS_CONFIG)],
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr


# -- Grafana ------------------------------------------------------------------


def load_dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def all_panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    panels = []
    for panel in dashboard["panels"]:
        panels.append(panel)
        panels.extend(panel.get("panels", []))
    return panels


def dashboard_exprs(dashboard: dict[str, Any]) -> list[str]:
    exprs = [t["expr"] for p in all_panels(dashboard) for t in p.get("targets", [])]
    exprs += [a["expr"] for a in dashboard["annotations"]["list"] if "expr" in a]
    return exprs


_KEYWORDS = {
    "and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right",
    "offset", "bool", "inf", "nan", "atan2",
}


def metric_names_in(expr: str) -> set[str]:
    """Metric names a PromQL expression selects (strings, matchers, grouping and ranges removed)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\[[^\]]*\]", "", text)
    text = re.sub(r"\{[^}]*\}", "", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    names = set()
    for match in re.finditer(r"(?<![\w.$])([A-Za-z_:][A-Za-z0-9_:]*)\b(?!\s*\()", text):
        word = match.group(1)
        if word.lower() not in _KEYWORDS:
            names.add(word)
    return names


def test_metric_name_extraction_finds_selectors_and_skips_functions_and_labels():
    expr = ('histogram_quantile(0.99, sum by (le, unit) (rate(esault_probe_latency_seconds_bucket'
            '{topology=~"$topology"}[$__rate_interval]))) or on (unit) esault_spus offset 5m > 1e3')
    assert metric_names_in(expr) == {"esault_probe_latency_seconds_bucket", "esault_spus"}


def test_the_datasource_is_the_compose_prometheus_with_a_fixed_uid():
    files = sorted((GRAFANA / "provisioning" / "datasources").glob("*.yml"))
    assert files, "no Grafana datasource provisioning file"
    datasources = [ds for f in files for ds in yaml.safe_load(f.read_text())["datasources"]]
    prometheus = [ds for ds in datasources if ds["type"] == "prometheus"]
    assert len(prometheus) == 1
    assert prometheus[0]["url"] == "http://prometheus:9090"
    assert prometheus[0]["uid"] == "prometheus"


def test_the_dashboard_provider_reads_the_directory_compose_mounts():
    files = sorted((GRAFANA / "provisioning" / "dashboards").glob("*.yml"))
    assert files, "no Grafana dashboard provider file"
    providers = [p for f in files for p in yaml.safe_load(f.read_text())["providers"]]
    mounts = {v.split(":")[1]: v.split(":")[0] for v in services()["grafana"]["volumes"]}
    for provider in providers:
        path = provider["options"]["path"]
        assert mounts.get(path) == "./deploy/grafana/dashboards", (
            f"provider {provider['name']} reads {path}, which compose does not mount"
        )


def test_the_dashboard_is_valid_grafana_json():
    dashboard = load_dashboard()
    assert isinstance(dashboard["schemaVersion"], int) and dashboard["schemaVersion"] >= 36
    assert re.fullmatch(r"[a-zA-Z0-9_-]{1,40}", dashboard["uid"])
    assert dashboard["title"]
    panels = all_panels(dashboard)
    ids = [panel["id"] for panel in panels]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in panels:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24 and grid["h"] > 0, panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["targets"], f"panel {panel['title']!r} has no queries"
        assert panel["datasource"]["uid"] == "prometheus"
        for target in panel["targets"]:
            assert target["expr"].strip() and target["refId"], panel["title"]


def test_dashboard_panels_do_not_overlap():
    cells: dict[tuple[int, int], str] = {}
    for panel in all_panels(load_dashboard()):
        grid = panel["gridPos"]
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in cells, f"{panel['title']!r} overlaps {cells[(x, y)]!r}"
                cells[(x, y)] = panel["title"]


def test_every_metric_the_dashboard_queries_is_one_esault_defines():
    known = exposed_sample_names()
    dashboard = load_dashboard()
    used: set[str] = set()
    for expr in dashboard_exprs(dashboard):
        used |= metric_names_in(expr)
    for variable in dashboard["templating"]["list"]:
        used |= set(re.findall(r"label_values\((\w+)", variable["definition"]))
    unknown = used - known
    assert not unknown, f"the dashboard queries metrics nobody defines: {sorted(unknown)}"


def test_the_dashboard_covers_throughput_latency_elasticity_reliability_and_the_sink():
    dashboard = load_dashboard()
    exprs = "\n".join(dashboard_exprs(dashboard))
    for needed in (
        "esault_tuples_emitted_total", "esault_tuples_processed_total",
        "esault_spus", "esault_pes",
        "esault_tuples_acked_total", "esault_tuples_failed_total", "esault_tuples_replayed_total",
        "esault_dead_letters_total",
        "esault_sink_rows_committed_total", "esault_sink_commit_seconds_bucket",
    ):
        assert needed in exprs, f"no panel queries {needed}"
    for quantile in ("0.5", "0.99"):
        assert re.search(rf"histogram_quantile\({quantile}, .*esault_tuple_latency_seconds_bucket", exprs)


def test_splits_and_merges_are_annotated_on_the_spus_panel():
    dashboard = load_dashboard()
    spus_panel = next(p for p in all_panels(dashboard) if p["title"] == "SPUs per unit")
    annotations = [a for a in dashboard["annotations"]["list"] if "esault_scaling_events_total" in a.get("expr", "")]
    actions = {re.search(r'action="(\w+)"', a["expr"]).group(1) for a in annotations}
    assert actions == {"split", "merge"}
    for annotation in annotations:
        assert annotation["datasource"]["uid"] == "prometheus"
        assert spus_panel["id"] in annotation["filter"]["ids"]
