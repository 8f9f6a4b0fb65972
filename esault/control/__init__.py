"""The control plane's user side: controllers that read metrics and reconfigure a running job.

See docs/CONTROL_PLANE.md. A `Controller` gets a `MetricsSnapshot` every
`interval` seconds and returns operations (`AssignWorkload`, `Rescale`,
`AssignResource`, `AssignLogic`, `Split`, `Merge`); `Job.add_controller` runs
it. Built in: `LatencyController` (the paper's probe rules; the job runs one per
elastic bolt) and `DS2Controller` (rate-based, one step to the needed parallelism).
"""

from esault.control.controller import Controller
from esault.control.ds2 import DS2Controller
from esault.control.events import Change, ProbeRecord
from esault.control.latency import LatencyController
from esault.control.operations import (
    AssignLogic, AssignResource, AssignWorkload, Merge, Operation, Rescale, Split,
)
from esault.control.runner import ControllerRunner, Decision
from esault.control.snapshot import MetricsSnapshot, SnapshotBuilder, SpuMetrics, UnitMetrics

__all__ = [
    "AssignLogic", "AssignResource", "AssignWorkload", "Change", "Controller", "ControllerRunner", "DS2Controller", "Decision", "LatencyController",
    "Merge",
    "MetricsSnapshot", "Operation", "ProbeRecord", "Rescale", "SnapshotBuilder", "Split", "SpuMetrics", "UnitMetrics",
]
