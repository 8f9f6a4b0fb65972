"""TopologyBuilder: every mistake is a TopologyError that names the unit and the fix."""

from __future__ import annotations

import pytest

from esault.config import ElasticityConfig
from esault.dsl import Bolt, Grouping, Spout, TopologyBuilder
from esault.errors import TopologyError


class Words(Spout):
    def next_tuple(self) -> None:
        pass


class Split(Bolt):
    def process(self, tup) -> None:
        pass


class Count(Bolt):
    def __init__(self, start: int = 0) -> None:
        self.start = start

    def process(self, tup) -> None:
        pass


def builder_with_spout(name: str = "words") -> TopologyBuilder:
    b = TopologyBuilder("wc")
    b.set_spout(name, Words)
    return b


# --------------------------------------------------------------- a valid one
def test_a_valid_topology_is_in_topological_order_with_per_key_units() -> None:
    b = TopologyBuilder("wc")
    # Declared out of order on purpose: build() sorts spouts first, then readers after sources.
    b.set_bolt("count", Count, 3, params={"start": 5}, max_spus=4).key_grouping("split")
    b.set_bolt("report", Split).global_grouping("count").all_grouping("words")
    b.set_bolt("split", Split, 2).shuffle_grouping("words")
    b.set_spout("words", Words, max_pending=100)
    topo = b.build()
    names = [u.name for u in topo.units]
    assert names[0] == "words"
    for unit in topo.units:
        for i in unit.inputs:
            assert names.index(i.source) < names.index(unit.name), f"{unit.name} precedes its source {i.source}"
    assert set(names) == {"words", "split", "count", "report"}
    count = topo.unit("count")
    assert count.per_key and not topo.unit("split").per_key and not topo.unit("report").per_key
    assert not topo.unit("words").per_key  # a spout has no inputs
    assert count.parallelism == 3 and count.elasticity == ElasticityConfig(max_spus=4)
    assert count.instantiate().start == 5
    assert count.class_path.endswith(":Count")
    assert topo.unit("words").is_spout and topo.unit("words").max_pending == 100
    assert sorted((u.name, g) for u, g in topo.downstream("words")) == [
        ("report", Grouping.ALL), ("split", Grouping.SHUFFLE),
    ]
    assert [u.name for u, _ in topo.downstream("count")] == ["report"]
    assert topo.upstream("report") == ["count", "words"]


def test_a_chain_keeps_the_only_possible_order() -> None:
    b = builder_with_spout("a")
    b.set_bolt("d", Split).key_grouping("c")
    b.set_bolt("c", Split).key_grouping("b")
    b.set_bolt("b", Split).key_grouping("a")
    assert [u.name for u in b.build().units] == ["a", "b", "c", "d"]


def test_asking_for_an_unknown_unit_lists_the_units() -> None:
    b = builder_with_spout()
    b.set_bolt("split", Split).shuffle_grouping("words")
    with pytest.raises(TopologyError, match=r"topology 'wc' has no unit 'count'; units are: words, split"):
        b.build().unit("count")


# ---------------------------------------------------------------- the graph
def test_a_cycle_is_reported_with_its_path() -> None:
    b = builder_with_spout()
    b.set_bolt("a", Split).shuffle_grouping("words").shuffle_grouping("c")
    b.set_bolt("b", Split).shuffle_grouping("a")
    b.set_bolt("c", Split).shuffle_grouping("b")
    with pytest.raises(TopologyError, match=r"topology has a cycle: a -> b -> c -> a; tuples must flow one way"):
        b.build()


def test_a_bolt_reading_itself_is_a_cycle() -> None:
    b = builder_with_spout()
    b.set_bolt("a", Split).shuffle_grouping("words").shuffle_grouping("a")
    with pytest.raises(TopologyError, match=r"topology has a cycle: a -> a"):
        b.build()


def test_an_unknown_source_suggests_the_closest_name() -> None:
    b = builder_with_spout()
    b.set_bolt("split", Split).shuffle_grouping("word")
    with pytest.raises(TopologyError, match=r"bolt 'split' reads from unknown source 'word'; did you mean 'words'\?"):
        b.build()


def test_an_unknown_source_with_no_close_name_has_no_suggestion() -> None:
    b = builder_with_spout()
    b.set_bolt("split", Split).shuffle_grouping("zzz")
    with pytest.raises(TopologyError, match=r"bolt 'split' reads from unknown source 'zzz'$"):
        b.build()


def test_a_bolt_without_input_shows_how_to_add_one() -> None:
    b = builder_with_spout()
    b.set_bolt("split", Split)
    with pytest.raises(TopologyError, match=r"bolt 'split' has no input: chain a grouping, e\.g\. "
                                            r"set_bolt\('split', \.\.\.\)\.shuffle_grouping\('<source>'\)"):
        b.build()


