"""Which actor runs an SPU of a unit, and with which processing part: the one place the runtime resolves a
declaration. Spouts run `SpoutSpuActor`; bolts run `BoltSpuActor`, whose `Processing` part is
`ChainProcessing` for a join chain's SPUs (a bolt class with `esault_chain = True`, e.g. ChainJoinBolt) and
`KeyedProcessing` for every other bolt.

The runtime picks the kind: a declaration names what to run and never imports runtime code.
The class comes from the topology module the worker imported (trusted code), never from a frame.
"""

from __future__ import annotations

from typing import Any

from esault.datapath.bolt_spu import BoltSpuActor
from esault.datapath.chain_spu import ChainProcessing
from esault.datapath.context import JobContext
from esault.datapath.keyed import KeyedProcessing
from esault.datapath.processing import Processing
from esault.datapath.spout_spu import SpoutSpuActor
from esault.dsl.topology import UnitSpec
from esault.messages.control import SpuConfig


def processing_of(spec: UnitSpec) -> type[Processing]:
    """The processing part a bolt's SPUs run: a chain worker for a chain join, else the bolt's PEs."""
    return ChainProcessing if getattr(spec.cls, "esault_chain", False) else KeyedProcessing


def start_spu(cfg: SpuConfig, spec: UnitSpec, job: JobContext) -> Any:
    """Start the actor of SPU `cfg` of unit `spec` (its on_start runs on its own thread); its ActorRef."""
    if spec.is_spout:
        return SpoutSpuActor.start(cfg, spec, job)
    return BoltSpuActor.start(cfg, spec, job, processing_of(spec))
