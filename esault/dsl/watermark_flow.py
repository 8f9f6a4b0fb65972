"""Which units send watermarks and which SPUs combine them per input channel, read from the topology.

A spout sends watermarks when its class says so for its params (`Spout.esault_emits_watermarks`: a KafkaSource
with event time); a bolt does when every one of its inputs does, so a window two hops down still gets them.
An SPU whose inputs all send watermarks combines them per channel (esault.datapath.watermarks); any other SPU
keeps the way windows had before: its watermark is the newest timestamp it saw minus the window's bound.
Decided before anything runs, so every SPU of a unit agrees and no channel is read both ways.
"""

from __future__ import annotations

from esault.dsl.topology import Topology


def emits_watermarks(topology: Topology, name: str) -> bool:
    """Unit `name` sends watermarks downstream (a bolt chained into another SPU: that SPU, after it)."""
    spec = topology.unit(name)
    if spec.is_spout:
        return bool(spec.cls.esault_emits_watermarks(dict(spec.params)))
    return bool(spec.inputs) and all(emits_watermarks(topology, i.source) for i in spec.inputs)


def reads_watermarks(topology: Topology, name: str) -> bool:
    """The SPUs of bolt `name` combine their inputs' watermarks per channel (every input sends them)."""
    spec = topology.unit(name)
    return not spec.is_spout and emits_watermarks(topology, name)
