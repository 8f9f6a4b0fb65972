"""Word-count input shared by benchmarks that hand a file to another engine.

The input is a text file of lines of space-separated words whose ids follow a
truncated Zipf(s) law over `vocabulary` ranks (rank 0 is the most frequent,
written as "w0"), so hot keys look like natural text. Same seed, same file.
"""

from __future__ import annotations

import collections
from pathlib import Path

import numpy as np


def make_input(
    path: str | Path,
    words: int = 2_000_000,
    vocabulary: int = 100_000,
    s: float = 1.1,
    seed: int = 42,
    words_per_line: int = 10,
) -> Path:
    """Write `words` Zipf(s)-distributed words as lines of `words_per_line`; returns the path.

    Ids are drawn by numpy in one call (inverse CDF of the truncated law), and
    lines are joined from a precomputed vocabulary, so 2M words take ~1 s.
    The last line is shorter when `words` is not a multiple of `words_per_line`.
    """
    if words < 0 or vocabulary < 1 or words_per_line < 1:
        raise ValueError("need words >= 0, vocabulary >= 1, words_per_line >= 1")
    path = Path(path)
    weights = np.arange(1, vocabulary + 1, dtype=np.float64) ** -s
    cdf = np.cumsum(weights)
    cdf /= cdf[-1]
    rng = np.random.default_rng(seed)
    ids = np.searchsorted(cdf, rng.random(words), side="right")
    np.minimum(ids, vocabulary - 1, out=ids)  # guard against cdf[-1] rounding below 1.0
    names = [f"w{i}" for i in range(vocabulary)]
    tokens = [names[i] for i in ids.tolist()]
    lines = (" ".join(tokens[i:i + words_per_line]) for i in range(0, words, words_per_line))
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="ascii", newline="\n") as f:
        for line in lines:
            f.write(line)
            f.write("\n")
    return path


def oracle(path: str | Path) -> collections.Counter[str]:
    """Exact word counts of `path` (whitespace split), the reference a peer's output is checked against."""
    return collections.Counter(Path(path).read_text(encoding="ascii").split())
