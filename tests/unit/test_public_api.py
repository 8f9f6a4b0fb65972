"""The names importable from `esault` are the contract: this pins them."""

import esault


def test_the_public_names_are_exactly_these():
    assert sorted(esault.__all__) == sorted([
        "KEY_SPACE_MAX", "Anchor", "Bolt", "ConfigError", "ElasticityConfig", "EsaultError", "FrameError",
        "Grouping", "Job", "JobConfig", "LocalCluster", "ReplayingSpout", "ResourceError", "RoutingError",
        "ScaleResult", "ScalingError", "SerializationError", "SinkError", "Spout", "StoreDamaged", "Topology",
        "TextFileSpout", "TopologyBuilder", "TopologyContext", "TopologyError", "Tuple", "UnitStartError", "in_worker",
        "key_hash",
    ])
    for name in esault.__all__:
        assert getattr(esault, name) is not None, name
