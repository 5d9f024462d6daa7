"""Which experiments of a runs folder an analysis reads (`--experiments`, `--listed-in`, `--not-listed-in`).

A user's tries and sweeps sit in the same `results/runs` as the paper's experiments; the committed
`results/` must change only for the experiments it already lists, or one asked for by name. `make figures`
therefore analyses the experiments `results/manifest.json` lists into `results/`, and every other one into
`results/report/`.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Sequence
from pathlib import Path

from analysis.report.manifest import read_manifest


def listed(out: Path) -> set[str]:
    """The experiments whose results `out`'s manifest holds (none when it has no manifest)."""
    manifest = read_manifest(out)
    return set() if manifest is None else set(manifest["experiments"])


def selection(
    patterns: Sequence[str] = (), listed_in: Path | None = None, not_listed_in: Path | None = None
) -> Callable[[str], bool] | None:
    """A test on an experiment's name: it matches one of `patterns` (shell-style, `try_*`) or is listed in
    `listed_in`'s manifest, and is not listed in `not_listed_in`'s; None (every experiment) when no option
    is given. A ValueError names a manifest that cannot be read."""
    if not patterns and listed_in is None and not_listed_in is None:
        return None
    wanted = listed(listed_in) if listed_in is not None else set()
    unwanted = listed(not_listed_in) if not_listed_in is not None else set()
    everything = not patterns and listed_in is None

    def accepts(name: str) -> bool:
        chosen = everything or name in wanted or any(fnmatch.fnmatchcase(name, p) for p in patterns)
        return chosen and name not in unwanted

    return accepts


def experiments_under(runs: Path) -> list[str]:
    """The experiment folders under a runs folder (the first level), sorted; none when it is missing."""
    return sorted(p.name for p in runs.iterdir() if p.is_dir()) if runs.is_dir() else []


def unmatched(patterns: Sequence[str], names: Sequence[str]) -> list[str]:
    """The patterns that match no experiment name: a name asked for must exist."""
    return [p for p in patterns if not any(fnmatch.fnmatchcase(n, p) for n in names)]
