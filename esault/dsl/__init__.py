"""The user-facing programming model: spouts, bolts, topologies (PAPER_NOTES section 1)."""

from esault.dsl.bolt import Anchor, Bolt
from esault.dsl.context import TopologyContext
from esault.dsl.sources import TextFileSpout
from esault.dsl.spout import ReplayingSpout, Spout
from esault.dsl.topology import BoltDeclarer, Grouping, Topology, TopologyBuilder, UnitSpec
from esault.dsl.tuple import Tuple

__all__ = [
    "Anchor", "Bolt", "BoltDeclarer", "Grouping", "ReplayingSpout", "Spout", "Topology",
    "TextFileSpout", "TopologyBuilder", "TopologyContext", "Tuple", "UnitSpec",
]
