"""TopologyBuilder: declare spouts, bolts and the groupings that connect them."""

from __future__ import annotations

import dataclasses
import difflib
import enum
import inspect
import math
from dataclasses import dataclass, field
from typing import Any, Mapping

from esault.config import MAX_SPUS, ElasticityConfig
from esault.dsl.bolt import Bolt
from esault.dsl.spout import Spout
from esault.errors import ConfigError, TopologyError


class Grouping(enum.Enum):
    """How a unit's SPUs share the tuples of one source."""

    KEY = "key"  # by stable key hash over the interval table: per-key PEs
    SHUFFLE = "shuffle"  # round robin over SPUs
    ALL = "all"  # a copy to every SPU
    GLOBAL = "global"  # everything to the first SPU
    TAG = "tag"  # per tuple: heavy keys over several SPUs weighted by speed, light keys the less loaded of two
    PARTIAL_KEY = "partial_key"  # per tuple: the less loaded of two hash choices (PKG), by what this sender sent
    CHAIN_HEAD = "chain_head"  # everything to the first SPU of a join chain (its R end)
    CHAIN_TAIL = "chain_tail"  # everything to the last SPU of a join chain (its S end)


_ELASTIC_FIELDS = {f.name for f in dataclasses.fields(ElasticityConfig)}
_BOLT_OPTIONS = {"params", "pe_idle_timeout", "chain", "placement", "versions"} | _ELASTIC_FIELDS
DECLARED_VERSION = "declared"
"""The version name of the class and params a bolt was declared with (set_bolt's own)."""
_SPOUT_OPTIONS = {"params", "max_pending", "placement"}
PLACEMENTS = ("driver", "worker")


@dataclass(frozen=True, slots=True)
class InputSpec:
    source: str
    grouping: Grouping


@dataclass(frozen=True, slots=True)
class UnitSpec:
    """One declared spout or bolt: a processing unit of the paper."""

    name: str
    cls: type
    parallelism: int
    is_spout: bool
    params: Mapping[str, Any] = field(default_factory=dict)
    inputs: tuple[InputSpec, ...] = ()
    pe_idle_timeout: float | None | str = "job"  # "job" = use the job's setting
    max_pending: int | None = None
    elasticity: ElasticityConfig = field(default_factory=ElasticityConfig)
    chain: bool = True
    """May run fused into its upstream's SPUs (see Topology.chained); False keeps it a unit of its own."""
    stages: tuple[UnitSpec, ...] = ()
    """Bolts fused into this unit's SPUs, in order: each one's output feeds the next (set by build())."""
    placement: str | None = None
    """Where its SPUs run with worker processes: "driver", "worker", or None for the class's
    `esault_placement`, else the default (spouts in the driver, bolts in workers)."""
    versions: Mapping[str, tuple[type, Mapping[str, Any]]] = field(default_factory=dict)
    """Code this bolt may be swapped to while it runs, by name (Job.swap, the REST API, `esault swap`):
    an operator names a version the topology file declared, never a class. Includes DECLARED_VERSION."""

    def version(self, name: str) -> tuple[type, Mapping[str, Any]]:
        """The (bolt class, params) of a declared version; TopologyError naming the ones there are."""
        if name not in self.versions:
            declared = ", ".join(sorted(self.versions)) or "none"
            raise TopologyError(f"bolt {self.name!r} has no version {name!r}; declared: {declared} (declare "
                                f"more with set_bolt({self.name!r}, ..., versions={{'v2': (NewBolt, params)}}))")
        return self.versions[name]

    @property
    def where(self) -> str:
        """"driver" or "worker": where this unit's SPUs start when the job has worker processes."""
        chosen = self.placement or getattr(self.cls, "esault_placement", None)
        return chosen or ("driver" if self.is_spout else "worker")

    @property
    def per_key(self) -> bool:
        """Key-grouped bolts run one PE per key."""
        return bool(self.inputs) and all(i.grouping is Grouping.KEY for i in self.inputs)

    @property
    def class_path(self) -> str:
        return f"{self.cls.__module__}:{self.cls.__qualname__}"

    def instantiate(self) -> Any:
        return self.cls(**self.params)


