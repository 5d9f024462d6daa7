"""The memory-quality report: a table per experiment beside success, stale share over time, and the
section of results/README.md that says in numbers what the memory held, without any reader.

Everything here reads `Analysis.memory` (per method and phase,
`analysis.metrics.memory_quality.summarize`) and the episodes' memory-quality columns; nothing reads a
reply, an action or a success except to set the success column beside the memory figures.
"""

from __future__ import annotations

import math
from functools import partial

import pandas as pd

from analysis.data.load import in_sweep
from analysis.metrics.compute import NO_MEMORY, OVERALL, TEPA_REV, Analysis, phase_orders
from analysis.metrics.display import env_label, method_label, settings, sorted_experiments, sorted_methods
from analysis.metrics.memory_quality import LOGGED, METRICS
from analysis.report.figures import (
    Drawing,
    Job,
    method_colors,
    method_style,
    new_figure,
    render,
    shade_phases,
)
from analysis.report.tables import (
    MISSING,
    Table,
    _keyed,
    _of,
    _phase_columns,
    interval,
    markdown_table,
    number,
)
from analysis.stats import MIN_BOOTSTRAP_SEEDS

APPEND_ONLY = "append_only"
#: A prompt is "dominated by stale VALID lines" at a decision that is polluted; the section says whether
#: that holds at most of a method's decisions.
DOMINATED = 0.5
_COLUMNS = ["current", "stale"]
_SOURCE = "From the logged evidence and the environment's truth alone, never from the reply: "
_DEFINITIONS = (
    "A line is stale "
    "when its verdict disagrees with what the world holds now (VALID for another value, or FAILED for "
    "the true one). Stale share: stale lines / retrieved lines, per run; truth present / stale present: "
    "share of decisions with a VALID line asserting the truth / another value; pollution index: share "
    "of decisions whose VALID lines for other values outnumber those for the truth. Mean over seeds "
    "[95% bootstrap CI over seeds]; n/a: undefined (nothing retrieved) or not logged."
)


def _cell(row: dict | None, digits: int = 3) -> str:
    """Mean [CI] of a cell, its interval withheld below the seeds a bootstrap needs (`interval`'s rule)."""
    if row is None:
        return MISSING
    return interval(row["mean"], row["low"], row["high"], digits, n=row.get("n"))


def memory_table(analysis: Analysis, experiment: str) -> Table | None:
    """Success and the memory-quality metrics of every method and phase of one experiment."""
    memory = _of(analysis.memory, experiment=experiment)
    if memory.empty:
        return None
    success = _keyed(_of(analysis.success, experiment=experiment), "env", "memory", "phase")
    keyed = _keyed(memory, "env", "memory", "phase", "metric")
    pairs = [s for s in settings(memory) if s[0] == experiment]
    rows, data = [], []
    for setting in pairs:
        methods = sorted_methods(_of(memory, env=setting[1])["memory"])
        for method in methods:
            for phase in _phase_columns(analysis, experiment, [setting]):
                found = {m: keyed.get((setting[1], method, phase, m)) for m in METRICS}
                won = success.get((setting[1], method, phase))
                rows.append(
                    [
                        env_label(setting[1]),
                        method_label(method),
                        phase,
                        _cell(won),
                        *map(_cell, found.values()),
                    ]
                )
                record = {"experiment": experiment, "env": setting[1], "memory": method, "phase": phase}
                record |= {f"success_{k}": (won or {}).get(k, math.nan) for k in ("mean", "low", "high")}
                for metric, row in found.items():
                    record |= {
                        f"{metric}_{k}": (row or {}).get(k, math.nan) for k in ("mean", "low", "high", "n")
                    }
                data.append(record)
    columns = ["Setting", "Method", "Phase", "Success", *METRICS.values()]
    counts = [n for r in data for k, n in r.items() if k.endswith("_n") and not math.isnan(n)]
    counts += [row["n"] for row in success.values() if "n" in row and not math.isnan(row["n"])]
    few = (
        f" (n=k, no CI): fewer than {MIN_BOOTSTRAP_SEEDS} seeds, too few for a bootstrap interval."
        if counts and min(counts) < MIN_BOOTSTRAP_SEEDS
        else ""
    )
    return Table(
        f"memory_{experiment}",
        f"{experiment}: memory quality beside success (no reader involved)",
        columns,
        rows,
        pd.DataFrame.from_records(data),
        labels=3,
        note=_SOURCE + _DEFINITIONS + few,
    )


