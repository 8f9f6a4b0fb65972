"""Whether the Ray head still answers: the driver's watch on the GCS its Ray workers depend on.

Without its head (the GCS: killed, its node lost, cut off), Ray places no new actor, and every Ray process,
each node's raylet and this driver's own Ray connection included, ends itself once the GCS has not answered for
gcs_rpc_server_reconnect_timeout_s (60 s by default): the esault workers on Ray end with their raylets, and the
driver's process is ended by Ray's core worker. A job on Ray therefore fails loudly once the head has been gone
for `head_timeout` seconds (below Ray's own timeout), with its last checkpoint kept, instead of losing its
workers one by one and its driver without a word. `HeadWatch` decides from the probes (pure, tested
deterministically); `probe_gcs` is one probe (a TCP connection: a GCS that is merely slow still accepts it).
"""

from __future__ import annotations

import socket

HEAD_TIMEOUT = 30.0
"""Seconds without an answer from the Ray head after which the jobs on Ray fail: longer than a head restarted
with GCS fault tolerance takes to come back, and shorter than Ray's 60 s after which its processes end."""
PROBE_INTERVAL = 2.0
"""Seconds between two probes of the head."""
PROBE_TIMEOUT = 2.0
"""Seconds one probe (a TCP connection to the GCS) may take."""


class HeadWatch:
    """The head is lost once no probe answered for `head_timeout` seconds since the last one that did (or since
    the watch started); once lost it stays lost (the jobs that relied on it have failed)."""

    def __init__(self, head_timeout: float, started: float) -> None:
        if not head_timeout > 0:
            raise ValueError(f"head_timeout must be seconds > 0, got {head_timeout!r}")
        self.head_timeout = head_timeout
        self.last_answer = started
        self.lost_at: float | None = None

    def probed(self, now: float, answered: bool) -> bool:
        """Note one probe's result at `now`; True exactly once: when the head has just become lost."""
        if self.lost_at is not None:
            return False
        if answered:
            self.last_answer = max(self.last_answer, now)
            return False
        if now - self.last_answer >= self.head_timeout:
            self.lost_at = now
            return True
        return False

    @property
    def silent_for(self) -> float | None:
        """Seconds the head had not answered when it was declared lost (None while it is not)."""
        return None if self.lost_at is None else self.lost_at - self.last_answer


def probe_gcs(address: str, timeout: float = PROBE_TIMEOUT) -> bool:
    """Whether something accepts a TCP connection at `address` (HOST:PORT) within `timeout` seconds."""
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
        return True
    except (OSError, ValueError):
        return False
