"""bench/profile_stages.py: py-spy stacks sorted into the per-tuple path's stages."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from profile_stages import OTHER, stage_of, stage_samples  # noqa: E402

LOOP = "Actor._actor_loop (pykka/_actor.py:244);SenderActor.on_receive (esault/datapath/sender.py:166)"


def test_a_sample_goes_to_its_innermost_known_frame() -> None:
    stack = f"{LOOP};BoltSpuActor._process_keyed (esault/datapath/bolt_spu.py:326);CountWord.process (x.py:37)"
    assert stage_of(stack.split(";")) == "user: CountWord.process"
    assert stage_of(stack.split(";")[:-1]) == "PE table: lookup, create, dispatch"


def test_msgpack_under_a_checkpoint_is_the_checkpoint_and_under_a_send_is_encoding() -> None:
    snapshot = f"{LOOP};BoltSpuActor._snapshot_epoch (esault/datapath/bolt_spu.py:236);packb (msgpack/__init__.py:36)"
    send = f"{LOOP};Endpoint.send (esault/transport/endpoint.py:296);packb (msgpack/__init__.py:36)"
    assert stage_of(snapshot.split(";")) == "checkpoint: snapshot and write"
    assert stage_of(send.split(";")) == "encoding (msgpack)"


def test_data_released_after_an_alignment_counts_as_processing_not_as_the_barrier() -> None:
    released = (f"{LOOP};BarrierAligner.check (esault/datapath/barriers.py:80);BoltSpuActor._on_data "
                "(esault/datapath/bolt_spu.py:280);BoltSpuActor._process_keyed (esault/datapath/bolt_spu.py:326)")
    assert stage_of(released.split(";")) == "PE table: lookup, create, dispatch"


def test_counts_add_up_per_stage_and_unknown_stacks_are_other() -> None:
    lines = [f"{LOOP};CountWord.process (x.py:37) 5", f"{LOOP};CountWord.process (x.py:38) 2",
             "main (y.py:1) 3", "", "garbage"]
    counts = stage_samples(lines)
    assert counts["user: CountWord.process"] == 7
    assert counts[OTHER] == 3
    assert sum(counts.values()) == 10
