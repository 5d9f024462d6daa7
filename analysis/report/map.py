"""The robustness map's report: where TEPA beats every simple rule, where a simple rule matches or beats
it, at what prompt cost, and the summary text, all computed from the map's runs.

Terms (the summary and the tables use them as defined here):
- *simple baselines*: every method of the map that is neither a TEPA variant (`tepa_*`) nor an oracle
  (Oracle Reset, which is told the true phase boundaries);
- *tuned*: a method at the grid point chosen for the cell on the tuning seeds (`analysis.map.runs`);
  an untuned method at its defaults;
- *best simple baseline* of a cell, per setting: the simple baseline with the highest mean success
  on the tuning seeds in that setting (ties: the first method key in alphabetical order); the
  evaluation seeds it is compared on never choose it (`analysis.map.runs.tuning_scores`);
- *advantage*: TEPA's tuned success minus the best simple baseline's, per evaluation seed (the same seed
  is the same stream and the same misreported episodes), mean with a 95% bootstrap interval, two-sided
  exact sign-flip p, Holm-corrected over the cells of the map; *wins* / *loses*: Holm p < 0.05 with that
  sign; *matches*: otherwise;
- *winner*: the non-oracle method with the highest tuned mean success of the cell on the evaluation
  seeds (a description of the evaluation, not a comparison; the best simple baseline is chosen apart);
- *overall*: per TEPA variant and setting, the cells won / matched / lost and the mean advantage over
  the cells, its 95% bootstrap interval over the evaluation seeds (each seed's mean over the cells);
- *cost*: mean prompt tokens per decision; a method is *dominated* in a cell when another has at least its
  success and at most its cost, one of them strictly; *under a budget* B, a cell's winner is chosen
  among the methods whose cost is at most B (the same prompt budget for every method).
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import TwoSlopeNorm
from matplotlib.figure import Figure

from analysis.map.runs import RULES, choose, evaluation, grid_cells, tuning_scores
from analysis.metrics.display import method_label, sorted_methods
from analysis.report.tables import Table, interval, number, pvalue
from analysis.stats import holm, mean_cis, paired_comparisons

TARGETS = ("tepa_rev", "tepa_full")
#: The evaluation settings: tuned, defaults, and tuned under the map's evidence budget (when it has one).
SETTINGS = ("tuned", "defaults", "budget")
SETTING_TEXT = {
    "tuned": "tuned",
    "defaults": "defaults",
    "budget": "tuned, at most {budget} evidence items per prompt",
}
ORACLES = frozenset({"oracle_reset"})
ALPHA = 0.05
#: Prompt budgets (mean tokens per decision) for the equal-budget comparison; the last is no budget.
BUDGETS = (110.0, 130.0, 150.0, 200.0, 400.0, math.inf)
#: What the paper reports after the full reversal in controlled drift, for the noise hypothesis.
PAPER_FULL_REVERSAL = {"lww": 0.210, "append_only": 0.210, "no_memory": 0.309, "tepa_rev": 0.950}
NEAR = 0.05  # "near the paper's number": within this much
FULL_REVERSAL = "full_reversal"
DPI = 110


@dataclass(frozen=True)
class MapResult:
    """Everything the tables, figures and summary show. `success`: one row per (cell, method, setting)
    with the mean, interval, cost, revocations and chosen parameters; `advantage`: per (target, setting,
    cell); `overall`: per (target, setting); `winners`: per (setting, cell); `frontier`: per (cell,
    method), tuned; `budget`: per (budget, cell); `hypothesis`: per (noise, method) at no random
    reversals, defaults."""

    spec: dict[str, Any]
    cells: list[dict[str, float]]
    success: pd.DataFrame
    advantage: pd.DataFrame
    overall: pd.DataFrame
    winners: pd.DataFrame
    frontier: pd.DataFrame
    budget: pd.DataFrame
    hypothesis: pd.DataFrame


def is_simple(method: str) -> bool:
    return not method.startswith("tepa") and method not in ORACLES


def cell_text(cell: dict[str, float]) -> str:
    return ", ".join(f"{k.removeprefix('env.')}={v:g}" for k, v in cell.items())


def analyse_map(runs: pd.DataFrame, spec: dict[str, Any]) -> MapResult:
    """The map's results from its run summaries (`analysis.map.runs.summarise`)."""
    chosen = choose(runs, spec)
    ev = evaluation(runs, spec, chosen)
    if ev.empty:
        raise ValueError("runs: no evaluation runs of the map (run the evaluation stage)")
    cells = grid_cells(spec["axes"])
    success = _success(ev, chosen, tuning_scores(runs, spec, chosen))
    advantage, per_seed = _advantage(ev, success, spec, cells)
    overall = _overall(advantage, per_seed)
    winners = _winners(success)
    frontier = _frontier(success)
    budget = _budget(success)
    hypothesis = _hypothesis(success, cells).assign(
        experiment=spec["experiment"], phase_length=spec["env"].get("phase_length")
    )
    return MapResult(spec, cells, success, advantage, overall, winners, frontier, budget, hypothesis)


