"""Word count end to end on real actors: results equal a plain Counter."""

from __future__ import annotations

import collections
import json
import sys
from pathlib import Path

import pytest

from esault import Bolt, TopologyBuilder
from esault.testing import CollectorBolt, collected

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import wordcount  # noqa: E402


def final_counts(pairs):
    latest: dict = {}
    for word, count in pairs:
        latest[word] = max(latest.get(word, 0), count)
    return latest


@pytest.mark.parametrize(("acking", "chain"), [(True, True), (False, True), (True, False)])
def test_wordcount_equals_a_plain_counter_over_the_same_sentences(cluster, config, acking, chain):
    topology = wordcount.build_topology(total=3000, seed=7, count_parallelism=3, sink=None, chain=chain)
    assert topology.chained("split") is chain
    job = cluster.submit(topology, config.replace(acking=acking))
    assert job.wait(60), job.status()
    job.stop()
    counts = json.loads((job.data_dir / "wordcount.json").read_text())
    assert counts == dict(wordcount.oracle(3000, seed=7))
    status = job.final_status
    assert status["units"]["count"]["processed"] == sum(counts.values())
    split = status["units"]["split"]
    assert split["processed"] == 3000 and split["emitted"] == sum(counts.values())
    assert split.get("chained_into") == ("sentences" if chain else None)
    if acking:
        assert status["units"]["sentences"]["acked"] == 3000
        assert status["pending_trees"] == 0


def test_running_counts_reach_the_collector_in_order_per_word(cluster, config):
    builder = TopologyBuilder("wc-collect")
    sentences = wordcount.make_sentences(500, seed=3)
    builder.set_spout("s", wordcount.SentenceSpout, params={"total": 500, "seed": 3})
    builder.set_bolt("split", wordcount.SplitBolt, 2).shuffle_grouping("s")
    builder.set_bolt("count", wordcount.CountBolt, 2).key_grouping("split")
    builder.set_bolt("out", CollectorBolt).global_grouping("count")
    job = cluster.submit(builder.build(), config)
    assert job.wait(60)
    per_word = collections.defaultdict(list)
    for word, count in collected("out"):
        per_word[word].append(count)
    oracle = collections.Counter(w for s in sentences for w in s.split())
    assert {w: seq[-1] for w, seq in per_word.items()} == dict(oracle)
    assert all(seq == list(range(1, len(seq) + 1)) for seq in per_word.values())


def test_a_job_raises_the_gc_threshold_while_it_runs_and_restores_it(cluster, config):
    import gc

    before = gc.get_threshold()
    job = cluster.submit(wordcount.build_topology(total=10, sink=None), config.replace(gc_gen0_threshold=12345))
    assert gc.get_threshold()[0] == 12345
    assert job.wait(30)
    job.stop()
    assert gc.get_threshold() == before


def test_a_chained_bolt_fails_alone_and_cannot_be_scaled_on_its_own(cluster, config):
    from esault.errors import ScalingError
    from esault.reliability.dead_letters import read_dead_letters
    from topology_parts import RaiseOnBadBolt

    from esault.testing import ListSpout

    items = [(f"w{i}", i) for i in range(50)] + [("bad1", 0)]
    builder = TopologyBuilder("chained-fault")
    builder.set_spout("src", ListSpout, params={"items": items})
    builder.set_bolt("risky", RaiseOnBadBolt, elastic=False).shuffle_grouping("src")  # chained into src's SPU
    builder.set_bolt("out", CollectorBolt, params={"name": "chained-fault"}).global_grouping("risky")
    job = cluster.submit(builder.build(), config.replace(max_retries=1))
    with pytest.raises(ScalingError, match=r"bolt 'risky' runs chained into the SPUs of 'src' and scales with "
                                           r"them; split 'src' instead, or declare it with set_bolt\('risky', \.\.\., "
                                           r"chain=False\)"):
        job.split("risky", job.spus("risky")[0])
    assert job.wait(30), job.status()
    job.stop()
    assert sorted(collected("chained-fault")) == sorted(items[:-1])
    (letter,) = read_dead_letters(job.dead_letter_path)
    assert letter["unit"] == "risky" and letter["attempts"] == 2 and "cannot handle bad1" in letter["error"]
    risky = job.final_status["units"]["risky"]
    assert risky["user_errors"] == 2 and risky["dead_letters"] == 1 and risky["chained_into"] == "src"


