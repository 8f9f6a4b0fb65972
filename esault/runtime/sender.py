"""Shared by spout and bolt SPUs: emitting through the output router, route switches."""

from __future__ import annotations

import logging
from typing import Any

import pykka

from esault.dsl.context import TopologyContext
from esault.dsl.topology import UnitSpec
from esault.errors import SerializationError
from esault.metrics import registry as metrics
from esault.metrics.stats import SpuStats
from esault.routing.output_router import OutputRouter
from esault.runtime.context import JobContext
from esault.runtime.messages import Drain, EpochMarker, InstallRoutes, SpuConfig
from esault.transport.codec import check_serialisable
from esault.transport.frames import EncodedFrame

log = logging.getLogger("esault.spu")


class SenderActor(pykka.ThreadingActor):
    """Base of SPU actors: one output router, stats, and the route-switch step of a reconfiguration."""

    def __init__(self, cfg: SpuConfig, spec: UnitSpec, job: JobContext) -> None:
        super().__init__()
        self.cfg = cfg
        self.spec = spec
        self.job = job
        self.spu_id = cfg.spu_id
        self.unit_name = spec.name
        self.router = OutputRouter(cfg.spu_id, spec.name, cfg.downstream)
        self.stats = SpuStats(job.name, spec.name, cfg.spu_id)
        self.acking = job.config.acking
        self.acker = job.acker
        self._handlers: dict[type, Any] = {
            InstallRoutes: self._on_install_routes,
            Drain: self._on_drain,
        }

    def context(self, key: Any = None) -> TopologyContext:
        return TopologyContext(
            topology=self.job.name, unit=self.unit_name, spu_id=self.spu_id,
            data_dir=self.job.data_dir, params=dict(self.spec.params), key=key,
            per_key=self.spec.per_key,
        )

    def on_receive(self, message: Any) -> Any:
        if type(message) is EncodedFrame:  # data decoded here, on this thread, not on the I/O thread
            message = message.open()
            if message is None:
                return None
        handler = self._handlers.get(type(message))
        if handler is None:
            metrics.count_unknown_message(type(self).__name__)
            log.warning("%s %s/%d ignored unknown message %r", type(self).__name__, self.unit_name,
                        self.spu_id, type(message).__name__)
            return None
        try:
            return handler(message)
        except Exception:  # a framework bug must not kill the SPU and its data
            log.exception("%s %s/%d failed handling %s", type(self).__name__, self.unit_name,
                          self.spu_id, type(message).__name__)
            return None

    def check_emit(self, key: Any, value: Any) -> None:
        """Refuse, at emit time, what could not cross a process boundary."""
        for what, v in (("key", key), ("value", value)):
            try:
                check_serialisable(v)
            except TypeError as exc:
                raise SerializationError(
                    f"{self.unit_name!r} emitted a {what} that cannot be serialised ({exc}); "
                    f"key={key!r}. Emit str, bytes, int, float, bool, None, or lists/tuples/dicts of those"
                ) from None

    def flush(self) -> None:
        """Send what was emitted outside any tracked batch (open(), ticks, control messages)."""
        self.stats.emitted += self.router.flush()[0]

    def _on_install_routes(self, msg: InstallRoutes) -> None:
        # Everything routed by the old table leaves before the marker (channels are FIFO).
        self.flush()
        self.router.install(msg.route)
        for mailbox in msg.notify.values():
            mailbox.tell(EpochMarker(msg.reconfig_id, self.spu_id))

    def _on_drain(self, msg: Drain) -> bool:
        self.flush()
        return True
