"""States a smaller instance count would strand: a bolt chained into a spout keeps one state per spout instance.

A non-keyed instance's state can be neither split nor merged (it is the user's object), so it can only come
back under its own instance number. A bolt with SPUs of its own gets that from the checkpoint's record of its
instances (esault.job.unit); a bolt chained into a spout lives and dies with the spout's instances, so a spout
rescaled down, or restarted with a smaller parallelism, must refuse while a state sits above the new count.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

from esault.checkpoint.store import instance_slot

if TYPE_CHECKING:
    from esault.checkpoint.backends import CheckpointStorage


def stranded_stage_states(store: "CheckpointStorage", stages: Iterable[str], epoch: int, instances: Iterable[int],
                          keep: int) -> list[str]:
    """'bolt NAME instance I' for each of the bolts chained into a spout (`stages`) whose instance I >= `keep`
    (of the checkpoint's `instances`) holds a non-empty state at `epoch`."""
    return [f"bolt {stage!r} instance {i}" for stage in stages for i in sorted(instances)
            if i >= keep and store.read_slot(stage, epoch, instance_slot(i))]


def stranded_refusal(spout: str, keep: int, stranded: list[str], epoch: int) -> str:
    """Why `spout` cannot run on `keep` instances, and the way out (a rescale's and a restore's error say it)."""
    return (f"spout {spout!r} on {keep} instance(s) would lose what checkpoint {epoch} holds for "
            f"{', '.join(stranded)}: a bolt chained into a spout keeps one state per spout instance, and such a "
            "state can be neither split nor merged. Declare that bolt with chain=False (its own SPUs keep their "
            "states across any rescale), or keep the spout's instance count")
