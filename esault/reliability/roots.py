"""Tree root ids that name their owner, so an ack finds its spout SPU without asking anyone.

A spout SPU tracks the trees it roots itself (docs/PROTOCOLS.md, "Tuple
trees"); every SPU that acks a batch must send the ack to that spout SPU. The
low OWNER_BITS of a root are the owner's key (its SPU id, masked), the high
bits random, and the top bit is set so a root is never 0 (0 means "no tree
yet" to a spout). A root stays a 64-bit unsigned int, as before.

Two spout SPUs of one job share an owner key only if their ids differ by a
multiple of 2**24 while both are alive: a cluster would have to start sixteen
million SPUs in between.
"""

from __future__ import annotations

from random import getrandbits

__all__ = ["OWNER_BITS", "OWNER_MASK", "by_owner", "new_root", "owner_key", "owner_of"]

OWNER_BITS = 24
OWNER_MASK = (1 << OWNER_BITS) - 1
_RANDOM_BITS = 64 - OWNER_BITS - 1  # 39: two live trees of one owner collide with odds ~2**-39 each
_TOP = 1 << (64 - OWNER_BITS - 1)


def owner_key(spu_id: int) -> int:
    """The key a spout SPU's trees carry in their roots."""
    return spu_id & OWNER_MASK


def new_root(owner: int) -> int:
    """A fresh root id for a tree owned by the spout SPU whose owner_key is `owner`: in [2**63, 2**64)."""
    return (getrandbits(_RANDOM_BITS) | _TOP) << OWNER_BITS | owner


def owner_of(root: int) -> int:
    """The owner key a root carries."""
    return root & OWNER_MASK


def by_owner(deltas: dict[int, int]) -> dict[int, dict[int, int]]:
    """An ack's {root: xor} split into one such dict per owner key."""
    parts: dict[int, dict[int, int]] = {}
    for root, xor in deltas.items():
        owner = root & OWNER_MASK
        part = parts.get(owner)
        if part is None:
            parts[owner] = {root: xor}
        else:
            part[root] = xor
    return parts