def stale_share_over_time(
    rows: pd.DataFrame, phases: list[str], experiment: str, env: str, window: int
) -> Drawing | None:
    """Each method's share of stale lines among the lines its prompts held, over a rolling window of
    `window` episodes pooled over seeds, with the phases shaded; `rows`: that setting's episodes."""
    figure = new_figure(figsize=(10, 4.2), layout="constrained")
    ax = figure.add_subplot()
    end = shade_phases(ax, rows, phases)
    colors = method_colors(rows["memory"])
    drawn = 0
    for method in sorted_methods(rows["memory"]):
        per_t = rows[rows["memory"] == method].groupby("t")[_COLUMNS].sum(min_count=1)
        lines = (per_t["current"] + per_t["stale"]).rolling(window, min_periods=1).sum()
        share = per_t["stale"].rolling(window, min_periods=1).sum() / lines.where(lines > 0)
        if share.notna().any():
            drawn += 1
            ax.plot(
                share.index,
                share.to_numpy(),
                color=colors[method],
                ls=method_style(method),
                lw=1.4,
                label=method_label(method),
            )
    if not drawn:
        return None
    ax.set_xlim(int(rows["t"].min()), end)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("episode t (stream position)")
    ax.set_ylabel(f"stale share of retrieved lines, rolling {window}")
    title = f"{experiment} / {env_label(env)}: stale share of retrieved lines over time (all seeds pooled)"
    ax.set_title(title, pad=22)
    figure.legend(loc="outside right upper", frameon=False, fontsize=9)
    return Drawing(f"stale_share_{experiment}_{env}.png", title, render(figure), experiment)


def memory_tables(analysis: Analysis) -> list[Table]:
    """The memory-quality table of every experiment that logged its samples, in experiment order."""
    experiments = sorted_experiments(analysis.memory["experiment"]) if len(analysis.memory) else []
    return [t for t in (memory_table(analysis, e) for e in experiments) if t is not None]


def memory_jobs(episodes: pd.DataFrame, runs: pd.DataFrame, window: int) -> list[Job]:
    """Stale share over time of every drifting setting whose runs logged their samples (from the logs
    alone; sweeps left out, as in success over time)."""
    logged = set(runs.loc[(runs["sample"] == LOGGED) & ~in_sweep(runs), "run"])
    rows = episodes[episodes["run"].isin(logged)] if logged else episodes.iloc[:0]
    phases = phase_orders(rows) if len(rows) else {}
    jobs: list[Job] = []
    for experiment, env in settings(rows):
        if len(phases[(experiment, env)]) > 1:
            of_setting = rows.loc[
                (rows["experiment"] == experiment) & (rows["env"] == env), ["memory", "t", "phase", *_COLUMNS]
            ]
            jobs.append(
                partial(stale_share_over_time, of_setting, phases[(experiment, env)], experiment, env, window)
            )
    return jobs


def _mean(memory: dict, setting: tuple[str, str], method: str, phase: str, metric: str) -> float:
    row = memory.get((*setting, method, phase, metric))
    return math.nan if row is None else float(row["mean"])


def _focus_phase(phases: list[str]) -> str:
    """The phase a sentence is about: the first after the first boundary (memory made stale), or the
    only one."""
    return phases[1] if len(phases) > 1 else phases[0]


def _setting_row(memory: dict, setting: tuple[str, str], phases: list[str], methods: list[str]) -> list[str]:
    """A setting's row of the section's table: Append-Only's and TEPA-Rev's stale share and pollution
    index in its focus phase, and the methods with the highest and lowest pollution index."""
    phase = _focus_phase(phases)
    cells = [env_label(setting[1]), setting[0], phase]
    for method in (APPEND_ONLY, TEPA_REV):
        cells += [number(_mean(memory, setting, method, phase, m), 2) for m in ("stale_share", "pollution")]
    polluted = {m: _mean(memory, setting, m, phase, "pollution") for m in methods if m != NO_MEMORY}
    polluted = {m: p for m, p in polluted.items() if not math.isnan(p)}
    if not polluted:
        return [*cells, MISSING, MISSING]
    worst = max(polluted, key=lambda m: (polluted[m], m))
    best = min(polluted, key=lambda m: (polluted[m], m))
    if polluted[worst] == polluted[best]:
        return [*cells, f"all {number(polluted[worst], 2)}", f"all {number(polluted[best], 2)}"]
    return [
        *cells,
        f"{method_label(worst)} {number(polluted[worst], 2)}",
        f"{method_label(best)} {number(polluted[best], 2)}",
    ]