@dataclass(frozen=True, slots=True)
class Topology:
    """A validated DAG of units, in topological order (spouts first)."""

    name: str
    units: tuple[UnitSpec, ...]

    def unit(self, name: str) -> UnitSpec:
        for u in self.units:
            if u.name == name:
                return u
        raise TopologyError(
            f"topology {self.name!r} has no unit {name!r}; units are: "
            + ", ".join(u.name for u in self.units)
        )

    def downstream(self, source: str) -> list[tuple[UnitSpec, Grouping]]:
        """The units that read `source`, with the grouping of that edge."""
        out = []
        for u in self.units:
            for i in u.inputs:
                if i.source == source:
                    out.append((u, i.grouping))
        return out

    def upstream(self, name: str) -> list[str]:
        return [i.source for i in self.unit(name).inputs]

    # --- operator chaining (as in Flink): a physical plan decided once, at build() ---

    def chained(self, name: str) -> bool:
        """True if bolt `name` runs fused into its upstream's SPUs instead of SPUs of its own.

        A bolt is chained when it has one input, shuffle-grouped, from a unit
        with the same parallelism whose only reader it is, it does not ask for
        a placement (esault_placement), does not define on_batch_end(), it
        was not declared chain=False, and it cannot scale on its own: it is
        not elastic, or its max_spus is its parallelism. (A bolt keeps the
        elasticity it declares: chained, it could only scale with its
        upstream, which is never probed for it.) Nor behind a key-grouped unit
        or a join chain: their SPUs split, merge and move by key range or by
        rank, and a bolt fused into them would keep one state per SPU, which
        follows no key: a rollback could bring back neither an instance a
        merge retired nor only the instances the checkpoint had.
        It then costs a function call per tuple instead of a batch, a message
        and (across processes) encoding; it scales with its upstream.
        """
        spec = self.unit(name)
        if spec.is_spout or not spec.chain or len(spec.inputs) != 1:
            return False
        if spec.elasticity.elastic and spec.elasticity.max_spus > spec.parallelism:
            return False  # it may scale out on SPUs of its own
        (edge,) = spec.inputs
        if edge.grouping is not Grouping.SHUFFLE or spec.placement or getattr(spec.cls, "esault_placement", None):
            return False
        if getattr(spec.cls, "on_batch_end", None) is not Bolt.on_batch_end:
            return False  # a chained stage sees tuples one by one, never a batch's end: it keeps its own SPUs
        upstream = self.unit(edge.source)
        if upstream.per_key or getattr(upstream.cls, "esault_chain", False):
            return False  # its SPUs change by key range or rank: a fused bolt's per-SPU state could not follow
        readers = self.downstream(upstream.name)
        return upstream.parallelism == spec.parallelism and len(readers) == 1

    def host_of(self, name: str) -> str:
        """The unit whose SPUs run `name`: itself, or the head of the chain it is fused into."""
        while self.chained(name):
            name = self.unit(name).inputs[0].source
        return name

    def output_unit(self, name: str) -> str:
        """The last unit fused into `name`'s SPUs: its downstream routes are theirs."""
        spec = self.unit(self.host_of(name))
        return spec.stages[-1].name if spec.stages else spec.name

    def physical_plan(self) -> list[str]:
        """The plan as people read it, a line per unit with SPUs of its own: the bolts chained into it,
        its SPUs, and whether it scales (`esault run` prints it at start)."""
        rows = []
        for spec in self.units:
            if self.chained(spec.name):
                continue
            name = " + ".join([spec.name] + [f"{s.name} (chained)" for s in spec.stages])
            kind = "spout" if spec.is_spout else "bolt"
            spus = f"{spec.parallelism} SPU{'s' if spec.parallelism != 1 else ''}"
            rows.append((name, f"{kind}, {spus}{self._scaling(spec)}"))
        width = max(len(name) for name, _ in rows)
        return [f"physical plan of topology {self.name!r} ({len(rows)} unit(s) with SPUs of their own):"] + \
            [f"  {name:<{width}}  {what}" for name, what in rows]

    @staticmethod
    def _scaling(spec: UnitSpec) -> str:
        chained = ", ".join(s.name for s in spec.stages)
        inside = f"; {chained} run{'s' if len(spec.stages) == 1 else ''} in its SPUs" if chained else ""
        if spec.is_spout:
            return inside
        if any(i.grouping is Grouping.GLOBAL for i in spec.inputs):
            return f", fixed (global grouping){inside}"
        if spec.elasticity.elastic and spec.elasticity.max_spus > spec.parallelism:
            return f", elastic up to {spec.elasticity.max_spus} SPUs{inside}"
        return f", fixed{inside}"


