"""A UnitSpec and JobConfig as plain data, so a worker can rebuild them (classes by import path).

Only a worker's host calls unit_from_wire, and only for a SubmitJob of the
authenticated driver (esault.cluster.authority); the class it resolves must be
a Spout or Bolt subclass, so no frame can make a worker call anything else.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import inspect
import logging
import sys
import time
from pathlib import Path
from typing import Any

from esault.config import ElasticityConfig, JobConfig
from esault.dsl.bolt import Bolt
from esault.dsl.spout import Spout
from esault.dsl.topology import Grouping, InputSpec, UnitSpec
from esault.errors import TopologyError, UnitStartError
from esault.transport.codec import check_serialisable


log = logging.getLogger("esault.worker")

SLOW_IMPORT_SECONDS = 1.0
"""A worker warns when importing a topology module takes longer: module-level work is repeated per worker."""

_MAIN_ALIAS = "__esault_main__"
"""The name a worker loads the driver's main script under (multiprocessing's __mp_main__), so the
script's `if __name__ == "__main__":` block does not run there."""


_importing: list[str] = []
"""What unit_from_wire is importing now (a worker's host thread): the driver's script or a module."""


def importing_for_worker() -> str | None:
    """The script or module a worker is importing for a unit's class right now, else None. Code that must not
    run then (starting a cluster: the script lacks its `if __name__ == "__main__":`) asks this."""
    return _importing[-1] if _importing else None


def _main_file() -> str:
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    return str(Path(path).resolve()) if path else ""


def unit_to_wire(spec: UnitSpec) -> dict[str, Any]:
    try:
        folder = str(Path(inspect.getfile(spec.cls)).resolve().parent)
    except (TypeError, OSError):
        folder = ""
    return {
        "main_file": _main_file() if spec.cls.__module__ in ("__main__", _MAIN_ALIAS) else "",
        "name": spec.name, "module": spec.cls.__module__, "qualname": spec.cls.__qualname__, "folder": folder,
        "parallelism": spec.parallelism, "is_spout": spec.is_spout, "params": dict(spec.params),
        "inputs": [[i.source, i.grouping.value] for i in spec.inputs],
        "pe_idle_timeout": spec.pe_idle_timeout, "max_pending": spec.max_pending,
        "elasticity": dataclasses.asdict(spec.elasticity),
        "chain": spec.chain, "stages": [unit_to_wire(stage) for stage in spec.stages],
        "placement": spec.placement,
    }


def check_sendable(spec: UnitSpec) -> None:
    """Every param of `spec` (and of the bolts chained into it) can travel to a worker, and a worker can import
    its class; else UnitStartError naming the unit and the param or class, raised before any SPU starts."""
    for unit in (spec, *spec.stages):
        if spec.where == "worker" and unit.cls.__module__ in ("__main__", _MAIN_ALIAS) and not _main_file():
            kind = "spout" if unit.is_spout else "bolt"
            raise UnitStartError(
                f"{kind} {unit.name!r}: its class {unit.cls.__qualname__} is defined in an interactive session "
                "(__main__ has no file), which worker processes cannot import. Put the class in a .py file (a "
                "module you import, or the script you run), or run every unit in one process: LocalCluster(), "
                "`--cluster threads`, run_to_completion(..., workers='in-process')")
        for name, value in unit.params.items():
            try:
                check_serialisable(value)
            except TypeError as exc:
                kind = "spout" if unit.is_spout else "bolt"
                raise UnitStartError(
                    f"{kind} {unit.name!r}: param {name!r} ({type(value).__name__}) cannot be sent to the worker "
                    f"processes ({exc}). Give plain data in params (e.g. a path or a URL) and build the object "
                    "in open(), or run every unit in one process with `--cluster threads` (LocalCluster())"
                ) from None


def unit_from_wire(data: dict[str, Any]) -> UnitSpec:
    """Import the class the driver named; TopologyError says what to install or ship if that fails."""
    folder = data.get("folder")
    if folder and folder not in sys.path:
        sys.path.insert(0, folder)
    main = data["module"] in ("__main__", _MAIN_ALIAS) and data.get("main_file")
    _importing.append(f"the driver's script {data['main_file']}" if main else f"module {data['module']}")
    try:
        fresh = (_MAIN_ALIAS if main else data["module"]) not in sys.modules
        started = time.monotonic()
        obj: Any = _load_main(data["main_file"]) if main else importlib.import_module(data["module"])
        took = time.monotonic() - started
        if fresh and took > SLOW_IMPORT_SECONDS:
            log.warning("importing %s for unit %r took %.1f s in this worker: a topology module's module-level "
                        "code runs in every worker process. Move driver-only work into build_topology() or "
                        "under `if not esault.in_worker():`", data["module"], data["name"], took)
        for part in data["qualname"].split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise TopologyError(
            f"worker cannot import {data['module']}:{data['qualname']} for unit {data['name']!r} ({exc}); "
            "the topology's modules must be importable on every worker (same files or package installed)"
        ) from None
    finally:
        _importing.pop()
    base = Spout if data["is_spout"] else Bolt
    if not (inspect.isclass(obj) and issubclass(obj, base)):
        raise TopologyError(
            f"worker resolved {data['module']}:{data['qualname']} for unit {data['name']!r}, but it is "
            f"{obj!r}, not a subclass of esault.{base.__name__}; the worker's copy of the module differs "
            "from the driver's: install the same version everywhere"
        )
    return UnitSpec(
        name=data["name"], cls=obj, parallelism=data["parallelism"], is_spout=data["is_spout"],
        params=dict(data["params"]), inputs=tuple(InputSpec(s, Grouping(g)) for s, g in data["inputs"]),
        pe_idle_timeout=data["pe_idle_timeout"], max_pending=data["max_pending"],
        elasticity=ElasticityConfig(**data["elasticity"]),
        chain=bool(data.get("chain", True)), stages=tuple(unit_from_wire(stage) for stage in data.get("stages", ())),
        placement=data.get("placement"),
    )


def _load_main(path: str) -> Any:
    """The driver's main script, loaded once under _MAIN_ALIAS (its main block does not run)."""
    module = sys.modules.get(_MAIN_ALIAS)
    if module is not None and getattr(module, "__file__", None) == path:
        return module
    spec = importlib.util.spec_from_file_location(_MAIN_ALIAS, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load the driver's script {path!r}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[_MAIN_ALIAS] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[_MAIN_ALIAS]
        raise
    return module


def config_to_wire(config: JobConfig) -> dict[str, Any]:
    values = dataclasses.asdict(config)
    values["data_dir"] = str(config.data_dir)
    return values


def config_from_wire(data: dict[str, Any]) -> JobConfig:
    return JobConfig.from_mapping(data, origin="driver")