def test_a_topology_without_a_spout_is_refused() -> None:
    b = TopologyBuilder("wc")
    b.set_bolt("split", Split)
    with pytest.raises(TopologyError, match=r"topology 'wc' has no spout: add one with set_spout"):
        b.build()


def test_mixing_key_grouping_with_another_grouping_is_refused() -> None:
    b = builder_with_spout()
    b.set_spout("more", Words)
    b.set_bolt("count", Count).key_grouping("words").shuffle_grouping("more")
    with pytest.raises(TopologyError, match=r"bolt 'count' mixes key_grouping with shuffle_grouping: per-key PEs "
                                            r"need every input key-grouped; split it into two bolts"):
        b.build()


def test_non_key_groupings_may_be_mixed() -> None:
    b = builder_with_spout()
    b.set_spout("more", Words)
    b.set_bolt("join", Split).shuffle_grouping("words").all_grouping("more")
    assert not b.build().unit("join").per_key


def test_reading_the_same_source_twice_is_refused() -> None:
    b = builder_with_spout()
    declarer = b.set_bolt("split", Split).shuffle_grouping("words")
    with pytest.raises(TopologyError, match=r"bolt 'split' already reads from 'words'; declare each input once"):
        declarer.key_grouping("words")


def test_a_grouping_needs_the_source_name_not_the_class() -> None:
    b = builder_with_spout()
    with pytest.raises(TopologyError, match=r"bolt 'split': shuffle_grouping\(\) takes the source's name \(a str\), "
                                            r"got <class .*Words'>; e\.g\. \.shuffle_grouping\('sentences'\)"):
        b.set_bolt("split", Split).shuffle_grouping(Words)  # type: ignore[arg-type]


# ----------------------------------------------------------- declarations
def test_duplicate_unit_names_are_refused() -> None:
    b = builder_with_spout()
    with pytest.raises(TopologyError, match=r"duplicate unit name 'words': every spout and bolt needs its own name"):
        b.set_bolt("words", Split)


@pytest.mark.parametrize("name", ["", "has space", "dot.ted", "-", 5])
def test_invalid_unit_names_are_refused(name: object) -> None:
    with pytest.raises(TopologyError, match=r"bolt name .* is invalid: use letters, digits, '-' and '_'"):
        TopologyBuilder("wc").set_bolt(name, Split)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["", "   ", None])
def test_a_topology_needs_a_name(name: object) -> None:
    with pytest.raises(TopologyError, match="a topology needs a non-empty name"):
        TopologyBuilder(name)  # type: ignore[arg-type]


@pytest.mark.parametrize("parallelism", [0, -1, 1.5, True, "2", 1025, 10**12])
def test_parallelism_must_be_a_whole_number_from_one_to_max_spus(parallelism: object) -> None:
    with pytest.raises(TopologyError, match=r"bolt 'split': parallelism must be a whole number from 1 to 1024 "
                                            r"\(MAX_SPUS\), got "):
        TopologyBuilder("wc").set_bolt("split", Split, parallelism)  # type: ignore[arg-type]


def test_a_bolt_class_given_to_set_spout_points_to_set_bolt() -> None:
    with pytest.raises(TopologyError, match=r"spout 'words': .*Split'> is not a subclass of esault\.Spout "
                                            r"\(Split is a Bolt: use set_bolt\)"):
        TopologyBuilder("wc").set_spout("words", Split)


def test_a_spout_class_given_to_set_bolt_points_to_set_spout() -> None:
    with pytest.raises(TopologyError, match=r"bolt 'split': .* is not a subclass of esault\.Bolt "
                                            r"\(Words is a Spout: use set_spout\)"):
        TopologyBuilder("wc").set_bolt("split", Words)


def test_a_class_that_is_neither_is_refused() -> None:
    with pytest.raises(TopologyError, match=r"bolt 'split': <class 'dict'> is not a subclass of esault\.Bolt$"):
        TopologyBuilder("wc").set_bolt("split", dict)


def test_an_instance_instead_of_a_class_shows_the_right_call() -> None:
    with pytest.raises(TopologyError, match=r"pass the class itself, e\.g\. set_bolt\('split', MyClass\), not an instance"):
        TopologyBuilder("wc").set_bolt("split", Split())  # type: ignore[arg-type]
    with pytest.raises(TopologyError, match=r"pass the class itself, e\.g\. set_spout\('words', MyClass\)"):
        TopologyBuilder("wc").set_spout("words", Words())  # type: ignore[arg-type]