@pytest.mark.parametrize("instances", [1, 3])
def test_a_text_file_spout_reads_every_line_once_across_its_instances(cluster, config, tmp_path, instances):
    from esault import TextFileSpout
    from topology_parts import LoseFirstAttemptBolt

    lines = [f"line {i} " + "x" * (i % 7) for i in range(997)]  # uneven lengths: ranges cut mid-line
    path = tmp_path / "input.txt"
    path.write_text("\n".join(lines) + "\n")
    builder = TopologyBuilder("file")
    builder.set_spout("lines", TextFileSpout, instances, params={"path": str(path), "chunk_lines": 10})
    # key-grouped on the line: one line is lost once, its chunk fails and is re-read from the file
    builder.set_bolt("keyed", wordcount.SplitBolt).shuffle_grouping("lines")
    builder.set_bolt("lossy", LoseFirstAttemptBolt, params={"lose": ["500"], "seen": f"file-{instances}"}) \
        .key_grouping("keyed")
    builder.set_bolt("out", CollectorBolt, params={"name": f"file-{instances}"}).global_grouping("lossy")
    # at-least-once: the lost line's chunk is replayed from its offset (exactly_once would roll back instead)
    job = cluster.submit(builder.build(), config.replace(message_timeout=0.5, guarantee="at_least_once"))
    assert job.wait(30), job.status()
    got = collected(f"file-{instances}")
    numbers = sorted({int(word) for word, _ in got if word.isdigit()})
    assert numbers == list(range(997))  # every line, from whichever instance read it
    src = job.status()["units"]["lines"]
    assert src["acked"] == 997 and src["failed"] == src["replayed"] > 0
    # and no line twice, but for the replayed chunks: the instances' byte ranges do not overlap
    assert sum(1 for word, _ in got if word == "line") == 997 + src["replayed"]


class _CountingBolt(Bolt):
    """Counts what it sees and says so only when it closes, as a bolt that flushes a partial aggregate does."""

    def open(self, context):
        self.seen = 0

    def process(self, tup):
        self.seen += 1

    def close(self):
        self.emit("seen", self.seen)


@pytest.mark.parametrize("chain", [True, False])
def test_what_a_bolt_emits_in_close_reaches_downstream_also_when_it_is_chained_into_a_spout(cluster, config, chain):
    """A bolt chained into a spout's SPUs once lost its close() emits: the spout's SPU never sent them."""
    from esault.testing import ListSpout

    name = f"close-emits-{chain}"
    builder = TopologyBuilder(name)
    builder.set_spout("items", ListSpout, 2, params={"items": [(f"k{i}", i) for i in range(500)]})
    builder.set_bolt("seen", _CountingBolt, 2, elastic=False, chain=chain).shuffle_grouping("items")
    builder.set_bolt("out", CollectorBolt, params={"name": name}).global_grouping("seen")
    topology = builder.build()
    assert topology.chained("seen") is chain
    job = cluster.submit(topology, config)
    assert job.wait(60), job.status()
    job.stop()
    got = collected(name)
    assert len(got) == 2 and sum(v for _, v in got) == 2 * 500  # each ListSpout instance emits every item


@pytest.mark.parametrize("instances", [1, 3])
def test_text_file_spout_instances_in_the_driver_share_the_file_by_blocks_under_exactly_once(
        cluster, config, tmp_path, instances):
    """Under exactly_once several instances lease the file's blocks from the ack server (small blocks here, so
    every instance leases many); checkpoints record the ranges read. Every line once; one instance reads it all."""
    from esault import TextFileSpout

    lines = [f"line {i} " + "y" * (i % 11) for i in range(1500)]
    path = tmp_path / "input.txt"
    path.write_text("\n".join(lines))  # no newline at the end: the last line still counts
    builder = TopologyBuilder("shared")
    builder.set_spout("lines", TextFileSpout, instances, params={"path": str(path), "chunk_lines": 7,
                                                                 "block_bytes": 512})
    builder.set_bolt("out", CollectorBolt, params={"name": f"shared-{instances}"}).shuffle_grouping("lines")
    job = cluster.submit(builder.build(), config.replace(guarantee="exactly_once", checkpoint_interval=0.05))
    assert job.wait(30), job.status()
    job.stop()
    assert sorted(value for _, value in collected(f"shared-{instances}")) == sorted(lines)
    assert job.checkpoints.stats.completed >= 1
