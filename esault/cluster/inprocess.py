"""Runs SPU actors as threads of this process (the embedded default for tests)."""

from __future__ import annotations

from typing import Any, Iterable, Sequence

import pykka

from esault.errors import ResourceError, UnitStartError
from esault.cluster.two_phase import in_two_phases
from esault.cluster.resources import InProcessResources, ResourceManager, Slot
from esault.dsl.topology import UnitSpec
from esault.datapath.context import JobContext
from esault.datapath.actors import start_spu
from esault.messages.control import SpuConfig
from esault.datapath.sender import StartCheck


class InProcessLauncher:
    """Starts each SPU on a slot of `resources`, as a Pykka actor in this process."""

    def __init__(self, resources: ResourceManager | None = None) -> None:
        self.resources = resources or InProcessResources()
        self._slots: dict[Any, Slot] = {}

    def start_spu(self, spec: UnitSpec, cfg: SpuConfig, job: JobContext, worker: str | None = None) -> Any:
        return self._started(self._launch_on(spec, cfg, job, worker))

    def start_spus(self, starts: Sequence[tuple[UnitSpec, SpuConfig, JobContext, str | None]]) -> list[Any]:
        """start_spu for each, their open()s running at once; each item: the mailbox, or the exception."""
        return in_two_phases(starts, lambda start: self._launch_on(*start), self._started)

    def _launch_on(self, spec: UnitSpec, cfg: SpuConfig, job: JobContext, worker: str | None) -> Any:
        if worker is not None:
            raise ResourceError(f"this cluster runs every SPU in one process: there is no worker {worker!r}; "
                                "start it with LocalCluster(workers=N) to place SPUs on workers")
        return self.launch(spec, cfg, job)

    def _started(self, ref: Any) -> Any:
        self.await_start(ref)
        return ref

    def stop_spus(self, mailboxes: Iterable[Any]) -> None:
        for mailbox in mailboxes:
            self.stop_spu(mailbox, block=True)

    def launch(self, spec: UnitSpec, cfg: SpuConfig, job: JobContext) -> Any:
        """Start the SPU's actor and return at once: its open() runs on its own thread (await_start waits)."""
        slot = self.resources.acquire()
        ref = start_spu(cfg, spec, job)
        self._slots[ref.actor_urn] = slot
        return ref

    def await_start(self, ref: Any) -> None:
        """Block until the SPU launched as `ref` ran its user code's constructor and open(); UnitStartError
        (the SPU stopped) if they raised."""
        error = ref.ask(StartCheck())
        if error is not None:
            self.stop_spu(ref, block=True)
            raise UnitStartError(f"{error}; the job cannot run without it: fix the unit and run again")

    def stop_spu(self, mailbox: Any, block: bool) -> None:
        slot = self._slots.pop(mailbox.actor_urn, None)
        try:
            mailbox.stop(block=block)
        except pykka.ActorDeadError:
            pass
        if slot is not None:
            self.resources.release(slot)
