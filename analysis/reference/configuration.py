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

#: Experiments whose runs stand in for a paper experiment's cells in the scorecard, (experiment, env) ->
#: (paper experiment, paper env): the real-model drift experiment is the paper's controlled drift with
#: one-token action names, fewer and shorter phases and a real model. Shown beside the paper's numbers
#: when the paper experiment has no runs of its own, never graded: `paper_departures` lists how they
#: differ.
STAND_INS: dict[tuple[str, str], tuple[str, str]] = {
    ("llm_drift", "controlled_drift_words"): ("paper_controlled", "controlled_drift"),
}


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
    experiment's configuration ("" when it is), comma-separated. A stand-in's run (`STAND_INS`) is
    labelled with the cell it stands for (when that cell has no runs of its own) and departs in its
    experiment and every setting that differs."""
    of_paper = runs[runs["experiment"].isin(list(PAPER_OPTIONS))]
    departs = [
        ", ".join(departures(config, PAPER_OPTIONS[experiment]))
        for config, experiment in zip(of_paper["config"], of_paper["experiment"], strict=True)
    ]
    frame = of_paper[["experiment", "env", "memory", "seed"]].reset_index(drop=True)
    frame = frame.assign(departs=pd.Series(departs, dtype=object))
    cells = list(zip(runs["experiment"], runs["env"], strict=True))
    own = set(zip(of_paper["experiment"], of_paper["env"], strict=True))
    standing = runs[[cell in STAND_INS and STAND_INS[cell] not in own for cell in cells]]
    if standing.empty:
        return frame
    rows = []
    for run in standing.itertuples(index=False):
        experiment, env = STAND_INS[(run.experiment, run.env)]
        keys = [
            f"experiment={run.experiment}",
            *stand_in_departures(run.config, env, PAPER_OPTIONS[experiment]),
        ]
        rows.append({"experiment": experiment, "env": env, "memory": run.memory, "seed": run.seed,
                     "departs": ", ".join(keys)})  # fmt: skip
    return pd.concat([frame, pd.DataFrame.from_records(rows)], ignore_index=True)


def stand_in_departures(
    config: dict[str, object], env: str, options: dict[str, str], conf: Path = CONF
) -> list[str]:
    """How a stand-in's run departs from the paper experiment: its env and llm options, and each env
    setting not as the paper's env file sets it (scalars with their value, lists and tables by name)."""
    keys = departures(config, options)
    written = yaml.safe_load((conf / "env" / f"{env}.yaml").read_text(encoding="utf-8")) or {}
    paper_env = {k: v for k, v in written.items() if k != "defaults"}
    for name, value in sorted(config.items()):
        field = name.removeprefix("identity.env.")
        if field == name or field == "option" or paper_env.get(field, object()) == value:
            continue
        keys.append(f"env.{field}={value}" if isinstance(value, (int, float, str)) else f"env.{field}")
    return keys
