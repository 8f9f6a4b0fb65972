"""Windows per key on event time (watermarks, allowed lateness, a side output) or processing time.

Pure cores: assigners (Tumbling, Sliding, Session), WatermarkTracker,
WindowSet (the per-key window state machine), KeyWindows (dense sliding
windows evaluated only where a key's result changes). The user-facing shell
is WindowBolt. See docs/WINDOWS.md.
"""

from esault.windows.assigners import Session, Sliding, Tumbling
from esault.windows.bolt import WindowBolt, is_late
from esault.windows.key_windows import KeyWindows
from esault.windows.watermark import EventTime, ProcessingTime, WatermarkTracker
from esault.windows.window_set import WindowSet

__all__ = ["EventTime", "KeyWindows", "ProcessingTime", "Session", "Sliding", "Tumbling", "WatermarkTracker",
           "WindowBolt", "WindowSet", "is_late"]
