"""What a running spout or bolt instance may know about where it runs."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True, slots=True)
class TopologyContext:
    """Passed to open(context): identity of the instance and the job's settings."""

    topology: str
    unit: str
    spu_id: int
    data_dir: Path
    params: dict[str, Any] = field(default_factory=dict)
    key: Any = None
    per_key: bool = False
    instance: int = 0
    """Which of the unit's parallel instances this is, 0 .. instances - 1 (a spout reads partition `instance`)."""
    instances: int = 1
