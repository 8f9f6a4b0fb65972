"""deploy/kuberay/raycluster.yaml: the RayCluster that runs esault on KubeRay, checked against what KubeRay,
Ray and esault require of it (no Kubernetes here, and the RayCluster CRD's schema ships in no package this
machine can install: these are the constraints the manifest's users would otherwise find at `kubectl apply`
or at the first split)."""

from __future__ import annotations

import configparser
import re
from pathlib import Path

import pytest
import yaml

from esault.cluster.providers.ray import RayProvider

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "deploy" / "kuberay" / "raycluster.yaml"
CONTAINERFILE = ROOT / "deploy" / "kuberay" / "Containerfile"


@pytest.fixture(scope="module")
def cluster() -> dict:
    (document,) = list(yaml.safe_load_all(MANIFEST.read_text()))
    return document


def groups(cluster: dict) -> list[dict]:
    return [cluster["spec"]["headGroupSpec"], *cluster["spec"]["workerGroupSpecs"]]


def containers(group: dict) -> list[dict]:
    return group["template"]["spec"]["containers"]


def cpus(quantity: str) -> float:
    return float(quantity[:-1]) / 1000 if quantity.endswith("m") else float(quantity)


def test_it_is_a_ray_io_v1_raycluster_with_the_in_tree_autoscaler_on(cluster):
    assert (cluster["apiVersion"], cluster["kind"]) == ("ray.io/v1", "RayCluster")
    assert cluster["spec"]["enableInTreeAutoscaling"] is True, "without the autoscaler no split gets a node"
    assert cluster["spec"]["autoscalerOptions"]["idleTimeoutSeconds"] > 0


def test_every_ray_start_param_is_a_string_as_the_crd_types_them(cluster):
    for group in groups(cluster):
        for name, value in group["rayStartParams"].items():
            assert isinstance(value, str), f"rayStartParams.{name} is {value!r}: KubeRay takes strings only"


def test_the_head_offers_no_cpu_so_no_esault_worker_lands_beside_the_driver(cluster):
    assert cluster["spec"]["headGroupSpec"]["rayStartParams"]["num-cpus"] == "0"


def test_each_worker_pod_fits_one_esault_worker_and_its_replicas_are_bounded(cluster):
    default_cpus = RayProvider.__init__.__kwdefaults__["num_cpus"]
    for group in cluster["spec"]["workerGroupSpecs"]:
        assert 0 <= group["minReplicas"] <= group["replicas"] <= group["maxReplicas"], group["groupName"]
        offered = float(group["rayStartParams"]["num-cpus"])
        assert offered >= default_cpus, f"{group['groupName']}: a worker actor asks {default_cpus} CPU(s)"
        for container in containers(group):
            assert cpus(container["resources"]["limits"]["cpu"]) >= offered, container["name"]
            assert container["resources"]["requests"]["memory"], container["name"]


def test_the_images_are_the_one_the_containerfile_builds_on_the_ray_that_esault_pins(cluster):
    built = re.search(r"-t (\S+) \.", CONTAINERFILE.read_text()).group(1)
    images = {c["image"] for group in groups(cluster) for c in containers(group)}
    assert images == {built}
    setup = configparser.ConfigParser()
    setup.read(ROOT / "setup.cfg")
    pinned = re.search(r"ray\[default\]==(\S+)", setup["options.extras_require"]["ray"]).group(1)
    assert cluster["spec"]["rayVersion"] == pinned
    base = re.search(r"^FROM \S+/rayproject/ray:(\S+)-py(\d)(\d+)$", CONTAINERFILE.read_text(), re.M)
    assert base is not None and base.group(1) == pinned and (base.group(2), base.group(3)) == ("3", "11")


def test_the_head_exposes_the_driver_port_the_workers_connect_back_to_and_its_pod_ip(cluster):
    (head,) = containers(cluster["spec"]["headGroupSpec"])
    ports = {p["containerPort"] for p in head["ports"]}
    assert {6379, 8265, 5570} <= ports  # the GCS, the dashboard (ray job submit), the esault driver
    assert "--listen 0.0.0.0:5570" in MANIFEST.read_text() and '--advertise "$POD_IP"' in MANIFEST.read_text()
    assert any(e["name"] == "POD_IP" and e["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
               for e in head["env"])