def test_an_unknown_option_suggests_the_closest_one() -> None:
    with pytest.raises(TopologyError, match=r"bolt 'count': unknown option 'max_latncy'; did you mean 'max_latency'\? "
                                            r"Valid options: .*Constructor arguments go in params=\{\.\.\.\}"):
        TopologyBuilder("wc").set_bolt("count", Count, max_latncy=0.2)


def test_an_unknown_option_lists_the_valid_ones() -> None:
    # Elasticity settings belong to bolts; a spout takes only max_pending, params and placement.
    with pytest.raises(TopologyError, match=r"spout 'words': unknown option 'max_latency'.*Valid options: max_pending, "
                                            r"params, placement\."):
        TopologyBuilder("wc").set_spout("words", Words, max_latency=0.2)
    with pytest.raises(TopologyError, match=r"bolt 'count': unknown option 'start'.*Constructor arguments go in params"):
        TopologyBuilder("wc").set_bolt("count", Count, start=5)


def test_params_must_be_a_mapping() -> None:
    with pytest.raises(TopologyError, match=r"bolt 'count': params must be a dict of constructor arguments, got \[5\]"):
        TopologyBuilder("wc").set_bolt("count", Count, params=[5])


def test_params_the_class_cannot_take_are_refused_when_declared_not_per_tuple_at_run_time() -> None:
    class Scaled(Bolt):
        def __init__(self, factor: int, offset: int = 0) -> None:
            self.factor, self.offset = factor, offset

        def process(self, tup):
            pass

    with pytest.raises(TopologyError, match=r"bolt 'scale': params \['factr'\] do not fit Scaled\(factor, "
                                            r"offset=0\) \(missing a required argument: 'factor'\); params "
                                            r"are the keyword arguments of Scaled.__init__"):
        TopologyBuilder("wc").set_bolt("scale", Scaled, params={"factr": 2})
    class Plain(Bolt):
        def process(self, tup):
            pass

    with pytest.raises(TopologyError, match=r"bolt 'plain': params \['start'\] do not fit Plain\(\) \(got an "
                                            r"unexpected keyword argument 'start'\)"):
        TopologyBuilder("wc").set_bolt("plain", Plain, params={"start": 5})
    TopologyBuilder("wc").set_bolt("scale", Scaled, params={"factor": 2})  # fits: accepted


def test_bad_elasticity_options_name_the_bolt() -> None:
    b = builder_with_spout()
    b.set_bolt("count", Count, max_latency=0).key_grouping("words")
    with pytest.raises(TopologyError, match=r"bolt 'count': ElasticityConfig\.max_latency must be a number > 0, got 0"):
        b.build()


def test_bad_pe_idle_timeout_and_max_pending_are_refused() -> None:
    b = builder_with_spout()
    b.set_bolt("count", Count, pe_idle_timeout=-5).key_grouping("words")
    with pytest.raises(TopologyError, match=r"bolt 'count': pe_idle_timeout must be seconds > 0 or None, got -5"):
        b.build()
    b = TopologyBuilder("wc")
    b.set_spout("words", Words, max_pending=0)
    with pytest.raises(TopologyError, match=r"spout 'words': max_pending must be a whole number >= 1, got 0"):
        b.build()


def test_pe_idle_timeout_defaults_to_the_job_setting_and_accepts_none() -> None:
    b = builder_with_spout()
    b.set_bolt("a", Count).key_grouping("words")
    b.set_bolt("b", Count, pe_idle_timeout=None).key_grouping("words")
    b.set_bolt("c", Count, pe_idle_timeout=2.5).key_grouping("words")
    topo = b.build()
    assert [topo.unit(n).pe_idle_timeout for n in "abc"] == ["job", None, 2.5]


# --- operator chaining ------------------------------------------------------------

def _chain_topology(**split_options):
    from esault.testing import ListSpout

    b = TopologyBuilder("chain")
    b.set_spout("src", ListSpout, params={"items": []})
    b.set_bolt("split", Split, **{"elastic": False, **split_options}).shuffle_grouping("src")
    b.set_bolt("count", Split, 2).key_grouping("split")
    b.set_bolt("sample", Split, 2, chain=False, elastic=False).shuffle_grouping("count")
    b.set_bolt("format", Split, 2, max_spus=2).shuffle_grouping("sample")  # elastic, but it cannot grow
    b.set_bolt("out", Split).global_grouping("format")
    return b.build()


def test_a_shuffle_grouped_bolt_of_equal_parallelism_that_is_its_sources_only_reader_is_chained():
    t = _chain_topology()
    assert t.chained("split") and t.chained("format")
    assert not any(t.chained(n) for n in ("src", "count", "sample", "out"))  # spout, key, chain=False, global
    assert t.host_of("split") == "src" and t.output_unit("src") == "split"
    assert t.host_of("format") == "sample" and t.output_unit("sample") == "format"
    assert [s.name for s in t.unit("src").stages] == ["split"]
    assert [s.name for s in t.unit("sample").stages] == ["format"]


