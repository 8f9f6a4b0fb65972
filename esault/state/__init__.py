"""Durable per-key state: the store idle PEs park their state in (and, by design, checkpoints: docs/CHECKPOINTS.md)."""