class BoltDeclarer:
    """Returned by set_bolt(); chain groupings to name the bolt's inputs."""

    def __init__(self, builder: "TopologyBuilder", name: str) -> None:
        self._builder = builder
        self._name = name

    def _add(self, source: str, grouping: Grouping) -> "BoltDeclarer":
        if not isinstance(source, str):
            raise TopologyError(
                f"bolt {self._name!r}: {grouping.value}_grouping() takes the source's name "
                f"(a str), got {source!r}; e.g. .{grouping.value}_grouping('sentences')"
            )
        inputs = self._builder._inputs[self._name]
        if any(i.source == source for i in inputs):
            raise TopologyError(f"bolt {self._name!r} already reads from {source!r}; declare each input once")
        inputs.append(InputSpec(source, grouping))
        return self

    def key_grouping(self, source: str) -> "BoltDeclarer":
        """Tuples with equal keys go to the same PE (routing by the interval table)."""
        return self._add(source, Grouping.KEY)

    def shuffle_grouping(self, source: str) -> "BoltDeclarer":
        return self._add(source, Grouping.SHUFFLE)

    def all_grouping(self, source: str) -> "BoltDeclarer":
        return self._add(source, Grouping.ALL)

    def global_grouping(self, source: str) -> "BoltDeclarer":
        return self._add(source, Grouping.GLOBAL)

    def tag_grouping(self, source: str) -> "BoltDeclarer":
        """TAG, time-aware grouping (docs/GROUPING.md): a key's tuples may reach several SPUs (heavy keys are
        spread over the fast ones), so the bolt's per-key results must be combined downstream; one instance
        per SPU. TopologyBuilder.aggregate(...).tag_grouping(source) builds both stages for you."""
        return self._add(source, Grouping.TAG)

    def partial_key_grouping(self, source: str) -> "BoltDeclarer":
        """Partial Key Grouping: each key's tuples go to the less loaded of two SPUs (combine downstream)."""
        return self._add(source, Grouping.PARTIAL_KEY)