def _per_seed(ev: pd.DataFrame, setting: str, cell: int, method: str, column: str = "success") -> pd.Series:
    sel = ev[(ev["setting"] == setting) & (ev["cell"] == cell) & (ev["method"] == method)]
    return sel.set_index("seed")[column].sort_index()


def _success(ev: pd.DataFrame, chosen: dict, scores: pd.DataFrame) -> pd.DataFrame:
    """Per (setting, cell, method) on the evaluation seeds, with `tuning`: the mean success of the same
    setting on the tuning seeds (NaN without tuning-seed runs)."""
    groups = list(ev.groupby(["setting", "cell", "method"], sort=True))
    tuning = scores.set_index(["setting", "cell", "method"])["tuning"].to_dict()
    full = f"success.{FULL_REVERSAL}"
    estimates = mean_cis([g["success"].to_numpy() for _, g in groups])
    rows = []
    for ((setting, cell, method), g), est in zip(groups, estimates, strict=True):
        params = chosen.get((cell, method), {}) if setting == "tuned" else {}
        rows.append(
            {
                "setting": setting,
                "cell": int(cell),
                "method": method,
                "n": len(g),
                "success": est.mean,
                "low": est.low,
                "high": est.high,
                "tuning": tuning.get((setting, int(cell), method), math.nan),
                "tokens": float(g["tokens"].mean()),
                "full_reversal": float(g[full].mean()) if full in g else math.nan,
                "revocations": float(g["revocations"].mean()),
                **{
                    f"{kind}.{rule}": float(g[f"{kind}.{rule}"].mean())
                    for kind in ("revoked", "revoked_good")
                    for rule in RULES
                },  # fmt: skip
                "params": ", ".join(f"{k}={v}" for k, v in params.items()),
            }
        )
    return pd.DataFrame(rows)


def _advantage(
    ev: pd.DataFrame, success: pd.DataFrame, spec: dict, cells: list
) -> tuple[pd.DataFrame, list[pd.Series]]:
    """Per (setting, target, cell): TEPA minus the best simple baseline, picked by its tuning-seed
    success (a simple baseline without tuning-seed runs of the setting stops the analysis), with the
    paired per-seed differences (indexed by evaluation seed) in the same order."""
    rows, pairs, diffs = [], [], []
    for setting in SETTINGS:
        for target in TARGETS:
            if target not in spec["methods"]:
                continue
            for cell in range(len(cells)):
                s = success[(success["setting"] == setting) & (success["cell"] == cell)]
                simple = s[s["method"].map(is_simple)]
                if simple.empty or target not in set(s["method"]):
                    continue
                untuned = simple[simple["tuning"].isna()]
                if len(untuned):
                    raise ValueError(
                        f"runs: cell {cell}, {untuned['method'].iloc[0]} ({setting}): no run on every "
                        "tuning seed, which picks the best simple baseline (rerun the map)"
                    )
                pick = simple.sort_values("tuning", ascending=False, kind="stable").iloc[0]
                best = pick["method"]
                a, b = _per_seed(ev, setting, cell, target), _per_seed(ev, setting, cell, best)
                seeds = a.index.intersection(b.index)
                pairs.append((a[seeds].to_numpy(), b[seeds].to_numpy()))
                diffs.append(a[seeds] - b[seeds])
                rows.append({"setting": setting, "target": target, "cell": cell, "best": best,
                             "best_tuning": float(pick["tuning"])})  # fmt: skip
    if not rows:
        columns = ["setting", "target", "cell", "best", "best_tuning", "diff", "low", "high", "p", "p_holm"]
        return pd.DataFrame(columns=columns), []
    frame = pd.DataFrame(rows)
    comparisons = paired_comparisons(pairs)
    frame["n"] = [c.n for c in comparisons]
    frame["diff"] = [c.diff.mean for c in comparisons]
    frame["low"] = [c.diff.low for c in comparisons]
    frame["high"] = [c.diff.high for c in comparisons]
    frame["p"] = [c.p_value for c in comparisons]
    frame["p_holm"] = np.nan
    for _, idx in frame.groupby(["setting", "target"]).groups.items():
        frame.loc[idx, "p_holm"] = holm(frame.loc[idx, "p"].to_numpy())
    frame["verdict"] = [
        ("wins" if d > 0 else "loses") if p < ALPHA else "matches"
        for d, p in zip(frame["diff"], frame["p_holm"], strict=True)
    ]
    return frame, diffs


