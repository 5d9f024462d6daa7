"""How results are named and ordered wherever they are shown: methods by the `display` key of their
memory config (name and rank), paper experiments first, envs in natural order, (experiment, env)
settings in that order, and an estimate's table columns (its interval withheld over too few seeds).
Every metric and report lays out its rows with these, so tables and figures are deterministic.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

import pandas as pd
import yaml

from analysis.stats import MIN_BOOTSTRAP_SEEDS, Estimate

#: The memory config group: each entry's optional `display: {name, rank}` names a method in tables and
#: figures and places it (read here directly: the analysis does not import the harness).
MEMORY_CONF = Path(__file__).resolve().parents[2] / "conf" / "memory"


def read_methods(conf: Path = MEMORY_CONF) -> dict[str, str]:
    """Results label -> display name of every entry of `conf` with a `display` key, in rank order (the
    label is the entry's `label`, else its file name)."""
    ranked = []
    for path in sorted(conf.glob("*.yaml")):
        entry = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        display = entry.get("display")
        if display is None:
            continue
        if not (isinstance(display, dict) and isinstance(display.get("name"), str)
                and isinstance(display.get("rank"), int | float)):  # fmt: skip
            raise ValueError(f"{path}: display must be {{name: <text>, rank: <number>}}, got {display!r}")
        ranked.append((display["rank"], entry.get("label") or path.stem, display["name"]))
    return {label: name for _, label, name in sorted(ranked)}


METHOD_LABELS = read_methods()
METHOD_ORDER = tuple(METHOD_LABELS)
EXPERIMENT_ORDER = ("paper_controlled", "paper_executable", "paper_preference", "paper_memoryagentbench")


def method_label(method: str) -> str:
    """Display name of a method (its config name when it is not a built-in one)."""
    return METHOD_LABELS.get(method, method)


def experiment_title(experiment: str, variants: dict[str, list[str]]) -> str:
    """An experiment's name in titles, with the configuration variants of its runs when it has any:
    "paper_controlled (env.phase_length=100)"."""
    named = variants.get(experiment)
    return f"{experiment} ({'; '.join(named)})" if named else experiment


def env_label(env: str) -> str:
    """Display name of an env label: "memoryagentbench_sh_6k" -> "SH-6k"; others unchanged."""
    prefix = "memoryagentbench_"
    if env.startswith(prefix) and env.count("_") == 2:
        hops, size = env[len(prefix) :].split("_")
        return f"{hops.upper()}-{size}"
    return env


def _natural(text: str) -> str:
    return re.sub(r"\d+", lambda m: m.group().zfill(10), text)


def _distinct(names: Iterable[str]) -> set[str]:
    # A pandas column is reduced first: iterating an Arrow-backed column element by element is slow.
    return set(names.unique() if isinstance(names, pd.Series) else names)


def sorted_experiments(names: Iterable[str]) -> list[str]:
    """Paper experiments in paper order, then the others alphabetically."""
    order = {name: i for i, name in enumerate(EXPERIMENT_ORDER)}
    return sorted(_distinct(names), key=lambda n: (order.get(n, len(order)), n))


def sorted_envs(names: Iterable[str]) -> list[str]:
    """Env labels in natural order (6k before 32k before 262k)."""
    return sorted(_distinct(names), key=_natural)


def sorted_methods(names: Iterable[str]) -> list[str]:
    """The built-in methods in METHOD_ORDER, then any other (a user's own) alphabetically."""
    order = {name: i for i, name in enumerate(METHOD_ORDER)}
    return sorted(_distinct(names), key=lambda n: (order.get(n, len(order)), n))


def settings(frame: pd.DataFrame) -> list[tuple[str, str]]:
    """The (experiment, env) pairs in `frame`, in display order."""
    if frame.empty:
        return []
    distinct = frame[["experiment", "env"]].drop_duplicates()
    pairs = set(zip(distinct["experiment"], distinct["env"], strict=True))
    return [
        (e, v)
        for e in sorted_experiments(p[0] for p in pairs)
        for v in sorted_envs(p[1] for p in pairs if p[0] == e)
    ]


def estimate_columns(estimate: Estimate, prefix: str = "") -> dict[str, float]:
    """An estimate's columns; the interval is withheld (NaN) over fewer than MIN_BOOTSTRAP_SEEDS seeds."""
    supported = estimate.n >= MIN_BOOTSTRAP_SEEDS
    nan = float("nan")
    return {
        f"{prefix}mean": estimate.mean,
        f"{prefix}low": estimate.low if supported else nan,
        f"{prefix}high": estimate.high if supported else nan,
        f"{prefix}n": estimate.n,
    }
