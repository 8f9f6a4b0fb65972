"""GiverSide: a giver's steps in a key hand-off, one part that bolt and chain-join SPUs both use.

PrepareGive starts a `GiverHandoff` (esault.migration.handoff), answered Prepared. EpochMarkers
(early ones wait in `EarlyMessages`) count the upstream SPUs down; once every one switched tables,
no tuple of a moved range can arrive any more and the SPU's `Gives.give` runs: a bolt SPU moves its
keys' states to their receivers, a chain SPU links its new tail or retires (docs/PROTOCOLS.md).
"""

from __future__ import annotations

from typing import Any, Protocol

from esault.messages.handoff import EpochMarker, PeersLost, PrepareGive, Prepared
from esault.migration.handoff import EarlyMessages, GiverHandoff


class Gives(Protocol):
    """What differs per SPU kind when its upstream all switched."""

    def give(self, giving: GiverHandoff, receivers: dict[int, Any]) -> None:
        """Hand the moved ranges off; `receivers`: receiver SPU id -> mailbox."""


class GiverSide:
    """One per bolt SPU; only its actor thread touches it. Not on the per-tuple path."""

    __slots__ = ("giving", "receivers", "_early", "_spu", "_unit", "_spu_id")

    def __init__(self, spu: Gives, early: EarlyMessages, unit_ref: Any, spu_id: int) -> None:
        self.giving: GiverHandoff | None = None
        self.receivers: dict[int, Any] = {}  # receiver id -> mailbox
        self._early = early  # shared with the SPU's receiver steps
        self._spu = spu
        self._unit = unit_ref
        self._spu_id = spu_id

    def on_prepare_give(self, msg: PrepareGive) -> None:
        giving = self.giving = GiverHandoff(msg.reconfig_id, msg.ranges, msg.upstream, msg.retire)
        self.receivers = dict(msg.receivers)
        for sender in self._early.take_markers(msg.reconfig_id):
            giving.marker(sender)
        self._unit.tell(Prepared(msg.reconfig_id, self._spu_id, "giver"))
        if giving.ready:
            self._give()

    def on_marker(self, msg: EpochMarker) -> None:
        giving = self.giving
        if giving is None or giving.reconfig_id != msg.reconfig_id:
            self._early.markers.setdefault(msg.reconfig_id, set()).add(msg.sender)
            return
        giving.marker(msg.sender)
        if giving.ready:
            self._give()

    def peers_lost(self, msg: PeersLost) -> None:
        """Upstream SPUs died with their worker (no exactly_once): no marker of theirs is waited for."""
        giving = self.giving
        if giving is None or giving.reconfig_id != msg.reconfig_id:
            return
        giving.peers_lost(msg.spus)
        if giving.ready:
            self._give()

    def cancel(self, reconfig_id: int) -> None:
        """Called off before the switch: no marker came, so forgetting is all."""
        if self.giving is not None and self.giving.reconfig_id == reconfig_id:
            self.giving = None
            self.receivers = {}

    def _give(self) -> None:
        giving, self.giving = self.giving, None
        receivers, self.receivers = self.receivers, {}
        self._spu.give(giving, receivers)
