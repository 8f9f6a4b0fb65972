"""The unit of data as a bolt sees it: a key/value pair and the unit that emitted it."""

from __future__ import annotations

from typing import Any


class Tuple:
    """One stream element, handed to `Bolt.process(tup)`.

    Tuples travel between SPUs as columns of a batch (keys, values), never as
    objects; the runtime fills one `Tuple` per SPU with each element in turn,
    so **a Tuple is valid only during the process() call that received it**.
    Keep `tup.key` and `tup.value` (or `tup.copy()`), not `tup` itself. This
    saves an allocation per tuple on the hot path (about 120 ns of 1 us).
    """

    __slots__ = ("key", "value", "source")

    def __init__(self, key: Any = None, value: Any = None, source: str = "") -> None:
        self.key = key
        self.value = value
        self.source = source

    def copy(self) -> Tuple:
        """A Tuple of its own, safe to keep after process() returns."""
        return Tuple(self.key, self.value, self.source)

    def __iter__(self):
        """`key, value, source = tup` unpacks like the namedtuple it used to be."""
        return iter((self.key, self.value, self.source))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Tuple):
            return NotImplemented
        return (self.key, self.value, self.source) == (other.key, other.value, other.source)

    __hash__ = None  # type: ignore[assignment]  # mutable: the runtime refills it

    def __repr__(self) -> str:
        return f"Tuple(key={self.key!r}, value={self.value!r}, source={self.source!r})"
