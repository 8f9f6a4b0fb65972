"""Checkpoints: epoch barriers, aligned snapshots, the durable record, rollback (docs/CHECKPOINTS.md).

alignment.py  which input channels an SPU holds while a barrier is aligned (pure)
store.py      the job's SQLite record: completed checkpoints, spout positions, state rows by epoch
snapshots.py  an SPU's writer thread: state rows to the store off the data path, then the ack
coordinator.py  the driver side: trigger, collect acks, complete, roll back after a failure
"""
