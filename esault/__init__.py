"""esault: an actor-based, elastic stream-processing runtime that feeds Apache Spark.

Write spouts and bolts, wire them with TopologyBuilder, submit to a cluster.
"""

from esault.cluster.local import LocalCluster
from esault.cluster.role import in_worker
from esault.config import ElasticityConfig, JobConfig
from esault.dsl import (
    Anchor, Bolt, Grouping, ReplayingSpout, Spout, TextFileSpout, Topology, TopologyBuilder, TopologyContext, Tuple,
)
from esault.errors import (
    ConfigError, EsaultError, FrameError, ResourceError, RoutingError, ScalingError, SerializationError,
    SinkError, StoreDamaged, TopologyError, UnitStartError,
)
from esault.keyhash import KEY_SPACE_MAX, key_hash
from esault.job.job import Job
from esault.messages.control import ScaleResult

__all__ = [
    "KEY_SPACE_MAX", "Anchor", "Bolt", "ConfigError", "ElasticityConfig", "EsaultError", "FrameError",
    "Grouping", "Job", "JobConfig", "LocalCluster", "ReplayingSpout", "ResourceError", "RoutingError",
    "ScaleResult", "ScalingError", "SerializationError", "SinkError", "Spout", "StoreDamaged", "TextFileSpout",
    "Topology", "TopologyBuilder",
    "TopologyContext", "TopologyError", "Tuple", "UnitStartError", "in_worker", "key_hash",
]