def test_a_bolt_behind_a_key_grouped_unit_or_a_join_chain_keeps_spus_of_its_own():
    """Their SPUs split, merge and move by key range (or rank): a fused bolt's per-SPU state could follow
    no key, and a rollback could not bring back the instances the checkpoint had."""
    from esault.testing import ListSpout

    b = TopologyBuilder("behind-keyed")
    b.set_spout("src", ListSpout, params={"items": []})
    b.set_bolt("count", Split, 2, elastic=False).key_grouping("src")
    b.set_bolt("format", Split, 2, elastic=False).shuffle_grouping("count")
    t = b.build()
    assert not t.chained("format") and t.unit("count").stages == () and t.host_of("format") == "format"


def test_chaining_is_off_for_chain_false_other_parallelism_a_second_reader_or_a_placement():
    assert not _chain_topology(chain=False).chained("split")
    assert not _chain_topology(parallelism=2).chained("split")

    from esault.testing import ListSpout

    class DriverOnly(Split):
        esault_placement = "driver"

    b = TopologyBuilder("two-readers")
    b.set_spout("src", ListSpout, params={"items": []})
    b.set_bolt("a", Split).shuffle_grouping("src")
    b.set_bolt("b", DriverOnly).shuffle_grouping("a")
    b.set_bolt("c", Split).shuffle_grouping("src")
    t = b.build()
    assert not t.chained("a") and not t.chained("c")  # src has two readers
    assert not t.chained("b")  # asks for a placement
    assert t.unit("src").stages == ()


def test_a_bolt_that_can_scale_on_its_own_is_never_chained_so_it_keeps_the_elasticity_it_declares():
    assert not _chain_topology(elastic=True).chained("split"), "elastic, max_spus 8 > parallelism 1"
    assert not _chain_topology(elastic=True, max_spus=2).chained("split")
    assert _chain_topology(elastic=True, max_spus=1).chained("split"), "elastic, but it cannot grow past 1"
    assert _chain_topology(elastic=False).chained("split")
    t = _chain_topology(elastic=True)
    assert t.unit("src").stages == () and t.host_of("split") == "split"


def test_a_chain_of_chains_fuses_every_stage_into_the_head():
    from esault.testing import ListSpout

    b = TopologyBuilder("long")
    b.set_spout("src", ListSpout, params={"items": []})
    b.set_bolt("a", Split, elastic=False).shuffle_grouping("src")
    b.set_bolt("b", Split, elastic=False).shuffle_grouping("a")
    b.set_bolt("c", Split, 3).key_grouping("b")
    t = b.build()
    assert [s.name for s in t.unit("src").stages] == ["a", "b"]
    assert t.host_of("b") == "src" and t.output_unit("a") == "b"


def test_placement_is_driver_or_worker_and_defaults_by_kind():
    from esault.testing import ListSpout

    b = TopologyBuilder("places")
    b.set_spout("src", ListSpout, params={"items": []}, placement="worker")
    b.set_bolt("a", Split, 2).key_grouping("src")
    b.set_bolt("b", Split, placement="driver").global_grouping("a")
    t = b.build()
    assert [t.unit(n).where for n in ("src", "a", "b")] == ["worker", "worker", "driver"]
    with pytest.raises(TopologyError, match=r"bolt 'c': placement must be one of 'driver', 'worker' or None, "
                                            r"got 'gpu'"):
        TopologyBuilder("bad").set_bolt("c", Split, placement="gpu").shuffle_grouping("x")


def test_the_physical_plan_shows_which_bolts_run_chained_into_which_and_which_can_scale():
    from esault.testing import ListSpout

    b = TopologyBuilder("plan")
    b.set_spout("src", ListSpout, params={"items": []})
    b.set_bolt("parse", Split, elastic=False).shuffle_grouping("src")
    b.set_bolt("clean", Split, elastic=False).shuffle_grouping("parse")
    b.set_bolt("count", Split, 2).key_grouping("clean")
    b.set_bolt("enrich", Split, 2).shuffle_grouping("count")  # elastic: SPUs of its own
    b.set_bolt("out", Split).global_grouping("enrich")
    assert b.build().physical_plan() == [
        "physical plan of topology 'plan' (4 unit(s) with SPUs of their own):",
        "  src + parse (chained) + clean (chained)  spout, 1 SPU; parse, clean run in its SPUs",
        "  count                                    bolt, 2 SPUs, elastic up to 8 SPUs",
        "  enrich                                   bolt, 2 SPUs, elastic up to 8 SPUs",
        "  out                                      bolt, 1 SPU, fixed (global grouping)",
    ]
