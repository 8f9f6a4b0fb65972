"""Load a topology from a Python file: it exposes `topology` or `build_topology()`."""

from __future__ import annotations

import importlib.util
import sys
import traceback
from pathlib import Path
from types import ModuleType

from esault.dsl.topology import Topology, TopologyBuilder
from esault.errors import TopologyError


def load_module(path: str | Path) -> ModuleType:
    """Import the file as a module whose folder is on sys.path (so worker processes can import it too)."""
    file = Path(path)
    if not file.is_file():
        raise TopologyError(f"{file}: no such topology file; pass the path of a .py file, e.g. examples/wordcount.py")
    if file.suffix != ".py":
        raise TopologyError(f"{file}: a topology file must be a Python (.py) file")
    folder = str(file.resolve().parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    name = file.stem
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:
        raise TopologyError(f"{file}: cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        sys.modules.pop(name, None)
        raise TopologyError(f"{exc.filename}:{exc.lineno}: syntax error: {exc.msg}") from None
    except TopologyError as exc:
        sys.modules.pop(name, None)
        raise TopologyError(f"{file}: {exc}") from None
    except Exception as exc:
        sys.modules.pop(name, None)
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        raise TopologyError(
            f"{frame.filename}:{frame.lineno}: importing the topology raised {type(exc).__name__}: {exc}"
        ) from None
    return module


def load_topology(path: str | Path, **options: object) -> tuple[Topology, ModuleType]:
    """The module's `topology`, or the result of `build_topology(**options)`."""
    module = load_module(path)
    if hasattr(module, "build_topology"):
        try:
            result = module.build_topology(**options)
        except TopologyError as exc:
            raise TopologyError(f"{path}: {exc}") from None
        except TypeError as exc:
            raise TopologyError(f"{path}: build_topology() rejected the options {sorted(options)}: {exc}") from None
    elif hasattr(module, "topology"):
        result = module.topology
    else:
        raise TopologyError(
            f"{path}: defines neither `topology` nor `build_topology()`; add e.g. "
            "`topology = builder.build()` at module level"
        )
    if isinstance(result, TopologyBuilder):
        result = result.build()
    if not isinstance(result, Topology):
        raise TopologyError(
            f"{path}: expected a Topology (from TopologyBuilder.build()), got {type(result).__name__}"
        )
    return result, module
