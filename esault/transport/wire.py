"""Actor messages <-> msgpack frames, without pickle.

A frame is one msgpack array ``[tag, field_1, ..., field_n]``: `tag` is a
small int naming the message class (`TAGS`), the fields follow in dataclass
order, each encoded by what its annotation in `esault.runtime.messages` says:

- int, float, str, bytes, bool, None and ``X | None`` as msgpack scalars;
- ``list``/``tuple``/``frozenset``/``dict`` fields as arrays and maps, decoded
  back to the declared container type;
- a nested message dataclass (RouteSpec, PrepareReceive) as the array of its
  fields, without a tag (the annotation says which class it is);
- a `Tuple` as ``[key, value, source, root, edge]``; user keys and values
  (and every other ``Any``) through `esault.transport.codec`'s packer, so
  tuples, sets and frozensets keep their types (msgpack ext 1, 2, 3);
- a mailbox field (an ``Any`` that holds an ActorRef today, listed in
  `MAILBOX_FIELDS`, or any field annotated `Mailbox`) as ``[process, actor]``,
  through the codec's `to_address`/`from_address` hooks;
- a `concurrent.futures.Future` field makes the whole class local-only
  (`LOCAL_ONLY`): it is refused on encode and dropped on decode.

Tags are given in the order the dataclasses are defined in messages.py,
starting at 1; tests/unit/test_wire.py pins them, the field lists and a few
golden frames, so the wire format cannot change silently. Add new messages at
the end of messages.py.

`WireCodec.decode` raises `FrameError` for every malformed input, never
another exception type; the error's `reason` attribute (`frame_error_reason`)
is one of `FRAME_ERROR_REASONS`, a fixed word fit for a metric label.

Cost: one msgpack pack/unpack per frame plus one validation pass over the
decoded structure; O(size of the message). A DataBatch costs well under
2 us per tuple each way (docs/TRANSPORT.md has the measurement).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import Any

import msgpack

from esault.dsl.tuple import Tuple
from esault.errors import FrameError, SerializationError
from esault.runtime import messages as _messages
from esault.transport import codec as _codec
from esault.transport.address import Address, Mailbox

__all__ = [
    "FRAME_ERROR_REASONS",
    "LOCAL_ONLY",
    "MAILBOX_FIELDS",
    "MESSAGE_TYPES",
    "TAGS",
    "WireCodec",
    "decode_frame",
    "describe",
    "encode_frame",
    "frame_error_reason",
    "tag_of",
]

FRAME_ERROR_REASONS: tuple[str, ...] = (
    "not_bytes",  # decode was given something other than bytes
    "truncated",  # the msgpack data ends early
    "trailing_bytes",  # bytes left after one complete msgpack object
    "malformed",  # not msgpack (reserved byte, bad utf-8, unhashable map key...)
    "too_deep",  # nesting beyond msgpack's or Python's limits
    "not_a_frame",  # valid msgpack, but not [int tag, fields...]
    "unknown_tag",  # no message class has this tag
    "local_only",  # a message that never crosses processes (ScaleCommand)
    "field_count",  # the tag's class has a different number of fields
    "field_type",  # a field (or an item inside it) has the wrong type
    "address",  # a mailbox field could not be turned back into a mailbox
)
"""Every `FrameError.reason` decode can report; small and fixed, for metric labels."""

_EXT_ADDRESS = 16  # a mailbox inside a dynamic (dict[str, Any]) field; codec uses 1, 2, 3


class _MailboxOrValue:
    """Annotation marker: a plain codec value that may also contain mailboxes (SpuConfig.extra)."""


FIELD_TYPES: Mapping[tuple[str, str], str] = types.MappingProxyType({
    ("RouteSpec", "spus"): "dict[int, Mailbox]",
    ("InstallRoutes", "notify"): "dict[int, Mailbox]",
    ("PrepareGive", "receiver"): "Mailbox | None",
    ("ScaleCommand", "upstream"): "dict[int, tuple[Mailbox, str]]",
    ("RegisterOwner", "mailbox"): "Mailbox",
    ("SpuConfig", "extra"): "dict[str, _MailboxOrValue]",
    ("Probe", "reply_to"): "Mailbox",
    ("SpusChanged", "spus"): "dict[int, Mailbox]",
    ("SpusChanged", "result"): "ScaleResult | None",
})
"""The wire type of fields that messages.py annotates ``Any`` but that are not plain user values.

Mailboxes (ActorRefs today) and a nested ScaleResult. Evaluated in the
namespace of messages.py plus `Mailbox`. Once messages.py annotates these
fields precisely, the entries are redundant (and harmless). Every other
``Any`` is a user value (codec types only); tests/unit/test_wire.py pins the
list of those, so a new ``Any`` field needs a decision here.
"""