class AggregateDeclarer:
    """Returned by aggregate(); its grouping picks the plan (esault.dsl.aggregation): key_grouping runs one
    key-grouped stage, tag/partial_key/shuffle_grouping a partial stage `<name>_partial` and a final key-grouped
    merge `<name>`. Call exactly one."""

    def __init__(self, builder: "TopologyBuilder", name: str, aggregate: Any, parallelism: int,
                 final_parallelism: int | None, options: dict[str, Any]) -> None:
        self._builder = builder
        self._name = name
        self._aggregate = aggregate
        self._parallelism = parallelism
        self._final_parallelism = final_parallelism
        self._options = options
        self._grouping: Grouping | None = None

    def _declare(self, source: str, grouping: Grouping) -> "AggregateDeclarer":
        from esault.dsl.aggregation import PARTIAL_SUFFIX, FinalAggregate, PartialAggregate, aggregate_to_wire

        if self._grouping is not None:
            raise TopologyError(
                f"aggregate {self._name!r} already reads with {self._grouping.value}_grouping: an aggregate has "
                "one input; aggregate a bolt that merges the streams instead")
        wire = aggregate_to_wire(self._aggregate)
        b, name = self._builder, self._name
        final = self._final_parallelism or self._parallelism
        if grouping is Grouping.KEY:
            b.set_bolt(name, FinalAggregate, final, params={"aggregate": wire}, **self._options).key_grouping(source)
        else:
            partial = name + PARTIAL_SUFFIX
            b.set_bolt(partial, PartialAggregate, self._parallelism, params={"aggregate": wire}, chain=False,
                       **self._options)._add(source, grouping)
            b.set_bolt(name, FinalAggregate, final, params={"aggregate": wire, "merge": True},
                       **self._options).key_grouping(partial)
        self._grouping = grouping
        return self

    def tag_grouping(self, source: str) -> "AggregateDeclarer":
        """TAG: heavy keys spread over the fast SPUs, partials merged per key downstream (docs/GROUPING.md)."""
        return self._declare(source, Grouping.TAG)

    def partial_key_grouping(self, source: str) -> "AggregateDeclarer":
        """Partial Key Grouping: every key over the less loaded of two SPUs, partials merged downstream."""
        return self._declare(source, Grouping.PARTIAL_KEY)

    def shuffle_grouping(self, source: str) -> "AggregateDeclarer":
        """Shuffle + combine: any key on any SPU, partials merged downstream."""
        return self._declare(source, Grouping.SHUFFLE)

    def key_grouping(self, source: str) -> "AggregateDeclarer":
        """Plain key grouping: one stage, each key folded by its one PE (a hot key loads one SPU)."""
        return self._declare(source, Grouping.KEY)


