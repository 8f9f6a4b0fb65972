"""The driver's REST API and web page over the control plane (docs/CONTROL_PLANE.md)."""

from esault.api.server import ControlApi

__all__ = ["ControlApi"]
