"""Which actor class runs an SPU of a unit: spouts and bolts have their own, and a join chain's SPUs (a bolt
class with `esault_chain = True`, e.g. ChainJoinBolt) run `esault.datapath.chain_spu.ChainSpuActor`.

The runtime picks the kind: a declaration names what to run and never imports runtime code.
The class comes from the topology module the worker imported (trusted code), never from a frame.
"""

from __future__ import annotations

from esault.dsl.topology import UnitSpec
from esault.datapath.chain_spu import ChainSpuActor
from esault.datapath.bolt_spu import BoltSpuActor
from esault.datapath.spout_spu import SpoutSpuActor


def actor_class(spec: UnitSpec) -> type:
    if spec.is_spout:
        return SpoutSpuActor
    return ChainSpuActor if getattr(spec.cls, "esault_chain", False) else BoltSpuActor
