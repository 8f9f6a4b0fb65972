"""The control plane's user side: controllers that read metrics and reconfigure a running job.

See docs/CONTROL_PLANE.md. A `Controller` gets a `MetricsSnapshot` every
`interval` seconds and returns operations (`AssignWorkload`, `Rescale`,
`AssignResource`, `Split`, `Merge`); `Job.add_controller` runs it.
`DS2Controller` is a built-in rate-based policy.
"""

from esault.control.controller import Controller
from esault.control.ds2 import DS2Controller
from esault.control.operations import AssignResource, AssignWorkload, Merge, Operation, Rescale, Split
from esault.control.runner import ControllerRunner, Decision
from esault.control.snapshot import MetricsSnapshot, SnapshotBuilder, SpuMetrics, UnitMetrics

__all__ = [
    "AssignResource", "AssignWorkload", "Controller", "ControllerRunner", "DS2Controller", "Decision", "Merge",
    "MetricsSnapshot", "Operation", "Rescale", "SnapshotBuilder", "Split", "SpuMetrics", "UnitMetrics",
]
