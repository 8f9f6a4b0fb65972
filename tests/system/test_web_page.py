"""The driver's web page in a real headless Chromium: it renders the running job from the REST API."""

from __future__ import annotations

import html
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from PIL import Image

from esault import JobConfig, LocalCluster, TopologyBuilder
from esault.api import ControlApi
from esault.testing import reset_collected

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "integration"))
from test_split_merge import sequenced_items  # noqa: E402
from topology_parts import (  # noqa: E402
    GATES, DriverCollectorBolt, GatedListSpout, SequenceCheckBolt, SequenceCheckBoltV2,
)

pytestmark = pytest.mark.system

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
BROWSER = [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
           "--window-size=1200,900", "--virtual-time-budget=5000"]
UNIT_FILL = (0xE3, 0xF0, 0xFB)  # a bolt's box in the topology graph (index.html's .unit rect)
SPOUT_FILL = (0xFF, 0xF3, 0xE0)


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    """A job on two worker processes, the API serving it, and what Chromium made of the page."""
    assert CHROMIUM, "Chromium is needed for this test: apt-get install chromium (.ci/run does)"
    reset_collected()
    items = sequenced_items(50, 5, seed=51)
    GATES["web"] = threading.Event()
    builder = TopologyBuilder("web")
    builder.set_spout("src", GatedListSpout, params={"items": items, "gate": "web", "hold_at": len(items) // 2})
    builder.set_bolt("check", SequenceCheckBolt, 2, pe_idle_timeout=None,
                     versions={"v2": SequenceCheckBoltV2}).key_grouping("src")
    builder.set_bolt("out", DriverCollectorBolt, params={"name": "web"}).global_grouping("check")
    out = tmp_path_factory.mktemp("web")
    with LocalCluster(workers=2) as cluster:
        job = cluster.submit(builder.build(), _config(out))
        job.split("check", job.spus("check")[0])
        api = ControlApi(lambda: cluster.jobs).start()
        try:
            dom = subprocess.run([*BROWSER, "--dump-dom", api.url], capture_output=True, text=True, timeout=120)
            shot = out / "page.png"
            subprocess.run([*BROWSER, f"--screenshot={shot}", api.url], capture_output=True, timeout=120,
                           check=True)
            yield job, dom.stdout, Image.open(shot).convert("RGB")
        finally:
            api.stop()
            GATES["web"].set()
            job.stop()


def _config(out):
    return JobConfig(data_dir=out / "data", elasticity=False, guarantee="at_least_once")


def test_the_page_lists_every_spu_with_its_worker_intervals_and_operations(page):
    job, dom, _ = page
    spus = job.spus("check")
    assert len(spus) == 3 and "esault control plane" in dom
    for spu in spus:
        assert f"<td>{spu}</td>" in dom
    for worker in ("w1", "w2"):
        assert f"move to {worker}" in dom and f"<td>{worker}</td>" in dom
    assert dom.count(">split</button>") == 3 and ">rescale</button>" in dom
    assert ">split</td>" in dom  # the history table shows the split made before the page loaded
    assert "[0, " in dom  # intervals rendered
    assert ">swap code</button>" in dom and "<option>v2</option>" in dom and "<b>declared</b>" in dom
    assert '<button id="savepoint" hidden="">' in dom, "no savepoints at at_least_once: the button is hidden"
    assert '<div id="failures" hidden="">' in dom, "a job that can go on shows no failure box"
    assert 'class="partitions"' not in dom, "a spout that reads no partitions (not Kafka) shows no partition table"


def test_the_page_shows_each_worker_with_its_provider_node_and_spus(page):
    job, dom, _ = page
    workers = dom[dom.index('<table id="workers"'):]
    workers = workers[:workers.index("</table>")]
    for worker in ("w1", "w2"):
        assert f"<tr><td>{worker}</td><td>local</td>" in workers, workers
    spus = {row["worker"]: row["spus"] for row in job.status()["capacity"]["workers"]}
    assert sum(spus.values()) == 3  # the check SPUs (the collector runs in the driver)
    assert "provider local, no SPU budget, pending: none" in dom


def test_the_screenshot_shows_the_topology_graph_and_the_tables(page):
    _, _, image = page
    assert image.size == (1200, 900)
    colours = image.getcolors(maxcolors=1 << 20)
    assert colours is not None and len(colours) > 50, "a blank or single-colour page"
    counts = {rgb: n for n, rgb in colours}
    assert counts.get(SPOUT_FILL, 0) > 1000, "the spout's box is drawn"
    assert counts.get(UNIT_FILL, 0) > 2000, "the bolts' boxes are drawn"


def test_the_page_shows_why_a_failed_job_cannot_go_on_above_everything_else(tmp_path):
    """Job.status()["failures"] (a lost SPU, a state exactly_once cannot save, ...): each in the red box."""
    assert CHROMIUM, "Chromium is needed for this test: apt-get install chromium (.ci/run does)"
    reset_collected()
    GATES["webfail"] = threading.Event()
    builder = TopologyBuilder("webfail")
    builder.set_spout("src", GatedListSpout, params={"items": [["k", 1]] * 10, "gate": "webfail", "hold_at": 5})
    builder.set_bolt("out", DriverCollectorBolt, params={"name": "webfail"}).global_grouping("src")
    reasons = ["SPU 7 of bolt 'out' was lost & no worker could take it back: add a worker", "a <second> reason"]
    with LocalCluster() as cluster:
        job = cluster.submit(builder.build(), _config(tmp_path))
        api = ControlApi(lambda: cluster.jobs).start()
        try:
            for reason in reasons:
                job.fail(reason)
            dom = subprocess.run([*BROWSER, "--dump-dom", api.url], capture_output=True, text=True, timeout=120).stdout
        finally:
            api.stop()
            GATES["webfail"].set()
            job.stop()
    assert '<div id="failures">' in dom, "the failure box is shown"
    box = dom[dom.index('<div id="failures">'):dom.index("</ul>", dom.index('<div id="failures">'))]
    assert "Failed: this job cannot go on" in box
    assert re.findall(r'<li class="err">(.*?)</li>', box) == [html.escape(r, quote=False) for r in reasons], box
    assert dom.index('<div id="failures">') < dom.index('<svg id="graph"'), "above the graph and the tables"
