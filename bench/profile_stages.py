"""Where a word's time goes: py-spy stacks sorted into the stages of esault's per-tuple path.

Pure: it reads py-spy's raw (collapsed) format, `frame;frame;...;leaf count` per
line, frames as `function (file:line)`. A sample goes to a context stage if any
frame of its stack is one (a checkpoint's msgpack calls are the checkpoint's
cost, an ack message's encoding is acking's), else to the stage of the innermost
frame a rule knows, else to "other". bench/profile_wordcount.py turns the shares into nanoseconds per word.
"""

from __future__ import annotations

import collections
import re
from typing import Iterable

# (stage, pattern on "function (file)"). CONTEXT: any frame of the stack; LEAF: tried from the leaf up.
CONTEXT: list[tuple[str, str]] = [
    ("checkpoint: snapshot and write", r"_snapshot_epoch|seal_epoch|snapshot_into|pack_entries|CheckpointStore"
                                       r"|SnapshotWriter|end_period|_encode_keys|_encode_slice"
                                       r"|_encode_due|pending_snapshot|checkpoint/"),
    ("acking and epoch marks", r"_send_acks|AckUpdate|acker|anchors\.py|BatchHold|_new_edge|XorTree|AckServer"),
]
LEAF: list[tuple[str, str]] = [
    ("checkpoint: barriers and alignment", r"BarrierAligner|Alignment\.|_inject_barrier|send_barrier"),
    ("encoding (msgpack)", r"\bpackb\b|WireCodec\.encode|codec\.py|frames\.py.*encode|EncodedFrame\.__init__"),
    ("decoding (msgpack)", r"_unpack_with|WireCodec\.decode|unpackb|EncodedFrame\.open|\bdecode\b"),
    ("socket and I/O thread", r"zmq/|Endpoint\.|Postman|RemoteMailbox|transport/"),
    ("user: CountWord.process", r"CountWord\.process"),
    ("user: SplitWords.process", r"SplitWords\.process"),
    ("emit: routing and batching", r"build_emit|emit_many|OutputRouter|Route\.|IntervalTable|key_hash|routing/"),
    ("spout: read lines", r"TextFileSpout|dsl/sources\.py|Spout\.emit_batch"),
    ("PE table: lookup, create, dispatch", r"_process_keyed|_process_single|_run_batch|_process_data|_on_data"
                                            r"|PeManager|_open_pe|_make_pe|pe_class|Stage\.__init__"),
    ("spout SPU: pump, flow control", r"SpoutSpuActor|spout_spu\.py"),
    ("actor mailbox (pykka)", r"pykka/|queue\.py|threading\.py"),
    ("metrics, probes, ticks", r"prometheus_client|metrics/|Ticker|HashSampler|LoadFeed|_on_probe|_on_tick|stats\.py"),
]
_CONTEXT = [(stage, re.compile(pattern)) for stage, pattern in CONTEXT]
_LEAF = [(stage, re.compile(pattern)) for stage, pattern in LEAF]
OTHER = "other"
STAGES = [stage for stage, _ in CONTEXT + LEAF] + [OTHER]


def stage_of(frames: list[str]) -> str:
    """The stage of one stack (root first)."""
    for stage, pattern in _CONTEXT:
        if any(pattern.search(frame) for frame in frames):
            return stage
    for frame in reversed(frames):
        for stage, pattern in _LEAF:
            if pattern.search(frame):
                return stage
    return OTHER


def stage_samples(lines: Iterable[str]) -> collections.Counter[str]:
    """Samples per stage of py-spy raw lines (`py-spy record -f raw`, without --threads)."""
    out: collections.Counter[str] = collections.Counter()
    for line in lines:
        stack, _, count = line.rstrip("\n").rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = [re.sub(r":\d+\)$", ")", frame) for frame in stack.split(";")]
        out[stage_of(frames)] += int(count)
    return out
