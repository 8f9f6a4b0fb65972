"""At-least-once delivery: XOR tuple-tree tracking and dead letters (PAPER_NOTES section 2)."""

from esault.reliability.ack_tracker import AckTracker, TreeOutcome
from esault.reliability.dead_letters import DeadLetterWriter, read_dead_letters

__all__ = ["AckTracker", "DeadLetterWriter", "TreeOutcome", "read_dead_letters"]