class TopologyBuilder:
    """Declare a topology Storm-style, then build() a validated Topology."""

    def __init__(self, name: str) -> None:
        if not isinstance(name, str) or not name.strip():
            raise TopologyError(f"a topology needs a non-empty name, got {name!r}")
        self.name = name
        self._decl: dict[str, tuple[type, int, bool, dict[str, Any]]] = {}
        self._inputs: dict[str, list[InputSpec]] = {}

    def set_spout(self, name: str, spout_class: type, parallelism: int = 1, **options: Any) -> None:
        self._declare(name, spout_class, parallelism, True, options)

    def set_bolt(self, name: str, bolt_class: type, parallelism: int = 1, **options: Any) -> BoltDeclarer:
        self._declare(name, bolt_class, parallelism, False, options)
        return BoltDeclarer(self, name)

    def aggregate(self, name: str, aggregate: Any, parallelism: int = 1, final_parallelism: int | None = None,
                  **options: Any) -> AggregateDeclarer:
        """A per-key aggregate of a stream, emitting (key, result) on every update; chain its grouping:
        `.aggregate("counts", Count(), parallelism=4).tag_grouping("words")`.

        `aggregate`: an esault.aggregates.Aggregate (instance or class) or "count", "sum", "min", "max",
        "mean". `final_parallelism`: SPUs of the final merge stage (default: parallelism). Other options
        as set_bolt's, for both stages.
        """
        from esault.aggregates import aggregate_of

        try:
            agg = aggregate_of(aggregate)
        except ValueError as exc:
            raise TopologyError(f"aggregate {name!r}: {exc}") from None
        if final_parallelism is not None and (not isinstance(final_parallelism, int)
                                              or isinstance(final_parallelism, bool) or final_parallelism < 1):
            raise TopologyError(f"aggregate {name!r}: final_parallelism must be a whole number >= 1, "
                                f"got {final_parallelism!r}")
        if "params" in options:
            raise TopologyError(f"aggregate {name!r}: takes no params (the aggregate is the logic); give an "
                                "Aggregate instance, e.g. aggregate(name, TopK(5))")
        return AggregateDeclarer(self, name, agg, parallelism, final_parallelism, options)

    def join(self, name: str, left: str, right: str, on: Any = None, window: float = 60.0, kind: Any = "equi",
             band: float = 0.0, time: Any = "ts", parallelism: int = 1, zeta: int = 20, workers: int = 1,
             also: list[Mapping[str, Any]] | None = None, shed: Mapping[str, Any] | None = None,
             flush_interval: float | None = None, mode: str = "keyed", **options: Any) -> BoltDeclarer:
        """A windowed stream join of `left` (R) with `right` (S) (docs/JOINS.md).

        mode="keyed" (the default): an S2J chain per key inside the key's PE;
        `parallelism` SPUs share the keys (split/merge move keys with their
        chains), `workers` sets each key's chain length. mode="chain": one S2J
        chain whose workers are the join's `parallelism` SPUs (on worker
        processes, in different processes), R entering the first and S the
        last: a global join (tuples join whatever their keys) that scales one
        join over cores, the chain growing and shrinking at its tail. It needs
        guarantee "exactly_once" or "none".

        Tuples join when they carry the same key, their event times (`time`: a
        field of dict values or a callable) are at most `window` apart, and
        `kind` accepts them: "equi" (left `on` == right `on`), "band" (|left
        `on` - right `on`| <= `band`) or a predicate (r, s) -> bool, given as a
        callable or "module:function" (needed with worker processes). `on` is
        a field name, a (left, right) pair of them, or callables. `also` adds
        queries {"name", "kind", "on", "band"} that share the same chain.
        Emits (key, {"query", "left", "right"}). `shed` turns on S2J's load
        shedding: ShedPolicy fields (tau1, max_shed, ...) and "period".
        """
        from esault.dsl.join_bolt import JoinBolt  # the dsl stays importable without the join's dependencies

        if left == right:
            raise TopologyError(f"join {name!r}: left and right are both {left!r}; a self-join needs the stream "
                                "declared twice (two spouts, or a bolt that copies it)")
        if mode not in ("keyed", "chain"):
            raise TopologyError(f"join {name!r}: mode must be 'keyed' (a chain per key) or 'chain' (one chain whose "
                                f"workers are SPUs), got {mode!r}")
        _check_join_numbers(name, window, zeta, workers, flush_interval, shed)
        if mode == "chain" and workers != 1:
            raise TopologyError(f"join {name!r}: with mode='chain' the chain's workers are its SPUs: set "
                                f"parallelism={workers} instead of workers={workers}")
        queries = [{"name": name, "kind": kind, "on": on, "band": band}, *(also or [])]
        for q in queries[1:]:
            if not isinstance(q, Mapping) or "name" not in q:
                raise TopologyError(f"join {name!r}: each of also= must be a dict with a 'name' (and 'kind', 'on', "
                                    f"'band'), got {q!r:.80}")
        params = {"left": left, "right": right, "queries": queries, "window": window, "time": time, "zeta": zeta,
                  "shed": dict(shed) if shed else None}
        if mode == "chain":
            from esault.dsl.chain_join_bolt import ChainJoinBolt

            if flush_interval is not None:
                params["flush_interval"] = flush_interval
            try:
                ChainJoinBolt(**params)  # a bad kind, band, field spec or shed fails here, at declaration
            except (TypeError, ValueError) as exc:
                raise TopologyError(f"join {name!r}: {exc}") from None
            declarer = self.set_bolt(name, ChainJoinBolt, parallelism, params=params, **options)
            return declarer._add(left, Grouping.CHAIN_HEAD)._add(right, Grouping.CHAIN_TAIL)
        params.update(workers=workers, flush_interval=1.0 if flush_interval is None else flush_interval)
        try:
            JoinBolt(**params)  # a bad kind, band or field spec fails here, at declaration
        except (TypeError, ValueError) as exc:
            raise TopologyError(f"join {name!r}: {exc}") from None
        options.setdefault("pe_idle_timeout", 0.5)  # an idle key drains its chain: its held inputs are acked
        declarer = self.set_bolt(name, JoinBolt, parallelism, params=params, **options)
        return declarer.key_grouping(left).key_grouping(right)

    def _declare(self, name: str, cls: type, parallelism: int, is_spout: bool, options: dict[str, Any]) -> None:
        kind = "spout" if is_spout else "bolt"
        if not isinstance(name, str) or not name or not name.replace("_", "").replace("-", "").isalnum():
            raise TopologyError(
                f"{kind} name {name!r} is invalid: use letters, digits, '-' and '_' (e.g. 'word_count')"
            )
        if name in self._decl:
            raise TopologyError(f"duplicate unit name {name!r}: every spout and bolt needs its own name")
        base = Spout if is_spout else Bolt
        if not (inspect.isclass(cls) and issubclass(cls, base)):
            other = Bolt if is_spout else Spout
            hint = ""
            if inspect.isclass(cls) and issubclass(cls, other):
                hint = f" ({cls.__name__} is a {other.__name__}: use set_{'bolt' if is_spout else 'spout'})"
            elif not inspect.isclass(cls):
                hint = f" (pass the class itself, e.g. set_{kind}({name!r}, MyClass), not an instance)"
            raise TopologyError(f"{kind} {name!r}: {cls!r} is not a subclass of esault.{base.__name__}{hint}")
        if not isinstance(parallelism, int) or isinstance(parallelism, bool) or not 1 <= parallelism <= MAX_SPUS:
            raise TopologyError(f"{kind} {name!r}: parallelism must be a whole number from 1 to {MAX_SPUS} "
                                f"(MAX_SPUS), got {parallelism!r}")
        allowed = _SPOUT_OPTIONS if is_spout else _BOLT_OPTIONS
        for opt in options:
            if opt not in allowed:
                near = difflib.get_close_matches(opt, allowed, n=1)
                hint = f"; did you mean {near[0]!r}? " if near else ". "
                raise TopologyError(
                    f"{kind} {name!r}: unknown option {opt!r}{hint}Valid options: {', '.join(sorted(allowed))}. "
                    "Constructor arguments go in params={...}"
                )
        placement = options.get("placement")
        if placement is not None and placement not in PLACEMENTS:
            raise TopologyError(f"{kind} {name!r}: placement must be one of {', '.join(map(repr, PLACEMENTS))} "
                                f"or None, got {placement!r}")
        params = options.get("params", {})
        if not isinstance(params, Mapping):
            raise TopologyError(f"{kind} {name!r}: params must be a dict of constructor arguments, got {params!r}")
        _check_params_fit(kind, name, cls, params)
        self._decl[name] = (cls, parallelism, is_spout, options)
        self._inputs[name] = []

    def build(self) -> Topology:
        """Validate and return the Topology, or raise TopologyError naming the problem."""
        if not any(d[2] for d in self._decl.values()):
            raise TopologyError(f"topology {self.name!r} has no spout: add one with set_spout(name, SpoutClass)")
        units: dict[str, UnitSpec] = {}
        for name, (cls, parallelism, is_spout, options) in self._decl.items():
            inputs = tuple(self._inputs[name])
            if not is_spout and not inputs:
                raise TopologyError(
                    f"bolt {name!r} has no input: chain a grouping, e.g. "
                    f"set_bolt({name!r}, ...).shuffle_grouping('<source>')"
                )
            for i in inputs:
                if i.source not in self._decl:
                    near = difflib.get_close_matches(i.source, self._decl, n=1)
                    hint = f"; did you mean {near[0]!r}?" if near else ""
                    raise TopologyError(f"bolt {name!r} reads from unknown source {i.source!r}{hint}")
            kinds = {i.grouping for i in inputs}
            if Grouping.KEY in kinds and len(kinds) > 1:
                raise TopologyError(
                    f"bolt {name!r} mixes key_grouping with "
                    f"{', '.join(sorted(g.value + '_grouping' for g in kinds - {Grouping.KEY}))}: per-key PEs "
                    "need every input key-grouped; split it into two bolts"
                )
            elastic = {k: v for k, v in options.items() if k in _ELASTIC_FIELDS}
            try:
                elasticity = ElasticityConfig(**elastic)
            except ConfigError as exc:
                raise TopologyError(f"bolt {name!r}: {exc}") from None
            idle = options.get("pe_idle_timeout", "job")
            if idle not in ("job", None) and (not isinstance(idle, (int, float)) or idle <= 0):
                raise TopologyError(f"bolt {name!r}: pe_idle_timeout must be seconds > 0 or None, got {idle!r}")
            placement = options.get("placement")
            max_pending = options.get("max_pending")
            if max_pending is not None and (not isinstance(max_pending, int) or max_pending < 1):
                raise TopologyError(f"spout {name!r}: max_pending must be a whole number >= 1, got {max_pending!r}")
            versions = {} if is_spout else _versions(name, cls, options)
            _check_params_valid("spout" if is_spout else "bolt", name, cls, options.get("params", {}))
            units[name] = UnitSpec(
                name=name,
                cls=cls,
                parallelism=parallelism,
                is_spout=is_spout,
                params=dict(options.get("params", {})),
                inputs=inputs,
                pe_idle_timeout=idle,
                max_pending=max_pending,
                elasticity=elasticity,
                chain=bool(options.get("chain", True)),
                placement=placement,
                versions=versions,
            )
        plain = Topology(self.name, tuple(units[n] for n in _topological_order(units)))
        return _with_stages(plain)


