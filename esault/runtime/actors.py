"""Which actor class runs an SPU of a unit: spouts and bolts have their own, and a bolt class may name its own
(a join chain's SPUs run `esault.joins.spu.ChainSpuActor`) through a static `esault_actor()`.

The class comes from the topology module the worker imported (trusted code), never from a frame.
"""

from __future__ import annotations

from esault.dsl.topology import UnitSpec
from esault.runtime.bolt_spu import BoltSpuActor
from esault.runtime.spout_spu import SpoutSpuActor


def actor_class(spec: UnitSpec) -> type:
    if spec.is_spout:
        return SpoutSpuActor
    own = getattr(spec.cls, "esault_actor", None)
    return own() if own is not None else BoltSpuActor