def dominated(analysis: Analysis, method: str) -> tuple[list[str], int]:
    """The settings (labels) where `method`'s prompts are dominated by stale VALID lines at most decisions
    of the focus phase (pollution index above DOMINATED), and how many settings report it."""
    memory = _keyed(analysis.memory, "experiment", "env", "memory", "phase", "metric")
    found, reported = [], 0
    for setting in settings(analysis.memory):
        phase = _focus_phase(analysis.phases.get(setting, [OVERALL]))
        pollution = _mean(memory, setting, method, phase, "pollution")
        if not math.isnan(pollution):
            reported += 1
            if pollution > DOMINATED:
                found.append(f"{env_label(setting[1])} ({setting[0]})")
    return found, reported


_ROW_COLUMNS = [
    "Setting",
    "Experiment",
    "Phase",
    "Append-Only stale share",
    "Append-Only pollution",
    "TEPA-Rev stale share",
    "TEPA-Rev pollution",
    "Highest pollution",
    "Lowest pollution",
]


def section(analysis: Analysis, provenance: dict[str, str] | None = None) -> str:
    """The results/README.md section on memory quality: one table and one sentence computed from
    `analysis.memory`, the runs they come from (`provenance`: experiment -> text), and one line naming
    the experiments without memory metrics. It reads the analysis' frames only, so that the results an
    analysis keeps of an experiment absent from its runs read as a full analysis wrote them."""
    parts = ["## Memory quality, without a reader\n"]
    with_metrics = set(analysis.memory["experiment"]) if len(analysis.memory) else set()
    analysed = analysis.success["experiment"] if len(analysis.success) else []
    without = [e for e in sorted_experiments(analysed) if e not in with_metrics]
    unavailable = (
        [f"{', '.join(without)} (runs logged before episodes recorded their evidence, or an environment "
         "that reports no truth)"]
        if without
        else []
    )  # fmt: skip
    if analysis.memory.empty:
        parts.append(
            "Memory metrics are unavailable: "
            + ("; ".join(unavailable) or "no run logged its evidence")
            + ".\n"
        )
        return "\n".join(parts)
    parts.append(
        "Every number in this section is computed from what the prompts held (each decision's retrieved "
        "evidence and the truth its environment reports for the task's key, both in episodes.parquet), "
        "never from a reply: it needs no reader and does not move with the simulated reader's lapse rate "
        "or weights. " + _DEFINITIONS.split(". Mean over seeds")[0] + ". Per method "
        "and phase: the memory-quality table on each experiment's page; over time: the stale-share "
        "figures there.\n"
    )
    memory = _keyed(analysis.memory, "experiment", "env", "memory", "phase", "metric")
    rows = []
    for setting in settings(analysis.memory):
        methods = sorted_methods(_of(analysis.memory, experiment=setting[0], env=setting[1])["memory"])
        rows.append(_setting_row(memory, setting, analysis.phases.get(setting, [OVERALL]), methods))
    parts.append(markdown_table(_ROW_COLUMNS, rows, labels=3))
    sentences = []
    for method in (APPEND_ONLY, TEPA_REV):
        found, reported = dominated(analysis, method)
        if reported:
            where = f" ({', '.join(found)})" if found else ""
            sentences.append(f"{method_label(method)}'s in {len(found)} of {reported}{where}")
    if sentences:
        parts.append(
            "Phase: the first after the first boundary (the only one where there is none). Prompts "
            f"dominated by stale VALID lines at most decisions (pollution index above {DOMINATED:g}): "
            + "; ".join(sentences)
            + " settings.\n"
        )
    if provenance:
        experiments = sorted_experiments(with_metrics)
        parts.append(
            "From " + "; ".join(f"{e}: {provenance[e]}" for e in experiments if e in provenance) + ".\n"
        )
    if unavailable:
        parts.append("Memory metrics unavailable for " + "; ".join(unavailable) + ".\n")
    return "\n".join(parts)
