"""Every message between esault actors, one module per protocol: the ground floor.

- `data`: tuples between SPUs (DataBatch) and an actor's timers;
- `acking`: tuple trees between SPUs, spout SPUs and the ack server;
- `handoff`: routes and the key hand-off of a reconfiguration;
- `control`: scale commands, layouts and SPU starts between the coordinator, units and SPUs; probes;
- `checkpoints`: aligned checkpoints, barriers and their acks;
- `cluster`: worker processes and the driver cluster, and the CLI's status and savepoint requests;
- `chains`: the links between the SPUs of a join chain;
- `shares`: a live spout rescale, shares of a source's input moving between its instances.

The package imports nothing else of esault's, so every floor above may use it
(tests/unit/test_import_graph.py pins both). `MODULES` lists the protocol modules;
esault.transport.wire gives each of their classes a wire tag by name.
"""

from __future__ import annotations

from esault.messages import acking, chains, checkpoints, cluster, control, data, handoff, shares

MODULES = (data, acking, handoff, control, checkpoints, cluster, chains, shares)
"""The protocol modules; every dataclass they define is a message."""