def _versions(name: str, cls: type, options: Mapping[str, Any]) -> dict[str, tuple[type, Mapping[str, Any]]]:
    """The `versions` option checked: {name: BoltClass or (BoltClass, params)}, plus the declared one."""
    raw = options.get("versions") or {}
    if not isinstance(raw, Mapping):
        raise TopologyError(f"bolt {name!r}: versions must be a dict {{'v2': NewBolt or (NewBolt, params)}}, "
                            f"got {raw!r:.100}")
    out: dict[str, tuple[type, Mapping[str, Any]]] = {DECLARED_VERSION: (cls, dict(options.get("params", {})))}
    for version, value in raw.items():
        if not isinstance(version, str) or not version.replace("_", "").replace("-", "").replace(".", "").isalnum():
            raise TopologyError(f"bolt {name!r}: version name {version!r} is invalid: use letters, digits, "
                                "'-', '_' and '.' (e.g. 'v2')")
        if version == DECLARED_VERSION:
            raise TopologyError(f"bolt {name!r}: the version name {DECLARED_VERSION!r} is taken by the class "
                                "set_bolt declares; pick another name")
        bolt, params = (value if isinstance(value, tuple) and len(value) == 2 else (value, {}))
        if not (inspect.isclass(bolt) and issubclass(bolt, Bolt)):
            raise TopologyError(f"bolt {name!r}: version {version!r} must be a Bolt subclass or (BoltClass, "
                                f"params), got {value!r:.100}")
        if not isinstance(params, Mapping):
            raise TopologyError(f"bolt {name!r}: version {version!r}: params must be a dict, got {params!r:.100}")
        out[version] = (bolt, dict(params))
    return out


