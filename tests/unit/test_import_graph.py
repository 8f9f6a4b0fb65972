"""The code's floors hold: no import circles, no import up a floor, and the DSL reaches no runtime code.

A circle means two files are one concept split badly, or a lower floor knows a
higher one (docs/ARCHITECTURE.md, "Floors"). The graph is read from the source
with `ast`, file by file, so an import inside a function, or under
`if TYPE_CHECKING:`, is an arrow like any other: hiding an import there keeps
the circle, it only defers it to run time.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("esault", "spark_sink")

RUNTIME = ("esault.datapath", "esault.job", "esault.cluster", "esault.transport", "esault.api", "esault.cli")
"""What the DSL must not reach: the actors, the processes, the wire."""
VALUE_CODEC = "esault.transport.codec"
VALUE_CODEC_PACKAGE = "esault.transport"
"""Its package, whose __init__ Python runs first: empty, so it reaches nothing."""
"""The one module under transport/ the DSL may use: the msgpack format of user values (declaring an aggregate
asks whether its arguments can travel to a worker). It is ground floor: it imports only esault.errors."""


FLOORS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("ground", ("esault.errors", "esault.keyhash", "esault.clock", "esault.config", "esault.messages",
                "esault.aggregates", "esault.user_errors", "esault.metrics", "esault.state", "esault.thread_names",
                "esault.storage")),
    ("pure cores", ("esault.routing", "esault.elasticity", "esault.migration", "esault.reliability",
                    "esault.joins", "esault.joins.chain", "esault.joins.node", "esault.joins.protocol",
                    "esault.joins.queries", "esault.joins.shedding", "esault.joins.worker")),
    ("wire and storage", ("esault.transport", "esault.checkpoint")),
    ("declarations", ("esault.dsl", "esault.windows", "esault.connectors", "spark_sink")),
    ("controllers", ("esault.control", "esault.joins.controller")),
    ("data path", ("esault.datapath",)),
    ("job control", ("esault.job",)),
    ("processes", ("esault.cluster", "esault.api", "esault.testing")),
    ("entry points", ("esault.cli", "esault.worker_zygote", "esault")),
)
"""Lowest first. A module may import its own floor and the floors below, never one above
(docs/ARCHITECTURE.md). A module's floor is that of the longest prefix listed, so a package can keep
one module on another floor (esault.joins' pure chain apart from its runtime controller)."""
MESSAGES = "esault.messages"
"""The message vocabulary: every floor may use it, so it imports nothing else of esault's."""


def floor_of(module: str, floors: tuple[tuple[str, tuple[str, ...]], ...] = FLOORS) -> int | None:
    """The index of `module`'s floor in `floors` (its longest listed prefix), None if no prefix is listed."""
    best: tuple[int, int] | None = None
    for index, (_, prefixes) in enumerate(floors):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and (best is None or len(prefix) > best[0]):
                best = (len(prefix), index)
    return None if best is None else best[1]


def upward_imports(graph: dict[str, set[str]],
                   floors: tuple[tuple[str, tuple[str, ...]], ...] = FLOORS) -> list[str]:
    """"a (floor) -> b (higher floor)" for every import that runs up a floor."""
    return [f"{module} ({floors[floor_of(module, floors)][0]}) -> {target} ({floors[floor_of(target, floors)][0]})"
            for module in sorted(graph) for target in sorted(graph[module])
            if floor_of(target, floors) > floor_of(module, floors)]


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(root: Path, packages: tuple[str, ...] = PACKAGES) -> dict[str, set[str]]:
    """module -> the modules of `packages` it imports, wherever the import statement stands in the file.

    `from a.b import c` names a.b.c if that is a module, else a.b, and every package on the way (a, a.b:
    Python runs their __init__ first); an import of a module's own packages is left out, as Python runs
    those before the module anyway."""
    files = {module_name(root, p): p for package in packages for p in (root / package).rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join(up + ([base] if base else []))
                names = [f"{base}.{alias.name}" for alias in node.names] + [base]
            else:
                continue
            for name in names:
                while name and name not in files:
                    name = name.rpartition(".")[0]
                targets |= {n for n in (name, *packages_run_first(name))
                            if n and n != module and not module.startswith(n + ".")}
        graph[module] = targets
    return graph


def packages_run_first(module: str) -> list[str]:
    """The packages whose __init__ Python runs before `module` (a.b.c: a.b), the top package left out: its
    __init__ is the public facade (esault's re-exports the API), on the top floor by design."""
    parts = module.split(".")
    return [".".join(parts[:n]) for n in range(2, len(parts))]


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Kosaraju, without recursion)."""
    order: list[str] = []
    seen: set[str] = set()
    for start in graph:
        if start in seen:
            continue
        seen.add(start)
        stack = [(start, iter(sorted(graph[start])))]
        while stack:
            node, rest = stack[-1]
            nxt = next((n for n in rest if n not in seen), None)
            if nxt is None:
                stack.pop()
                order.append(node)
            else:
                seen.add(nxt)
                stack.append((nxt, iter(sorted(graph[nxt]))))
    reverse: dict[str, set[str]] = {m: set() for m in graph}
    for m, targets in graph.items():
        for t in targets:
            reverse[t].add(m)
    found, assigned = [], set()
    for start in reversed(order):
        if start in assigned:
            continue
        component, todo = [], [start]
        assigned.add(start)
        while todo:
            node = todo.pop()
            component.append(node)
            for n in reverse[node] - assigned:
                assigned.add(n)
                todo.append(n)
        if len(component) > 1:
            found.append(sorted(component))
    return sorted(found)


def reached_from(graph: dict[str, set[str]], starts: list[str]) -> dict[str, list[str]]:
    """Every module importing `starts` runs, with one import path to it (for the failure message)."""
    paths = {s: [s] for s in starts}
    todo = list(starts)
    while todo:
        module = todo.pop()
        for target in sorted(graph[module]):
            if target not in paths:
                paths[target] = paths[module] + [target]
                todo.append(target)
    return paths


def write_package(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_no_file_of_esault_or_spark_sink_is_part_of_an_import_circle():
    found = circles(import_graph(ROOT))
    assert found == [], "import circles (pass a callback or a small Protocol down instead of importing up):\n" + \
        "\n".join(" <-> ".join(c) for c in found)


def test_every_module_has_a_floor_and_no_import_runs_up_a_floor():
    graph = import_graph(ROOT)
    homeless = sorted(m for m in graph if floor_of(m) is None)
    assert homeless == [], f"modules on no floor; add their package to FLOORS in this file: {homeless}"
    wrong = upward_imports(graph)
    assert wrong == [], ("imports up a floor (move the shared piece down, or hand a small Protocol or a "
                         "callback down instead):\n" + "\n".join(wrong))


def test_the_message_modules_import_nothing_of_esault_but_each_other():
    graph = import_graph(ROOT)
    modules = [m for m in graph if m == MESSAGES or m.startswith(MESSAGES + ".")]
    assert len(modules) > 1
    wrong = {m: sorted(t for t in graph[m] if not (t == MESSAGES or t.startswith(MESSAGES + ".")))
             for m in modules}
    assert {m: t for m, t in wrong.items() if t} == {}


def test_the_dsl_reaches_no_runtime_cluster_or_transport_module_even_through_other_files():
    graph = import_graph(ROOT)
    reached = reached_from(graph, [m for m in graph if m == "esault.dsl" or m.startswith("esault.dsl.")])
    wrong = [" -> ".join(path) for module, path in sorted(reached.items())
             if module not in (VALUE_CODEC, VALUE_CODEC_PACKAGE)
             and any(module == r or module.startswith(r + ".") for r in RUNTIME)]
    assert wrong == [], ("a declaration names what to run and the runtime resolves it (esault.datapath.actors "
                         "picks the SPU kind); the DSL imports runtime code through:\n" + "\n".join(wrong))
    assert set(reached_from(graph, [VALUE_CODEC])) == {VALUE_CODEC, "esault.errors"}
    assert graph[VALUE_CODEC_PACKAGE] == set()


def test_an_import_inside_a_function_or_under_type_checking_closes_a_circle(tmp_path):
    write_package(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "def late():\n    from pkg.b import B\n    return B\n",
        "pkg/b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.c import C\nB = 1\n",
        "pkg/c.py": "from . import a\nC = 2\n",
        "pkg/d.py": "import pkg.a\n",
    })
    graph = import_graph(tmp_path, ("pkg",))
    assert graph["pkg.c"] == {"pkg.a"}  # a relative `from . import a` names the module a
    assert circles(graph) == [["pkg.a", "pkg.b", "pkg.c"]]


def test_a_module_importing_its_own_package_or_a_name_of_a_module_is_no_circle(tmp_path):
    write_package(tmp_path, {
        "pkg/__init__.py": "from pkg.a import A\n",
        "pkg/a.py": "import pkg\nA = 1\n",
        "pkg/b.py": "from pkg.a import A\n",
    })
    graph = import_graph(tmp_path, ("pkg",))
    assert graph == {"pkg": {"pkg.a"}, "pkg.a": set(), "pkg.b": {"pkg.a"}}
    assert circles(graph) == []


def test_the_floor_check_finds_an_import_up_a_floor_and_takes_the_longest_prefix(tmp_path):
    write_package(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/low.py": "from pkg.high.leaf import H\n",
        "pkg/high/__init__.py": "",
        "pkg/high/part.py": "from pkg import low\n",
        "pkg/high/leaf.py": "import pkg.low\nH = 1\n",
    })
    floors = (("low", ("pkg", "pkg.high.leaf")), ("high", ("pkg.high",)))
    graph = import_graph(tmp_path, ("pkg",))
    assert floor_of("pkg.high.leaf", floors) == 0 and floor_of("pkg.high.part", floors) == 1
    assert floor_of("other", floors) is None
    # leaf is on the low floor, but importing it runs pkg/high/__init__.py first, on the high floor
    assert graph["pkg.low"] == {"pkg.high", "pkg.high.leaf"}
    assert upward_imports(graph, floors) == ["pkg.low (low) -> pkg.high (high)"]
    write_package(tmp_path, {"pkg/low.py": "from pkg.high.part import P\n"})
    assert upward_imports(import_graph(tmp_path, ("pkg",)), floors) == [
        "pkg.low (low) -> pkg.high (high)", "pkg.low (low) -> pkg.high.part (high)"]
    floors = (("low", ("pkg", "pkg.high", "pkg.high.leaf")), ("high", ("pkg.high.part",)))
    write_package(tmp_path, {"pkg/low.py": "from pkg.high.leaf import H\n"})
    assert upward_imports(import_graph(tmp_path, ("pkg",)), floors) == []  # the package's __init__ is low too
