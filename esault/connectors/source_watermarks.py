"""PartitionWatermarks: a KafkaSource instance's watermark, per partition, with idleness (Flink's withIdleness).

Each partition's watermark is the newest event time the instance emitted from it; the instance's is the
minimum over its partitions that are not idle (esault.windows.channel_watermarks), and a window downstream
subtracts its bound (EventTime.max_out_of_orderness), so a record is late only if it is later than the bound
in its own partition. A partition from which nothing was fetched for `idle_timeout` seconds, and that
has nothing waiting (in the alignment buffer, or on the broker past its position: a partition whose records
librdkafka hands over after another's big batch is slow, not silent), is idle: left out of the minimum until a record of it comes again. A
partition that reached the end of a bounded read is gone. An instance with no partition, or with every one
idle, is idle itself. Pure but for the clock it is given; the source calls `seen()` as it emits and the
rest on the SPU's ticks.
"""

from __future__ import annotations

from typing import Callable, Iterable

from esault.connectors.partitions import TopicPartition
from esault.windows.channel_watermarks import NOTHING_YET, ChannelWatermarks

_UNSEEN = object()


class PartitionWatermarks:
    """The watermark of one source instance over the partitions it reads. O(partitions) per tick, O(1) per
    emitted record (`newest` is a dict the source updates inline)."""

    def __init__(self, idle_timeout: float | None, now: Callable[[], float]) -> None:
        self.idle_timeout = idle_timeout
        self._now = now
        self.newest: dict[TopicPartition, float] = {}
        """Per partition, the newest event time emitted (the source updates it as it emits)."""
        self._inputs = ChannelWatermarks()
        self._progress: dict[TopicPartition, object] = {}  # what moved last (an offset) and when
        self._active_at: dict[TopicPartition, float] = {}
        self._owned = 0

    def update(self, partitions: Iterable[TopicPartition], progress: Callable[[TopicPartition], object],
               done: Callable[[TopicPartition], bool], waiting: Callable[[TopicPartition], int]) -> list[TopicPartition]:
        """Bring the combination up to date (a tick): `partitions` read now, `progress(tp)` something that
        moves whenever a record of tp was fetched (its fetch position), `done(tp)` at the end of a bounded read,
        `waiting(tp)` records known to wait for it (fetched and not emitted, or on the broker past its position;
        asked only of a partition silent for idle_timeout). The partitions that just went idle."""
        now = self._now()
        inputs = self._inputs
        reading = []
        for tp in partitions:  # in an order where no step lets the minimum rise on a partial picture:
            if done(tp):  # ended ones leave first,
                inputs.remove(tp)
            elif not inputs.is_gone(tp):
                reading.append(tp)
                inputs.expect(tp)  # new ones hold it before any other moves
        active, went_idle = [], []
        for tp in reading:
            moved = progress(tp)
            if self._progress.get(tp, _UNSEEN) != moved:
                self._progress[tp] = moved
                self._active_at[tp] = now
            silent = self.idle_timeout is not None and now - self._active_at[tp] >= self.idle_timeout
            if silent and not waiting(tp):
                if not inputs.is_idle(tp):
                    went_idle.append(tp)
            else:
                active.append(tp)
                inputs.set_idle(tp, False)  # speaking again: back in the minimum at its old value first,
        newest = self.newest
        for tp in active:  # then the new values,
            if tp in newest:
                inputs.advance(tp, newest[tp])
        for tp in went_idle:  # and last the ones that fell silent
            inputs.set_idle(tp)
        self._owned = len(reading)
        return went_idle

    @property
    def watermark(self) -> float | None:
        """The instance's watermark, None before every partition not idle emitted a record."""
        value = self._inputs.watermark
        return None if value == NOTHING_YET else value

    def is_idle(self, tp: TopicPartition) -> bool:
        """`tp` is left out of the watermark for now: silent for idle_timeout with nothing waiting."""
        return self._inputs.is_idle(tp)

    @property
    def idle(self) -> bool:
        """No partition to read, or every one idle."""
        return self._owned == 0 or self._inputs.idle

    def forget(self, tp: TopicPartition) -> None:
        """`tp` moved to another instance (a live rescale): out of the minimum now; should it come back, it
        holds the watermark again until it emits, like a new partition."""
        self._inputs.remove(tp)
        self._inputs.readmit(tp)
        self.newest.pop(tp, None)
        self._progress.pop(tp, None)
        self._active_at.pop(tp, None)

    def clear(self) -> None:
        """A restore: what was emitted before counts no more; the partitions start over."""
        self.newest.clear()
        self._inputs = ChannelWatermarks()
        self._progress.clear()
        self._active_at.clear()
