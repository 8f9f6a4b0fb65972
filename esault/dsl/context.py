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
