"""The summary results/README.md opens with: a few lines computed from the tables, never written around
a number by hand.

Each line is a template filled from the scorecard and the analysis' frames, and each states a finding
only as the numbers have it: the verdict counts and the largest gaps; whether the best simple forgetting
rule of each paper setting matches or beats TEPA-Rev, or loses to it; the robustness map's cells; what
TEPA-Rev's prompts cost beside that rule's; why TEPA-Full equals TEPA-Rev where it does; and links to
every page. A line whose numbers are absent is left out.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import pandas as pd

from analysis.metrics.compute import OVERALL, TEPA_REV, Analysis
from analysis.metrics.display import env_label, method_label, settings, sorted_experiments
from analysis.reference import paper, scorecard
from analysis.report import trials
from analysis.report.tables import SCORECARD, Table, _keyed, _of, number, pvalue

#: The simple forgetting rules TEPA is held against (no oracle, no TEPA variant, no keep-everything).
SIMPLE_RULES = ("lww", "sliding_window", "reactive")
#: A difference counts as TEPA-Rev beating a rule only at this Holm-corrected sign-flip p.
ALPHA = 0.05
#: How many of the largest gaps the summary names.
GAPS = 3
_GRADED = (scorecard.REPRODUCED, scorecard.DIRECTION, scorecard.NOT_REPRODUCED)


def _card(tables: Sequence[Table]) -> pd.DataFrame:
    card = next((t for t in tables if t.name == SCORECARD), None)
    return card.data if card is not None else pd.DataFrame()


def verdict_line(card: pd.DataFrame) -> str | None:
    """The verdict counts, then the largest gaps of the numbers that fall short."""
    graded = card[card["verdict"].isin(_GRADED)] if len(card) else card
    if graded.empty:
        return None
    counts = graded["verdict"].value_counts()
    text = (
        f"**What reproduces:** of {len(graded)} graded paper numbers, {counts.get(scorecard.REPRODUCED, 0)} "
        f"reproduce, {counts.get(scorecard.DIRECTION, 0)} match in direction only and "
        f"{counts.get(scorecard.NOT_REPRODUCED, 0)} do not"
    )
    others = [f"{int(n)} {v}" for v, n in card["verdict"].value_counts().items() if v not in _GRADED]
    text += f" (plus {', '.join(others)})" if others else ""
    short = graded[graded["verdict"].isin((scorecard.DIRECTION, scorecard.NOT_REPRODUCED))]
    short = short[short["gap"].notna()] if "gap" in short else short.iloc[:0]
    if len(short):
        largest = short.assign(size=short["gap"].abs()).sort_values("size", ascending=False, kind="stable")
        named = [
            f"{scorecard.describe(r)} on {env_label(r['env'])}, {number(r['ours'])} against the paper's "
            f"{number(r['paper'])} ({number(r['gap'], 2, signed=True)})"
            for r in largest.head(GAPS).to_dict("records")
        ]
        text += "; the largest gaps: " + "; ".join(named)
    return text + " ([scorecard](#reproduction-scorecard))."


def drift_streams(analysis: Analysis) -> list[tuple[str, str]]:
    """The paper's drift streams that ran: settings of the paper's experiments (those with a paper
    number) whose stream has phases, i.e. where a memory has something to forget."""
    experiments = {n.experiment for n in paper.PAPER_NUMBERS}
    ran = settings(analysis.success) if len(analysis.success) else []
    return [s for s in ran if s[0] in experiments and len(analysis.phases.get(s, [])) > 1]


def best_rules(analysis: Analysis) -> list[dict]:
    """Per drift stream of the paper with TEPA-Rev and a simple rule: the rule with the highest success
    over the whole stream, its and TEPA-Rev's success, the paired difference and its Holm p, and whether
    the rule matches or beats TEPA-Rev (TEPA-Rev not ahead at Holm p < ALPHA)."""
    found = []
    for setting in drift_streams(analysis):
        phase = OVERALL
        success = _keyed(_of(analysis.success, experiment=setting[0], env=setting[1], phase=phase), "memory")
        rules = {m: success[(m,)]["mean"] for m in SIMPLE_RULES if (m,) in success}
        if (TEPA_REV,) not in success or not rules:
            continue
        rule = max(rules, key=lambda m: (rules[m], m))
        paired = _keyed(
            _of(analysis.paired, experiment=setting[0], env=setting[1], phase=phase, memory=TEPA_REV), "other"
        ).get((rule,))
        tepa = success[(TEPA_REV,)]["mean"]
        p = float(paired["p_holm"]) if paired is not None else math.nan
        ahead = tepa > rules[rule] and not math.isnan(p) and p < ALPHA
        found.append(
            {"experiment": setting[0], "env": setting[1], "phase": phase, "rule": rule}
            | {"rule_mean": rules[rule], "tepa": tepa, "diff": tepa - rules[rule], "p": p, "ahead": ahead}
        )
    return found


def rule_line(found: list[dict]) -> str | None:
    """Whether the best simple forgetting rule of each paper setting matches or beats TEPA-Rev."""
    if not found:
        return None
    matched = [f for f in found if not f["ahead"]]
    cells = "; ".join(
        f"{env_label(f['env'])} {method_label(f['rule'])} {number(f['rule_mean'])} against "
        f"{number(f['tepa'])}" + (f" (paired Holm p {pvalue(f['p'])})" if not math.isnan(f["p"]) else "")
        for f in found
    )
    n = len(found)
    if len(matched) == n:
        verdict = (
            f"a simple forgetting rule matches or beats TEPA-Rev in all {n} of the paper's drift streams"
        )
    elif not matched:
        verdict = f"TEPA-Rev beats the best simple forgetting rule in all {n} of the paper's drift streams"
    else:
        verdict = (
            f"a simple forgetting rule matches or beats TEPA-Rev in {len(matched)} of the paper's {n} "
            f"drift streams and loses to it in {n - len(matched)}"
        )
    return (
        f"**TEPA against simple rules:** {verdict} (success over the whole stream, the best of "
        f"{', '.join(method_label(m) for m in SIMPLE_RULES)} against TEPA-Rev: {cells})."
    )


def map_line(card: pd.DataFrame) -> str | None:
    """The robustness map's tuned comparisons: in how many cells TEPA wins, matches, loses."""
    rows = card[(card["metric"] == "map_gap") & (card["verdict"] == scorecard.BEYOND)] if len(card) else card
    rows = rows[rows["phase"] == "tuned"] if len(rows) else rows
    if rows.empty:
        return None
    parts = []
    for r in rows.to_dict("records"):
        cells, wins, loses = int(r["cells"]), int(r["wins"]), int(r["loses"])
        if loses == cells:
            how = f"loses to the best tuned simple rule in all {cells} cells"
        elif wins == cells:
            how = f"beats the best tuned simple rule in all {cells} cells"
        else:
            how = f"wins {wins}, matches {cells - wins - loses} and loses {loses} of {cells} cells"
        gap = f"{number(r['ours'], signed=True)} [{number(r['low'])}, {number(r['high'])}]"
        parts.append(f"tuned {method_label(r['method'])} {how} (mean gap {gap})")
    return (
        "**Beyond the paper's settings** (the robustness map, noise x reversal rate; the parameters and "
        f"the best simple rule picked on tuning seeds, compared on others): {'; '.join(parts)} "
        "([map](map/README.md))."
    )


