"""A KafkaSource instance's watermark per partition, with idleness (pure, a manual clock)."""

from __future__ import annotations

from esault.connectors.source_watermarks import PartitionWatermarks


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class Reading:
    """What the source tells PartitionWatermarks.update: its partitions, their fetch positions, their ends."""

    def __init__(self, *partitions: int) -> None:
        self.at = {("t", p): 0 for p in partitions}
        self.done: set = set()
        self.waiting: dict = {}

    def update(self, w: PartitionWatermarks) -> list:
        return w.update(list(self.at), self.at.__getitem__, self.done.__contains__,
                        lambda tp: self.waiting.get(tp, 0))


def emit(w: PartitionWatermarks, reading: Reading, p: int, ts: int) -> None:
    tp = ("t", p)
    reading.at[tp] += 1
    w.newest[tp] = max(w.newest.get(tp, ts), ts)


def test_the_instance_watermark_is_the_minimum_over_its_partitions_once_each_emitted():
    clock, reading = Clock(), Reading(0, 1)
    w = PartitionWatermarks(None, clock)
    emit(w, reading, 0, 5_000)
    reading.update(w)
    assert w.watermark is None and not w.idle  # partition 1 has emitted nothing yet: it holds
    emit(w, reading, 1, 1_000)
    reading.update(w)
    assert w.watermark == 1_000
    emit(w, reading, 1, 9_000)
    reading.update(w)
    assert w.watermark == 5_000


def test_a_partition_silent_for_idle_timeout_is_left_out_until_it_has_records_again():
    clock, reading = Clock(), Reading(0, 1)
    w = PartitionWatermarks(2.0, clock)
    reading.update(w)
    emit(w, reading, 0, 3_000)
    clock.t = 1.0
    reading.update(w)
    assert w.watermark is None  # 1 s of silence: partition 1 still holds
    clock.t = 2.5
    emit(w, reading, 0, 4_000)
    assert reading.update(w) == [("t", 1)]
    assert w.watermark == 4_000 and not w.idle
    emit(w, reading, 1, 6_000)  # it speaks again
    emit(w, reading, 0, 8_000)
    reading.update(w)
    assert w.watermark == 6_000


def test_a_partition_with_records_waiting_in_the_alignment_buffer_is_not_idle():
    clock, reading = Clock(), Reading(0, 1)
    w = PartitionWatermarks(1.0, clock)
    emit(w, reading, 0, 3_000)
    reading.waiting[("t", 1)] = 5
    reading.update(w)
    clock.t = 5.0
    emit(w, reading, 0, 4_000)
    assert reading.update(w) == []
    assert w.watermark is None


def test_every_partition_idle_or_none_at_all_makes_the_instance_idle_and_the_watermark_stays():
    clock = Clock()
    none = PartitionWatermarks(1.0, clock)
    Reading().update(none)
    assert none.idle
    reading = Reading(0)
    w = PartitionWatermarks(1.0, clock)
    emit(w, reading, 0, 2_000)
    reading.update(w)
    clock.t = 3.0
    reading.update(w)
    assert w.idle and w.watermark == 2_000


def test_a_partition_at_the_end_of_a_bounded_read_no_longer_holds_the_others():
    clock, reading = Clock(), Reading(0, 1)
    w = PartitionWatermarks(None, clock)
    emit(w, reading, 0, 1_000)
    emit(w, reading, 1, 7_000)
    reading.update(w)
    assert w.watermark == 1_000
    reading.done.add(("t", 0))
    reading.update(w)
    assert w.watermark == 7_000


def test_a_restore_forgets_what_was_emitted():
    clock, reading = Clock(), Reading(0)
    w = PartitionWatermarks(None, clock)
    emit(w, reading, 0, 1_000)
    reading.update(w)
    w.clear()
    reading.update(w)
    assert w.watermark is None
