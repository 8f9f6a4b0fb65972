"""New partitions while a source runs: what a metadata refresh finds and which instance takes each
(esault.connectors.partitions.partitions_read and newly_owned, the pure part of KafkaSource._refresh).

The test broker (Tansu) cannot add partitions to a topic (no CreatePartitions), so a grown partition count
is shown here, on metadata answers; tests/system/test_kafka_connectors.py shows a new topic of a pattern
on the broker, through the same two functions."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from esault.connectors.partitions import newly_owned, owned, partitions_read

TOPICS = ["orders", "ev-a", "ev-b", "ev-c", "other", "__consumer_offsets"]
READ = st.sampled_from([["orders"], ["^ev-.*"], ["orders", "^ev-.*"], ["^.*"], ["other", "ev-b"]])


def grown(metadata: dict[str, int], growth: dict[str, int]) -> dict[str, int]:
    """A later metadata answer: every topic keeps its partitions and may gain some; new topics may appear."""
    out = dict(metadata)
    for topic, more in growth.items():
        out[topic] = out.get(topic, 0) + more
    return out


def answer(counts: dict[str, int]) -> dict[str, list[int]]:
    return {t: list(range(n)) for t, n in counts.items() if n > 0}


def expected_reads(read: list[str], counts: dict[str, int]) -> set[tuple[str, int]]:
    """The naive model: a named topic, or a non-internal topic starting with a pattern's prefix ('^ev-', '^')."""
    def reads(topic: str) -> bool:
        return any(topic == r or (r.startswith("^") and topic.startswith(r[1:].rstrip(".*"))
                                  and not topic.startswith("__")) for r in read)
    return {(t, p) for t, n in counts.items() if reads(t) for p in range(n)}


@settings(max_examples=300)
@given(READ, st.dictionaries(st.sampled_from(TOPICS), st.integers(0, 6)),
       st.lists(st.dictionaries(st.sampled_from(TOPICS), st.integers(0, 5)), min_size=1, max_size=4),
       st.integers(1, 6))
def test_each_partition_a_refresh_finds_is_read_by_exactly_one_instance_the_one_a_fresh_start_would_pick(
        read, start, growths, instances):
    counts = start
    known = [set(owned(partitions_read(read, answer(counts)), i, instances)) for i in range(instances)]
    assert set().union(*known) == expected_reads(read, counts)
    for growth in growths:
        before = expected_reads(read, counts)
        counts = grown(counts, growth)
        found = partitions_read(read, answer(counts))
        assert set(found) == expected_reads(read, counts), "the refresh finds every partition read, only those"
        added = [newly_owned(found, known[i], i, instances) for i in range(instances)]
        flat = [tp for new in added for tp in new]
        assert len(flat) == len(set(flat)), f"a new partition went to two instances: {added}"
        assert set(flat) == set(found) - before, "every new partition, and only new ones, is taken"
        for i in range(instances):
            known[i] |= set(added[i])
            assert known[i] == set(owned(found, i, instances)), \
                "an instance reads what a restart (or rollback) would give it: no partition changed owner"
            assert newly_owned(found, known[i], i, instances) == [], "a second refresh finds nothing new"


def test_a_topic_grown_from_2_to_4_partitions_gives_each_new_one_to_one_of_two_instances():
    before = partitions_read(["orders"], {"orders": [0, 1]})
    known = [set(owned(before, i, 2)) for i in range(2)]
    after = partitions_read(["orders"], {"orders": [0, 1, 2, 3], "other": [0]})
    added = [newly_owned(after, known[i], i, 2) for i in range(2)]
    assert sorted(added) == [[("orders", 2)], [("orders", 3)]]


def test_a_named_topic_absent_from_the_answer_has_no_partitions_and_internal_topics_never_match_a_pattern():
    assert partitions_read(["orders", "^.*"], {"__consumer_offsets": [0], "ev": [0]}) == [("ev", 0)]
