"""check_scalable: a unit refuses a scaling command it cannot run, before anything starts, saying why."""

from __future__ import annotations

from concurrent.futures import Future

import pytest

from esault.dsl import Bolt, Spout, TopologyBuilder
from esault.errors import ScalingError
from esault.job.scale_checks import check_scalable
from esault.messages.control import ScaleCommand


class Words(Spout):
    def next_tuple(self) -> None:
        pass


class Count(Bolt):
    def process(self, tup) -> None:
        pass


def topology():
    b = TopologyBuilder("wc")
    b.set_spout("words", Words)
    b.set_bolt("count", Count, 2).key_grouping("words")
    b.set_bolt("tally", Count, 2).shuffle_grouping("count")
    b.set_bolt("total", Count).global_grouping("tally")
    return b.build()


def command(action: str, spu: int = 1, **fields) -> ScaleCommand:
    return ScaleCommand(action, spu, {}, (), Future(), **fields)


def test_a_unit_that_runs_a_reconfiguration_refuses_another_until_it_finishes() -> None:
    with pytest.raises(ScalingError, match="'count' is already reconfiguring; retry when it finishes"):
        check_scalable(topology().unit("count"), command("split"), {1, 2}, busy=True)


def test_a_split_of_a_key_grouped_bolts_spu_passes_and_one_of_an_spu_it_lacks_names_its_spus() -> None:
    count = topology().unit("count")
    check_scalable(count, command("split"), {1, 2}, busy=False)
    with pytest.raises(ScalingError, match=r"bolt 'count' has no SPU 7; its SPUs are \[1, 2\]"):
        check_scalable(count, command("split", 7), {1, 2}, busy=False)


def test_a_spout_and_a_global_grouped_bolt_refuse_to_split_saying_what_to_do() -> None:
    t = topology()
    with pytest.raises(ScalingError, match="rescale it on its own with Job.rescale"):
        check_scalable(t.unit("words"), command("split"), {1}, busy=False)
    with pytest.raises(ScalingError, match="reads with global_grouping"):
        check_scalable(t.unit("total"), command("split"), {1}, busy=False)


def test_replacing_an_spu_a_live_rescale_retired_is_no_error() -> None:
    words = topology().unit("words")
    check_scalable(words, command("replace", 9), {1}, busy=False, retired_by_rescale={9})
    with pytest.raises(ScalingError, match="has no SPU 9 to replace"):
        check_scalable(words, command("replace", 9), {1}, busy=False)


def test_assign_logic_needs_a_proposed_bolt_and_rescale_of_a_shuffled_bolt_a_new_count() -> None:
    t = topology()
    with pytest.raises(ScalingError, match="no new bolt was proposed"):
        check_scalable(t.unit("count"), command("assign_logic"), {1, 2}, busy=False)
    check_scalable(t.unit("count"), command("assign_logic"), {1, 2}, busy=False, proposed=True)
    with pytest.raises(ScalingError, match="runs 2 SPUs already; nothing to do"):
        check_scalable(t.unit("tally"), command("rescale", spus=2), {3, 4}, busy=False)
    check_scalable(t.unit("tally"), command("rescale", spus=3), {3, 4}, busy=False)