def _with_stages(plain: Topology) -> Topology:
    """Give every chain head the specs of the bolts fused into it, so its SPUs need nothing else."""
    out = []
    for spec in plain.units:
        stages: list[UnitSpec] = []
        if not plain.chained(spec.name):
            tail = spec.name
            while True:
                readers = plain.downstream(tail)
                if len(readers) != 1 or not plain.chained(readers[0][0].name):
                    break
                stages.append(readers[0][0])
                tail = readers[0][0].name
        out.append(dataclasses.replace(spec, stages=tuple(stages)) if stages else spec)
    return Topology(plain.name, tuple(out))


def _topological_order(units: Mapping[str, UnitSpec]) -> list[str]:
    """Kahn's algorithm; a leftover node means a cycle, reported with its path."""
    indegree = {n: len(u.inputs) for n, u in units.items()}
    readers: dict[str, list[str]] = {n: [] for n in units}
    for n, u in units.items():
        for i in u.inputs:
            readers[i.source].append(n)
    ready = [n for n, d in indegree.items() if d == 0]
    order: list[str] = []
    while ready:
        n = ready.pop(0)
        order.append(n)
        for r in readers[n]:
            indegree[r] -= 1
            if indegree[r] == 0:
                ready.append(r)
    if len(order) < len(units):
        stuck = [n for n in units if n not in order]
        cycle = _find_cycle(units, stuck)
        raise TopologyError(
            "topology has a cycle: " + " -> ".join(cycle) + "; tuples must flow one way from spouts to bolts"
        )
    return order