def _overall(advantage: pd.DataFrame, diffs: list[pd.Series]) -> pd.DataFrame:
    """Per (target, setting): cells won / matched / lost, and the mean advantage over the cells with a
    bootstrap interval over the evaluation seeds (each seed's advantage averaged over the cells)."""
    columns = ["target", "setting", "cells", "wins", "matches", "loses", "diff", "low", "high", "n"]
    if advantage.empty:
        return pd.DataFrame(columns=columns)
    groups = []
    for target in TARGETS:
        for setting in SETTINGS:
            idx = advantage.index[(advantage["target"] == target) & (advantage["setting"] == setting)]
            if len(idx):
                per_seed = pd.concat([diffs[i] for i in idx], axis=1).mean(axis=1)  # seed x cell
                groups.append((target, setting, advantage.loc[idx], per_seed.to_numpy()))
    estimates = mean_cis([g[3] for g in groups])
    rows = []
    for (target, setting, adv, per_seed), est in zip(groups, estimates, strict=True):
        verdicts = adv["verdict"].value_counts()
        rows.append(
            {
                "target": target,
                "setting": setting,
                "cells": len(adv),
                **{v: int(verdicts.get(v, 0)) for v in ("wins", "matches", "loses")},
                "diff": est.mean,
                "low": est.low,
                "high": est.high,
                "n": len(per_seed),
            }  # fmt: skip
        )
    return pd.DataFrame(rows, columns=columns)


