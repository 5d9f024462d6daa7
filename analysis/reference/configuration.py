"""Is a run the paper experiment's configuration? Only such runs are graded against the paper's numbers.

A paper experiment (`conf/experiment/paper_*.yaml`) chooses an environment option, takes the default
model backend (`conf/config.yaml`) and every parameter at its default; only seeds (and, swept by the
experiment, the memory) vary. The runner records in meta.json the options a stream was built from
(`identity.<group>.option`) and the keys in which its config differs from the one those options compose
to (`overrides`, also the `variant` directory level). So a run matches when its experiment is a paper
one, its env and llm options are the experiment's, and it overrides nothing. Read from the config files
and meta.json only: the analysis does not import the harness.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import yaml

CONF = Path(__file__).resolve().parents[2] / "conf"
#: The groups whose option a paper experiment fixes (the memory is what it sweeps).
FIXED_GROUPS = ("env", "llm")
NO_IDENTITY = "meta.json records no identity"


def _defaults(path: Path) -> dict[str, str]:
    """Group -> option of a config file's defaults list (`env: x` and `override /env: x` alike)."""
    entries = (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("defaults") or []
    chosen = {}
    for entry in entries:
        if isinstance(entry, dict):
            for key, value in entry.items():
                group = str(key).removeprefix("override").strip().lstrip("/")
                if group in FIXED_GROUPS and isinstance(value, str):
                    chosen[group] = value
    return chosen


def paper_options(conf: Path = CONF) -> dict[str, dict[str, str]]:
    """Experiment name -> the env and llm options of every paper experiment."""
    base = _defaults(conf / "config.yaml")
    return {path.stem: base | _defaults(path) for path in sorted((conf / "experiment").glob("paper_*.yaml"))}


PAPER_OPTIONS = paper_options()


def departures(config: dict[str, object], options: dict[str, str]) -> list[str]:
    """How a run (its flattened meta.json) departs from a paper experiment's `options`: the keys it
    overrides ("env.phase_length=100") and the options it chose instead ("llm=openai"); [] when it is
    that configuration."""
    if "identity.seed" not in config:
        return [NO_IDENTITY]
    keys = [
        f"{k.removeprefix('overrides.')}={v}" for k, v in sorted(config.items()) if k.startswith("overrides.")
    ]
    for group, option in options.items():
        chosen = config.get(f"identity.{group}.option")
        if chosen != option:
            keys.append(
                f"{group}={chosen}"
                if chosen is not None
                else f"{group}._target_={config.get(f'identity.{group}._target_')}"
            )
    return keys


def paper_departures(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per run of a paper experiment: its labels and `departs`, the keys in which it is not that
    experiment's configuration ("" when it is), comma-separated."""
    of_paper = runs[runs["experiment"].isin(list(PAPER_OPTIONS))]
    departs = [
        ", ".join(departures(config, PAPER_OPTIONS[experiment]))
        for config, experiment in zip(of_paper["config"], of_paper["experiment"], strict=True)
    ]
    frame = of_paper[["experiment", "env", "memory", "seed"]].reset_index(drop=True)
    return frame.assign(departs=pd.Series(departs, dtype=object))
