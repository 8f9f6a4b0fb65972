"""Every third-party module the tests need is declared where `.ci/run` installs it from.

`.ci/run` installs `.[test]` on a fresh machine. A module that a test (or a bench
script a test runs) imports but that only the `bench` extras or a developer's
machine provides passes here and fails there, so this scans the imports,
including those inside functions, and maps each to its distribution.
"""

from __future__ import annotations

import ast
import configparser
import re
import sys
from importlib.metadata import PackageNotFoundError, packages_distributions, requires
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LOCAL = {"esault", "spark_sink", "tests", "conftest"}


def requirement_name(line: str) -> str:
    return re.split(r"[\s\[<>=!~;]", line.strip(), maxsplit=1)[0].lower().replace("_", "-")


def declared_for_tests() -> set[str]:
    """What `pip install -e .[test]` installs: the declared distributions and what they require."""
    setup = configparser.ConfigParser()
    setup.read(ROOT / "setup.cfg")
    lines = setup["options"]["install_requires"].splitlines() + setup["options.extras_require"]["test"].splitlines()
    todo = {requirement_name(line) for line in lines if line.strip()}
    installed: set[str] = set()
    while todo:
        name = todo.pop()
        installed.add(name)
        try:
            needs = requires(name) or []
        except PackageNotFoundError:
            continue
        todo |= {requirement_name(need) for need in needs if "extra ==" not in need} - installed
    return installed


def imported_modules(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def bench_scripts_run_by(test: Path) -> set[Path]:
    """Bench scripts a test runs as a file, or imports after putting bench/ on sys.path."""
    text = test.read_text()
    scripts = {ROOT / "bench" / name for name in re.findall(r'"bench"\s*/\s*"(\w+\.py)"', text)}
    if re.search(r'sys\.path\.insert\(.*"bench"', text):
        scripts |= {ROOT / "bench" / f"{name}.py" for name in imported_modules(test)}
    return {script for script in scripts if script.exists()}


def files_the_tests_need() -> set[Path]:
    tests = set((ROOT / "tests").rglob("*.py"))
    todo = set().union(*(bench_scripts_run_by(test) for test in tests))
    seen: set[Path] = set()
    while todo:  # bench scripts import each other
        script = todo.pop()
        seen.add(script)
        todo |= {ROOT / "bench" / f"{name}.py" for name in imported_modules(script)} - seen
        todo = {script for script in todo if script.exists()}
    return tests | seen


def test_every_third_party_module_the_tests_import_is_in_install_requires_or_the_test_extra():
    distributions = packages_distributions()
    declared = declared_for_tests()
    local = LOCAL | {path.stem for folder in ("tests", "bench", "examples") for path in (ROOT / folder).rglob("*.py")}
    local |= {path.name for path in (ROOT / "examples").iterdir() if path.is_dir()}
    missing = []
    for path in sorted(files_the_tests_need()):
        written_by_the_test = set(re.findall(r'"(\w+)\.py"\)\.write_text', path.read_text()))
        for module in sorted(imported_modules(path) - set(sys.stdlib_module_names) - local - written_by_the_test):
            dists = {name.lower().replace("_", "-") for name in distributions.get(module, [module])}
            if not dists & declared:
                missing.append(f"{path.relative_to(ROOT)} imports {module!r} "
                               f"(distribution {sorted(dists) or 'not installed here'})")
    assert not missing, ("add these to setup.cfg's install_requires or [test] extra, or make the test skip "
                         "with the reason printed:\n" + "\n".join(missing))


def test_the_scan_sees_imports_inside_functions_and_bench_scripts_run_as_files(tmp_path):
    script = tmp_path / "script.py"
    script.write_text("def plot():\n    import matplotlib.pyplot as plt\n    from PIL import Image\n")
    assert imported_modules(script) == {"matplotlib", "PIL"}
    runs_chain = ROOT / "tests" / "system" / "test_bench_join_chain.py"
    assert ROOT / "bench" / "join_chain.py" in bench_scripts_run_by(runs_chain)
