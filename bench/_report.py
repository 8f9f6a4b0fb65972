"""Writes a benchmark's results into its own marked section of a Markdown file.

Each benchmark owns the text between `<!-- bench:NAME:start -->` and
`<!-- bench:NAME:end -->`; everything outside its markers is left as it was,
so several benchmarks can share docs/PERFORMANCE.md.
"""

from __future__ import annotations

import os
from pathlib import Path


def write_section(path: str | Path, name: str, markdown: str) -> None:
    """Replace what lies between NAME's markers in `path` (re-read now); append the markers if missing.

    A missing file is created with a "# Performance" title. Raises ValueError if
    only one of the two markers is there (fix the file by hand: nothing is guessed).
    """
    path = Path(path)
    start, end = f"<!-- bench:{name}:start -->", f"<!-- bench:{name}:end -->"
    text = path.read_text() if path.exists() else "# Performance\n"
    block = f"{start}\n{markdown.strip()}\n{end}"
    i = text.find(start)
    j = text.find(end, i + len(start)) if i >= 0 else -1
    if i >= 0 and j >= 0:
        text = text[:i] + block + text[j + len(end):]
    elif i < 0 and end not in text:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    else:
        raise ValueError(f"{path}: {start!r} and {end!r} must both be present, in that order, or neither")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)  # readers never see a half-written file


PERFORMANCE = Path(__file__).resolve().parent.parent / "docs" / "PERFORMANCE.md"


def publish(name: str, markdown: str, write: bool = True) -> None:
    """Print a benchmark's table and, unless `write` is False (its --no-write), put it in docs/PERFORMANCE.md's
    section NAME."""
    print(markdown)
    if write:
        write_section(PERFORMANCE, name, markdown)
