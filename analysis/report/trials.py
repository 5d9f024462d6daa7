"""Why TEPA-Full scores as TEPA-Rev where it does: what its trials by execution did, from the logs.

TEPA-Full is TEPA-Rev with trials before every promotion and re-promotion; where its success equals
TEPA-Rev's in every phase, its trials changed nothing. The note says so with the evidence: its trials
per run, how many passed and how many rounds turned a precedent down (the memory's cumulative
`trials` / `trial_passes` counters and the archive's `trial_failed` events, recorded per experiment in
the manifest), and its lifecycle counts beside TEPA-Rev's (the cost table).
"""

from __future__ import annotations

import math

import pandas as pd

from analysis.metrics.compute import TEPA_FULL, TEPA_REV, Analysis
from analysis.metrics.display import env_label
from analysis.report.tables import _keyed, _of, number

#: The heading the note stands under on an experiment's page (linked from the summary).
HEADING = "Why TEPA-Full equals TEPA-Rev here"
ANCHOR = "why-tepa-full-equals-tepa-rev-here"
OUTCOME_COLUMNS = ["experiment", "env", "memory", "runs", "trials", "passes", "failed_rounds"]


def trial_outcomes(costs: pd.DataFrame, events: pd.DataFrame) -> pd.DataFrame:
    """Per experiment, setting and method that ran trials: runs, trials and passes summed over its runs,
    and the rounds of trials that turned a precedent down (`costs`: Analysis.costs, one row per run;
    `events`: RunLogs.events)."""
    if costs.empty or "trial_passes" not in costs or not (costs["trials"] > 0).any():
        return pd.DataFrame(columns=OUTCOME_COLUMNS)
    tried = costs[costs["trials"] > 0]
    failed = events[events["event"] == "trial_failed"].groupby("run")["count"].sum() if len(events) else {}
    tried = tried.assign(failed_rounds=tried["run"].map(failed).fillna(0).astype("int64"))
    grouped = tried.groupby(["experiment", "env", "memory"], sort=True)
    frame = grouped.agg(
        runs=("run", "count"),
        trials=("trials", "sum"),
        passes=("trial_passes", "sum"),
        failed_rounds=("failed_rounds", "sum"),
    )
    return frame.reset_index()[OUTCOME_COLUMNS].astype({c: "int64" for c in OUTCOME_COLUMNS[3:]})


def identical_settings(analysis: Analysis, experiment: str) -> list[str]:
    """The experiment's settings where TEPA-Full's success equals TEPA-Rev's in every phase."""
    success = _of(analysis.success, experiment=experiment)
    envs = []
    for env in dict.fromkeys(success["env"]) if len(success) else []:
        full = _of(success, env=env, memory=TEPA_FULL).set_index("phase")["mean"]
        rev = _of(success, env=env, memory=TEPA_REV).set_index("phase")["mean"]
        if len(full) and len(rev) and set(full.index) == set(rev.index):
            if all(math.isclose(full[p], rev[p], abs_tol=1e-12) for p in full.index):
                envs.append(str(env))
    return envs


def count_text(x: float) -> str:
    """A mean count: whole when it is one (every seed ran 70 trials), else to one decimal."""
    return f"{x:.0f}" if not math.isnan(x) and x == round(x) else number(x, 1)


def _counts(costs: dict, env: str, method: str) -> list[float]:
    return [
        costs.get((env, method, m), {}).get("mean", math.nan)
        for m in ("promotions", "revocations", "repromotions")
    ]


def _passes(outcomes: pd.DataFrame, experiment: str, env: str) -> str:
    row = _keyed(_of(outcomes, experiment=experiment, env=env, memory=TEPA_FULL), "memory").get((TEPA_FULL,))
    if row is None:
        return "its trial passes are not recorded with these results (kept from before they were)"
    if row["passes"] == row["trials"] and row["failed_rounds"] == 0:
        return (
            f"all {row['trials']} of its trials over {row['runs']} runs passed and no round of trials turned "
            "a precedent down, so no promotion was ever held back"
        )
    return (
        f"{row['passes']} of its {row['trials']} trials over {row['runs']} runs passed and "
        f"{row['failed_rounds']} rounds of trials turned a precedent down"
    )


def trial_sentences(analysis: Analysis, experiment: str, outcomes: pd.DataFrame) -> list[str]:
    """One sentence per setting where TEPA-Full equals TEPA-Rev, with the evidence (see the module)."""
    costs = _keyed(_of(analysis.cost_summary, experiment=experiment), "env", "memory", "metric")
    sentences = []
    for env in identical_settings(analysis, experiment):
        trials = costs.get((env, TEPA_FULL, "trials"), {}).get("mean", math.nan)
        per = costs.get((env, TEPA_FULL, "trials_per_promotion"), {}).get("mean", math.nan)
        full, rev = _counts(costs, env, TEPA_FULL), _counts(costs, env, TEPA_REV)
        same = all(math.isclose(a, b) for a, b in zip(full, rev, strict=True) if not math.isnan(a + b))
        shown = ", ".join(map(count_text, full))
        sentences.append(
            f"{env_label(env)}: TEPA-Full's success equals TEPA-Rev's in every phase. Its "
            f"{count_text(trials)} trials per run ({count_text(per)} per promotion or re-promotion) change "
            f"nothing here: {_passes(outcomes, experiment, env)}, and its promotions, revocations and "
            f"re-promotions per run ({shown}) {'equal' if same else 'differ from'} TEPA-Rev's "
            f"({', '.join(map(count_text, rev))})."
        )
    return sentences
