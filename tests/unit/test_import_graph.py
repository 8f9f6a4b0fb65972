"""The code's floors hold: no import circles, and the DSL reaches no runtime code.

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

RUNTIME = ("esault.runtime", "esault.cluster", "esault.transport", "esault.api", "esault.cli")
"""What the DSL must not reach: the actors, the processes, the wire."""
VALUE_CODEC = "esault.transport.codec"
"""The one module under transport/ the DSL may use: the msgpack format of user values (declaring an aggregate
asks whether its arguments can travel to a worker). It is ground floor: it imports only esault.errors."""


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(root: Path, packages: tuple[str, ...] = PACKAGES) -> dict[str, set[str]]:
    """module -> the modules of `packages` it imports, wherever the import statement stands in the file.

    `from a.b import c` names a.b.c if that is a module, else a.b; an import of a module's own package
    (its __init__) is left out, as Python runs that before the module anyway."""
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
                if name and name != module and not module.startswith(name + "."):
                    targets.add(name)
        graph[module] = targets
    return graph


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


def test_the_dsl_reaches_no_runtime_cluster_or_transport_module_even_through_other_files():
    graph = import_graph(ROOT)
    reached = reached_from(graph, [m for m in graph if m == "esault.dsl" or m.startswith("esault.dsl.")])
    wrong = [" -> ".join(path) for module, path in sorted(reached.items())
             if module != VALUE_CODEC and any(module == r or module.startswith(r + ".") for r in RUNTIME)]
    assert wrong == [], ("a declaration names what to run and the runtime resolves it (esault.runtime.actors "
                         "picks the SPU kind); the DSL imports runtime code through:\n" + "\n".join(wrong))
    assert set(reached_from(graph, [VALUE_CODEC])) == {VALUE_CODEC, "esault.errors"}


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