def _winners(success: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for (setting, cell), s in success[~success["method"].isin(ORACLES)].groupby(["setting", "cell"]):
        ranked = s.sort_values("success", ascending=False, kind="stable")
        top = ranked.iloc[0]
        second = ranked.iloc[1] if len(ranked) > 1 else top
        rows.append(
            {
                "setting": setting,
                "cell": int(cell),
                "winner": top["method"],
                "success": top["success"],
                "runner_up": second["method"],
                "margin": top["success"] - second["success"],
            }
        )
    return pd.DataFrame(rows)


def _frontier(success: pd.DataFrame) -> pd.DataFrame:
    tuned = success[(success["setting"] == "tuned") & ~success["method"].isin(ORACLES)]
    rows = []
    for cell, s in tuned.groupby("cell"):
        for _, m in s.iterrows():
            better = s[
                (s["success"] >= m["success"])
                & (s["tokens"] <= m["tokens"])
                & ((s["success"] > m["success"]) | (s["tokens"] < m["tokens"]))
            ]
            rows.append(
                {
                    "cell": int(cell),
                    "method": m["method"],
                    "success": m["success"],
                    "tokens": m["tokens"],
                    "dominated_by": ",".join(sorted_methods(better["method"])),
                }
            )
    return pd.DataFrame(rows)


def _budget(success: pd.DataFrame) -> pd.DataFrame:
    tuned = success[(success["setting"] == "tuned") & ~success["method"].isin(ORACLES)]
    rows = []
    for budget in BUDGETS:
        for cell, s in tuned.groupby("cell"):
            within = s[s["tokens"] <= budget]
            winner = (
                within.sort_values("success", ascending=False, kind="stable").iloc[0] if len(within) else None
            )
            rows.append(
                {
                    "budget": budget,
                    "cell": int(cell),
                    "winner": "" if winner is None else winner["method"],
                    "success": math.nan if winner is None else winner["success"],
                }
            )
    return pd.DataFrame(rows)


def with_hypothesis(result: MapResult, other: MapResult) -> MapResult:
    """`result` with the noise hypothesis answered by `other` (a run at the paper's phase lengths)."""
    return replace(result, hypothesis=other.hypothesis)


def _hypothesis(success: pd.DataFrame, cells: list[dict[str, float]]) -> pd.DataFrame:
    """At no random reversals, defaults: each noise level's success after the full reversal."""
    rows = []
    for i, cell in enumerate(cells):
        others = {k: v for k, v in cell.items() if k != "env.noise"}
        if "env.noise" not in cell or any(v != 0 for v in others.values()):
            continue
        s = success[(success["setting"] == "defaults") & (success["cell"] == i)].set_index("method")
        for method, paper in PAPER_FULL_REVERSAL.items():
            if method in s.index:
                ours = float(s.loc[method, "full_reversal"])
                rows.append(
                    {
                        "noise": cell["env.noise"],
                        "method": method,
                        "ours": ours,
                        "paper": paper,
                        "near": abs(ours - paper) <= NEAR,
                    }  # fmt: skip
                )
    return pd.DataFrame(rows, columns=["noise", "method", "ours", "paper", "near"])


# ------------------------------------------------------------------------------------------- tables


def tables(result: MapResult) -> list[Table]:
    """The map's tables (md / csv / tex)."""
    r = result
    cell_of = {i: cell_text(c) for i, c in enumerate(r.cells)}
    s = r.success.assign(cell_text=r.success["cell"].map(cell_of))
    success_rows = [
        [
            row.cell_text,
            method_label(row.method),
            row.setting,
            interval(row.success, row.low, row.high),
            number(row.tuning),
            number(row.tokens, 1),
            number(row.revocations, 1),
            row.params or "defaults",
        ]  # fmt: skip
        for row in s.itertuples()
    ]
    adv = r.advantage.assign(cell_text=r.advantage["cell"].map(cell_of))
    adv_rows = [
        [
            row.cell_text,
            method_label(row.target),
            row.setting,
            method_label(row.best),
            number(row.best_tuning),
            interval(row.diff, row.low, row.high, signed=True),
            pvalue(row.p),
            pvalue(row.p_holm),
            row.verdict,
        ]  # fmt: skip
        for row in adv.itertuples()
    ]
    overall_rows = [
        [
            method_label(row.target),
            row.setting,
            str(row.cells),
            str(row.wins),
            str(row.matches),
            str(row.loses),
            interval(row.diff, row.low, row.high, signed=True),
        ]  # fmt: skip
        for row in r.overall.itertuples()
    ]
    win = r.winners.assign(cell_text=r.winners["cell"].map(cell_of))
    win_rows = [
        [
            row.cell_text,
            row.setting,
            method_label(row.winner),
            number(row.success),
            method_label(row.runner_up),
            number(row.margin, signed=True),
        ]  # fmt: skip
        for row in win.itertuples()
    ]
    fr = r.frontier.assign(cell_text=r.frontier["cell"].map(cell_of))
    fr_rows = [
        [
            row.cell_text,
            method_label(row.method),
            number(row.success),
            number(row.tokens, 1),
            ", ".join(method_label(m) for m in row.dominated_by.split(",") if m) or "on the frontier",
        ]  # fmt: skip
        for row in fr.itertuples()
    ]
    bud = _budget_counts(r.budget)
    bud_rows = [
        [_budget_text(b), *[str(bud.get((b, m), 0)) for m in _budget_methods(r.budget)]] for b in BUDGETS
    ]
    hyp_rows = [
        [
            number(row.noise, 2),
            method_label(row.method),
            number(row.ours),
            number(row.paper),
            "yes" if row.near else "no",
        ]  # fmt: skip
        for row in r.hypothesis.itertuples()
    ]
    return [
        Table(
            "map_success",
            "Robustness map: success per cell and method (evaluation seeds)",
            [
                "Cell",
                "Method",
                "Setting",
                "Success [95% CI]",
                "Tuning-seed success",
                "Prompt tokens / decision",
                "Revocations / stream",
                "Parameters",
            ],
            success_rows,
            r.success,
            labels=3,
        ),  # fmt: skip
        Table(
            "map_advantage",
            "Robustness map: TEPA minus the best simple baseline per cell (picked on the tuning seeds, "
            "paired on the evaluation seeds)",
            [
                "Cell",
                "TEPA",
                "Setting",
                "Best simple baseline (by tuning seeds)",
                "Its tuning-seed success",
                "Diff [95% CI]",
                "p (sign-flip)",
                "Holm p",
                "Verdict",
            ],
            adv_rows,
            r.advantage,
            labels=4,
        ),  # fmt: skip
        Table(
            "map_overall",
            "Robustness map overall: TEPA minus the best simple baseline over the cells",
            ["TEPA", "Setting", "Cells", "Wins", "Matches", "Loses", "Mean diff [95% CI]"],
            overall_rows,
            r.overall,
        ),  # fmt: skip
        Table(
            "map_winners",
            "Robustness map: the best non-oracle method per cell",
            ["Cell", "Setting", "Winner", "Success", "Runner-up", "Margin"],
            win_rows,
            r.winners,
        ),  # fmt: skip
        Table(
            "map_frontier",
            "Robustness map: success against prompt tokens per decision (tuned); who dominates whom",
            ["Cell", "Method", "Success", "Prompt tokens / decision", "Dominated by"],
            fr_rows,
            r.frontier,
        ),  # fmt: skip
        Table(
            "map_budget",
            "Robustness map: cells won by each method under a prompt budget (tuned, tokens per decision)",
            ["Budget", *[method_label(m) for m in _budget_methods(r.budget)]],
            bud_rows,
            r.budget,
            labels=1,
        ),  # fmt: skip
        Table(
            "map_noise_hypothesis",
            "Does one noise level bring the paper's full-reversal numbers? (defaults, no random reversals)",
            ["Noise", "Method", "Ours (full reversal)", "Paper", f"Within {NEAR}"],
            hyp_rows,
            r.hypothesis,
        ),  # fmt: skip
    ]


def _budget_methods(budget: pd.DataFrame) -> list[str]:
    return sorted_methods(m for m in budget["winner"].unique() if m)


def _budget_counts(budget: pd.DataFrame) -> dict[tuple[float, str], int]:
    return {(b, m): len(g) for (b, m), g in budget.groupby(["budget", "winner"]) if m}


def _budget_text(budget: float) -> str:
    return "none" if math.isinf(budget) else f"<= {budget:g}"


# ------------------------------------------------------------------------------------------ figures


def _grid(result: MapResult, values: dict[int, float]) -> np.ndarray:
    rows, cols = (list(v) for v in result.spec["axes"].values())
    grid = np.full((len(rows), len(cols)), np.nan)
    for i, value in values.items():
        grid[i // len(cols), i % len(cols)] = value
    return grid


def _axes_labels(ax: Any, result: MapResult) -> None:
    (row_key, rows), (col_key, cols) = result.spec["axes"].items()
    ax.set_yticks(range(len(rows)), [f"{v:g}" for v in rows])
    ax.set_xticks(range(len(cols)), [f"{v:g}" for v in cols])
    ax.set_ylabel(row_key.removeprefix("env."))
    ax.set_xlabel(col_key.removeprefix("env."))


def _png(fig: Figure) -> bytes:
    FigureCanvasAgg(fig)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI, metadata={"Software": None})
    return buffer.getvalue()


def _heatmap(result: MapResult, target: str, setting: str) -> bytes:
    adv = result.advantage[(result.advantage["target"] == target) & (result.advantage["setting"] == setting)]
    grid = _grid(result, dict(zip(adv["cell"], adv["diff"], strict=True)))
    fig = Figure(figsize=(6.4, 4.8))
    ax = fig.add_subplot()
    bound = max(float(np.nanmax(np.abs(grid))) if np.isfinite(grid).any() else 0.0, 1e-3)
    image = ax.imshow(grid, cmap="RdBu", norm=TwoSlopeNorm(0.0, -bound, bound), origin="lower")
    fig.colorbar(image, ax=ax, label="success difference")
    cols = len(next(iter(list(result.spec["axes"].values())[1:]), [0]))
    for row in adv.itertuples():
        mark = "*" if row.p_holm < ALPHA else ""
        colour = "white" if abs(row.diff) > 0.6 * bound else "black"  # legible on the darkest cells
        ax.text(row.cell % cols, row.cell // cols, f"{row.diff:+.3f}{mark}\n{method_label(row.best)}",
                ha="center", va="center", fontsize=6.5, color=colour)  # fmt: skip
    _axes_labels(ax, result)
    ax.set_title(
        f"{method_label(target)} minus the best simple baseline ({setting}); * Holm p < {ALPHA}", fontsize=9
    )
    return _png(fig)


def _winner_map(result: MapResult) -> bytes:
    win = result.winners[result.winners["setting"] == "tuned"]
    methods = sorted_methods(win["winner"].unique())
    index = {m: i for i, m in enumerate(methods)}
    grid = _grid(result, {row.cell: index[row.winner] for row in win.itertuples()})
    fig = Figure(figsize=(6.4, 4.8))
    ax = fig.add_subplot()
    ax.imshow(grid, cmap="tab10", vmin=0, vmax=9, origin="lower")
    cols = len(list(result.spec["axes"].values())[1])
    for row in win.itertuples():
        ax.text(row.cell % cols, row.cell // cols, f"{method_label(row.winner)}\n{row.success:.3f}",
                ha="center", va="center", fontsize=6.5)  # fmt: skip
    _axes_labels(ax, result)
    ax.set_title("Best non-oracle method per cell (tuned)", fontsize=9)
    return _png(fig)


def _noise_curve(result: MapResult) -> bytes:
    cells = [
        (i, c) for i, c in enumerate(result.cells) if all(v == 0 for k, v in c.items() if k != "env.noise")
    ]
    fig = Figure(figsize=(6.4, 4.2))
    ax = fig.add_subplot()
    tuned = result.success[result.success["setting"] == "tuned"]
    for method in sorted_methods(tuned["method"].unique()):
        points = [
            (c["env.noise"], tuned[(tuned["cell"] == i) & (tuned["method"] == method)]) for i, c in cells
        ]
        points = [(x, s.iloc[0]) for x, s in points if len(s)]
        if not points:
            continue
        xs = [x for x, _ in points]
        ax.errorbar(xs, [p.success for _, p in points],
                    yerr=[[p.success - p.low for _, p in points], [p.high - p.success for _, p in points]],
                    label=method_label(method), marker="o", markersize=3, capsize=2)  # fmt: skip
    ax.set_xlabel("outcome noise")
    ax.set_ylabel("success (tuned, evaluation seeds)")
    ax.set_title("Success against noise at the paper's drift (no random reversals)", fontsize=9)
    if ax.get_legend_handles_labels()[0]:  # no cell at the paper's drift: an empty plot
        ax.legend(fontsize=6.5, ncol=2)
    return _png(fig)


def figures(result: MapResult) -> dict[str, bytes]:
    """File name -> PNG of each figure (needs a two-axis grid)."""
    if len(result.spec["axes"]) != 2 or "env.noise" not in result.spec["axes"]:
        return {}
    out = {}
    adv = result.advantage
    for target in TARGETS:
        for setting in SETTINGS:
            if len(adv[(adv["target"] == target) & (adv["setting"] == setting)]):
                suffix = "" if setting == "tuned" else f"_{setting}"
                out[f"map_{target}_advantage{suffix}.png"] = _heatmap(result, target, setting)
    out["map_winners.png"] = _winner_map(result)
    out["map_success_vs_noise.png"] = _noise_curve(result)
    return out


# ------------------------------------------------------------------------------------------ summary


def _paper_cell(result: MapResult) -> int | None:
    """The paper's point: no noise and no random reversals."""
    return next((i for i, c in enumerate(result.cells) if all(v == 0 for v in c.values())), None)


def _verdicts(result: MapResult, target: str, setting: str) -> dict[str, list[int]]:
    adv = result.advantage[(result.advantage["target"] == target) & (result.advantage["setting"] == setting)]
    return {v: list(adv.loc[adv["verdict"] == v, "cell"]) for v in ("wins", "matches", "loses")}


def _cells_text(result: MapResult, cells: list[int], limit: int = 6) -> str:
    shown = "; ".join(cell_text(result.cells[c]) for c in cells[:limit])
    return shown + (f"; and {len(cells) - limit} more" if len(cells) > limit else "")


def summary(result: MapResult) -> list[str]:
    """The findings as markdown bullets, every number computed here from the map's runs."""
    r, lines = result, []
    n = len(r.cells)
    seeds = len(r.spec["eval_seeds"])
    adv = r.advantage
    paper = _paper_cell(r)
    for target in TARGETS:
        if target not in set(adv["target"]):
            continue
        for setting in SETTINGS:
            v = _verdicts(r, target, setting)
            rows = adv[(adv["target"] == target) & (adv["setting"] == setting)]
            if rows.empty:
                continue
            what = SETTING_TEXT[setting].format(budget=r.spec.get("evidence_budget"))
            o = r.overall[(r.overall["target"] == target) & (r.overall["setting"] == setting)].iloc[0]
            text = (
                f"**{method_label(target)} ({what}) against the best simple baseline ({what})**, "
                f"{n} cells, {seeds} evaluation seeds, the baseline picked on the tuning seeds: wins in "
                f"{len(v['wins'])}, matches in {len(v['matches'])}, loses in {len(v['loses'])} "
                f"(Holm-corrected sign-flip p < {ALPHA}); mean difference "
                f"{interval(o['diff'], o['low'], o['high'], signed=True)} (range "
                f"{number(rows['diff'].min(), signed=True)} to {number(rows['diff'].max(), signed=True)})."
            )
            if v["wins"]:
                text += f" Wins: {_cells_text(r, v['wins'])}."
            if v["loses"]:
                best = rows[rows["verdict"] == "loses"]["best"].value_counts()
                text += (
                    f" Loses: {_cells_text(r, v['loses'])}; the rule that beats it there: "
                    + ", ".join(f"{method_label(m)} ({k})" for m, k in best.items())
                    + "."
                )
            lines.append(text)
    if paper is not None:
        at = adv[(adv["cell"] == paper) & (adv["setting"] == "tuned")]
        for row in at.itertuples():
            lines.append(
                "At the paper's point (no noise, no random reversals), tuned: "
                f"{method_label(row.target)} minus {method_label(row.best)} is "
                f"{interval(row.diff, row.low, row.high, signed=True)} "
                f"(Holm p {pvalue(row.p_holm)}: {row.verdict})."
            )
    for setting in SETTINGS:
        won = r.winners[r.winners["setting"] == setting]["winner"].value_counts()
        if len(won):
            what = SETTING_TEXT[setting].format(budget=r.spec.get("evidence_budget"))
            lines.append(
                f"**Winner per cell** ({what}, non-oracle): "
                + ", ".join(f"{method_label(m)} {k}" for m, k in won.items())
                + f" of {n} cells."
            )
    lines += _why(r)
    lines += _cost(r)
    lines += _hypothesis_text(r)
    return [f"- {line}" for line in lines]


def _curve(
    result: MapResult, method: str, setting: str, column: str = "success"
) -> list[tuple[float, float]]:
    s = result.success[(result.success["setting"] == setting) & (result.success["method"] == method)]
    out = []
    for i, c in enumerate(result.cells):
        if "env.noise" in c and all(v == 0 for k, v in c.items() if k != "env.noise"):
            row = s[s["cell"] == i]
            if len(row):
                out.append((c["env.noise"], float(row.iloc[0][column])))
    return out


def _why(result: MapResult) -> list[str]:
    """Revocations and the tuning gain of TEPA-Rev along noise at no random reversals."""
    lines = []
    by_rule = {
        rule: (_curve(result, "tepa_rev", "defaults", f"revoked.{rule}"),
               _curve(result, "tepa_rev", "defaults", f"revoked_good.{rule}"))
        for rule in RULES
    }  # fmt: skip
    if len(by_rule[RULES[0]][0]) > 1:
        parts = []
        for rule, (all_, good) in by_rule.items():
            parts.append(
                f"the {rule} rule revokes "
                + ", ".join(f"{a:.1f} ({g:.1f} good)" for (_, a), (_, g) in zip(all_, good, strict=True))
            )
        noise = ", ".join(f"{x:g}" for x, _ in by_rule[RULES[0]][0])
        lines.append(
            "**Why, along noise (no random reversals)**: per stream, TEPA-Rev at its defaults at noise "
            f"{noise}: "
            + "; ".join(parts)
            + " precedents (good: the precedent's action was right at that episode, i.e. a misreported "
            "failure revoked it)."
        )
    tuned = dict(_curve(result, "tepa_rev", "tuned"))
    default = dict(_curve(result, "tepa_rev", "defaults"))
    chosen = result.success[(result.success["setting"] == "tuned") & (result.success["method"] == "tepa_rev")]
    params = {int(r.cell): r.params for r in chosen.itertuples()}
    if tuned and default and "tepa_rev" in result.spec["tune"]:
        cells = {c["env.noise"]: i for i, c in enumerate(result.cells)
                 if all(v == 0 for k, v in c.items() if k != "env.noise")}  # fmt: skip
        lines.append(
            "Tuning TEPA-Rev's n_min / theta_rev / theta_rec per cell changes its success by "
            + ", ".join(
                f"{number(tuned[x] - default[x], signed=True)} at noise {x:g} "
                f"({params.get(cells[x]) or 'defaults'})"
                for x in sorted(tuned)
                if x in default
            )
            + "."
        )
    return lines


def _cost(result: MapResult) -> list[str]:
    tuned = result.success[(result.success["setting"] == "tuned") & ~result.success["method"].isin(ORACLES)]
    median = tuned.groupby("method")["tokens"].median()
    dominated = (
        result.frontier.assign(dom=result.frontier["dominated_by"] != "").groupby("method")["dom"].sum()
    )
    n = len(result.cells)
    lines = [
        "**Cost** (median prompt tokens per decision over the cells, tuned): "
        + ", ".join(f"{method_label(m)} {median[m]:.0f}" for m in sorted_methods(median.index))
        + ". Dominated (another method at least as good for at most its tokens) in: "
        + ", ".join(
            f"{method_label(m)} {int(dominated.get(m, 0))}/{n}" for m in sorted_methods(dominated.index)
        )
        + " cells."
    ]
    counts = _budget_counts(result.budget)
    parts = []
    for budget in BUDGETS:
        won = {m: k for (b, m), k in counts.items() if b == budget}
        if won:
            parts.append(
                f"{_budget_text(budget)} tokens: "
                + ", ".join(f"{method_label(m)} {k}" for m, k in sorted(won.items(), key=lambda x: -x[1]))
            )
    lines.append("**Under an equal prompt budget** (cells won): " + "; ".join(parts) + ".")
    return lines


def _hypothesis_text(result: MapResult) -> list[str]:
    h = result.hypothesis
    if h.empty:
        return []
    all_near = h.groupby("noise")["near"].all()
    levels = [x for x, ok in all_near.items() if ok]
    per_noise = "; ".join(
        f"noise {x:g}: " + ", ".join(f"{method_label(r.method)} {r.ours:.3f}" for r in g.itertuples())
        for x, g in h.groupby("noise")
    )
    answer = (
        f"yes, at noise {', '.join(f'{x:g}' for x in levels)}"
        if levels
        else f"no: at no noise level of the map are all four within {NEAR} of the paper"
    )
    source = f"experiment {h['experiment'].iloc[0]}, {h['phase_length'].iloc[0]}-episode phases"
    return [
        "**The paper's full-reversal numbers under noise** (hypothesis, defaults, no random reversals, "
        f"{source}; the paper: "
        + ", ".join(f"{method_label(m)} {v:.3f}" for m, v in PAPER_FULL_REVERSAL.items())
        + f"): {answer}. Ours after the full reversal: {per_noise}."
    ]


def readme(result: MapResult, figures_written: list[str]) -> str:
    """results/map/README.md: the summary, then every table and figure."""
    parts = [
        "# Robustness map: when does revocation pay?\n",
        f"Generated by `make map` from the runs of experiment `{result.spec['experiment']}` "
        f"({len(result.cells)} cells: "
        + " x ".join(
            f"{k.removeprefix('env.')} {', '.join(f'{v:g}' for v in vals)}"
            for k, vals in result.spec["axes"].items()
        )
        + f"; tuning seeds {result.spec['tuning_seeds']}, evaluation seeds {result.spec['eval_seeds']}). "
        "Terms as defined in `analysis/report/map.py`.\n",
        "## Findings\n",
        *summary(result),
        "",
        "## Figures\n",
        *(f"![{name}](figures/{name})" for name in figures_written),
        "",
        "## Tables\n",
        *(f"- [{t.title}](tables/{t.name}.md)" for t in tables(result)),
        "",
    ]
    return "\n".join(parts)