def cost_line(analysis: Analysis, found: list[dict], card: pd.DataFrame) -> str | None:
    """TEPA-Rev's prompt tokens per episode beside those of the rule of `rule_line`, per setting; and
    the map's winners under a tight prompt budget."""
    costs = _keyed(analysis.cost_summary, "experiment", "env", "memory", "metric")
    pairs = []
    for f in found:
        tepa = costs.get((f["experiment"], f["env"], TEPA_REV, "prompt_tokens"), {}).get("mean", math.nan)
        rule = costs.get((f["experiment"], f["env"], f["rule"], "prompt_tokens"), {}).get("mean", math.nan)
        if not math.isnan(tepa + rule) and tepa > 0:
            pairs.append((f, tepa, rule))
    if not pairs:
        return None
    smaller = [p for p in pairs if p[1] < p[2]]
    cells = "; ".join(
        f"{env_label(f['env'])} {number(t, 0)} against {method_label(f['rule'])}'s {number(r, 0)}"
        for f, t, r in pairs
    )
    how = "smaller than that rule's in"
    if len(smaller) == len(pairs):
        lead = f"**TEPA-Rev's edge is prompt cost:** its prompts are {how} all {len(pairs)}"
    else:
        lead = f"**Prompt cost:** TEPA-Rev's prompts are {how} {len(smaller)} of {len(pairs)}"
    text = f"{lead} streams (prompt tokens per episode, TEPA-Rev's against the rule's: {cells})"
    budget = card[card["metric"] == "map_winner"] if len(card) else card
    budget = budget[budget["verdict"] == scorecard.BEYOND] if len(budget) else budget
    if len(budget):
        text += f"; on the map, winners under a tight prompt budget: {budget.iloc[0]['summary']}"
    return text + "."


def trial_line(analysis: Analysis, page: Callable[[str], str]) -> str | None:
    """Where TEPA-Full equals TEPA-Rev, and where the page says why."""
    experiments = sorted_experiments(analysis.success["experiment"]) if len(analysis.success) else []
    found = [(e, env) for e in experiments for env in trials.identical_settings(analysis, e)]
    if not found:
        return None
    costs = _keyed(analysis.cost_summary, "experiment", "env", "memory", "metric")
    counts = [costs.get((e, env, trials.TEPA_FULL, "trials"), {}).get("mean", math.nan) for e, env in found]
    where = ", ".join(
        f"{env_label(env)} of {e} ({trials.count_text(n)} trials per run, [why]({page(e)}#{trials.ANCHOR}))"
        for (e, env), n in zip(found, counts, strict=True)
    )
    return f"**TEPA-Full scores exactly as TEPA-Rev** in every phase of {where}: its trials change nothing."


def summary_lines(tables: Sequence[Table], analysis: Analysis, page: Callable[[str], str]) -> list[str]:
    """The summary's lines (markdown list items); `page`: experiment -> its page's file name."""
    card = _card(tables)
    found = best_rules(analysis)
    lines = [
        verdict_line(card),
        rule_line(found),
        map_line(card),
        cost_line(analysis, found, card),
        trial_line(analysis, page),
    ]
    return [f"- {line}" for line in lines if line]
