"""The unit of data: a key/value pair plus the framework's ack ids."""

from __future__ import annotations

from collections import namedtuple

Tuple = namedtuple("Tuple", "key value source root edge")
Tuple.__doc__ = """One stream element as a bolt sees it.

key, value: the user's data. source: the name of the unit that emitted it.
root, edge: the ack ids of its tuple tree (0, 0 when acking is off); user code
never needs them. A plain namedtuple: creating one is the cheapest Python
object with named fields, and it is what the per-tuple hot path builds.
"""