def _find_cycle(units: Mapping[str, UnitSpec], stuck: list[str]) -> list[str]:
    start = stuck[0]
    path = [start]
    seen = {start}
    node = start
    while True:
        nxt = next(i.source for i in units[node].inputs if i.source in stuck)
        if nxt in seen:
            cycle = path[path.index(nxt):] + [nxt]
            return list(reversed(cycle))
        path.append(nxt)
        seen.add(nxt)
        node = nxt


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _check_join_numbers(name: str, window: Any, zeta: Any, workers: Any, flush_interval: Any,
                        shed: Mapping[str, Any] | None) -> None:
    """Every number of a join declaration finite and in range: NaN or inf would build a join that never pairs."""
    if not _is_number(window) or window <= 0:
        raise TopologyError(f"join {name!r}: window must be a finite number > 0 (the largest difference of event "
                            f"times that joins, in the unit of `time`), got {window!r}")
    for label, value in (("zeta", zeta), ("workers", workers)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise TopologyError(f"join {name!r}: {label} must be a whole number >= 1, got {value!r}")
    if flush_interval is not None and (not _is_number(flush_interval) or flush_interval <= 0):
        raise TopologyError(f"join {name!r}: flush_interval must be a finite number of seconds > 0, or None, "
                            f"got {flush_interval!r}")
    if shed is not None:
        if not isinstance(shed, Mapping):
            raise TopologyError(f"join {name!r}: shed must be a dict of ShedPolicy fields and 'period', "
                                f"got {shed!r:.80}")
        for field_name, value in shed.items():
            if not _is_number(value) or value < 0:
                raise TopologyError(f"join {name!r}: shed[{field_name!r}] must be a finite number >= 0, got {value!r}")


def _check_params_valid(kind: str, name: str, cls: type, params: Mapping[str, Any]) -> None:
    """A class with an `esault_check_params(name, params)` classmethod (the connectors) checks its params at build():
    a bad codec name or start fails here, not in every instance at run time."""
    check = getattr(cls, "esault_check_params", None)
    if check is None:
        return
    try:
        check(name, dict(params))
    except TopologyError:
        raise
    except Exception as exc:
        raise TopologyError(f"{kind} {name!r}: its params were refused: {type(exc).__name__}: {exc}") from None


def _check_params_fit(kind: str, name: str, cls: type, params: Mapping[str, Any]) -> None:
    """params are constructor arguments: ones the class cannot take would fail every instance at run time."""
    try:
        signature = inspect.signature(cls)
    except (TypeError, ValueError):  # a class whose signature Python cannot tell: it will tell at run time
        return
    try:
        signature.bind(**params)
    except TypeError as exc:
        takes = ", ".join(str(p.replace(annotation=inspect.Parameter.empty)) for p in signature.parameters.values())
        raise TopologyError(
            f"{kind} {name!r}: params {sorted(params)} do not fit {cls.__name__}({takes}) ({exc}); params are "
            f"the keyword arguments of {cls.__name__}.__init__: add them to it, or fix their names"
        ) from None
