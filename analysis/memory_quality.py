"""Memory quality from the log alone: how much of what each prompt held was current, and how much stale.

Every number here is computed from two columns of the episode log, `evidence` (the retrieved lines of
every hop) and `truth` (what the world held for that hop's key at the decision), and from nothing else:
not the reply, the action or the success. So they measure the memory itself, whatever reads it.

A retrieved line is *current* when its verdict agrees with the truth of its hop (VALID and its value is
the truth, or FAILED and its value is not) and *stale* otherwise. Hops whose truth is null (the
environment cannot tell) count no lines. Per episode:
- `current`, `stale`: the counts of such lines;
- `truth_present`: some VALID line asserts the truth;
- `stale_present`: some VALID line asserts a value other than the truth;
- `polluted`: at some hop, the VALID lines asserting another value outnumber those asserting the truth
  (a reader that follows the majority of its prompt's claims is pointed at a stale value).
The two rates and `polluted` are undefined (NaN) for an episode none of whose hops has a known truth;
every column is NaN for a run whose log has no sample (written before it existed) or whose environment
reports no truth (`truth` is ""), so nothing is ever guessed.

Per method and phase (and over the whole stream), means over seeds with 95% bootstrap CIs
(`analysis.stats.mean_cis`) of each run's: stale share (stale lines / retrieved lines, pooled over the
run's episodes), truth-present rate, stale-present rate, and the pollution index (the share of its
decisions that are `polluted`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np
import pandas as pd

from analysis.record import LABELS
from analysis.stats import mean_cis

#: The per-episode columns (NaN where unavailable).
EPISODE_COLUMNS = ("current", "stale", "truth_present", "stale_present", "polluted")
#: The per-run aggregates, in report order, with their labels.
METRICS = {
    "stale_share": "Stale share",
    "truth_present": "Truth present",
    "stale_present": "Stale present",
    "pollution": "Pollution index",
}
#: Why a run has no memory metrics (the loader's `sample` column of the runs frame), else LOGGED.
LOGGED, NOT_LOGGED, NO_TRUTH = "logged", "not logged", "no truth"

_NAN = float("nan")
_UNAVAILABLE = (_NAN,) * len(EPISODE_COLUMNS)


def is_stale(verdict: str, value: str, truth: str) -> bool:
    """The rule: a retrieved line is *current* when its verdict agrees with the truth of its hop (VALID
    and its value is the truth, or FAILED and its value is not), *stale* otherwise. The counts below are
    this rule summed over an episode's lines, computed from the logged text without parsing it."""
    return (verdict == "VALID") != (value == truth)


def _plain_truth(truth: str) -> str | None:
    """The value of a one-hop `truth` text that is a plain JSON string (no escapes), else None."""
    if truth.startswith('["') and truth.endswith('"]') and truth.count('"') == 2 and "\\" not in truth:
        return truth[2:-2]
    return None


#: Texts that begin with the same characters (a key's first retrieved line) are tried as extensions of
#: each other (`_fast_counts`), when longer than _EXTEND_FROM (shorter ones cost less to count anew).
_PREFIX = 32
_EXTEND_FROM = 512


def _count(text: str, value: str) -> tuple[int, ...]:
    """VALID verdicts, FAILED verdicts, quotes, "]", commas, VALID lines of `value`, FAILED lines of it."""
    return (
        text.count(',"VALID","'),
        text.count(',"FAILED","'),
        text.count('"'),
        text.count("]"),
        text.count(","),
        text.count(f',"VALID","{value}",'),
        text.count(f',"FAILED","{value}",'),
    )


def _fast_counts(
    evidence: str, value: str, earlier: dict[str, tuple[str, tuple[int, ...], str]] | None = None
) -> tuple[int, int, int, int] | None:
    """(VALID lines, VALID lines asserting `value`, FAILED lines, FAILED lines of `value`) of one hop's
    evidence, counted as substrings of the compact JSON the harness writes, for a `value` without
    quotes or escapes; None unless the text is certainly that one hop in that layout (then it is parsed).

    Certain, because without a backslash no string holds a quote, so every string is a verdict or a
    value: `,"VALID","` marks exactly the VALID verdicts (a value "VALID" is followed by a count, not a
    quote), the quote count checks that every line was counted, the comma count that each has five
    fields, and the count of "]" (one per line, one per hop, one around them, more if a value holds one)
    that there is one hop. This keeps reading Append-Only's long prompts cheap: a few passes of
    `str.count` instead of a JSON parse, and with `earlier` (the run's texts so far, by their first
    _PREFIX characters) only over what a text adds to an earlier one it extends line by line: counts
    add up exactly across a line boundary, where no pattern can straddle (it lies outside any string)."""
    if "\\" in evidence or not (evidence.startswith("[[[") or evidence == "[[]]"):
        return None
    if len(evidence) < _EXTEND_FROM:
        earlier = None
    known = earlier.get(evidence[:_PREFIX]) if earlier is not None else None
    if known is not None and len(known[0]) < len(evidence) and evidence.startswith(known[0]):
        body, counts, of = known
        if of != value:  # the truth changed since: recount the lines of this value over the whole text
            counts = (*counts[:5], *_count(body, value)[5:])
        counts = tuple(a + b for a, b in zip(counts, _count(evidence[len(body) :], value), strict=True))
    else:
        counts = _count(evidence, value)
    valid, failed, quotes, brackets, commas, valid_true, failed_true = counts
    lines = valid + failed
    if quotes != 4 * lines or brackets != lines + 2 or (lines and commas != 5 * lines - 1):
        return None  # four commas within each line, one between lines
    if earlier is not None and evidence.endswith(
        "]]]"
    ):  # the text without its closing "]]" is what a longer one extends
        earlier[evidence[:_PREFIX]] = (evidence[:-2], (*counts[:3], brackets - 2, *counts[4:]), value)
    return valid, valid_true, failed, failed_true


def _parsed_counts(hop: object, value: str) -> tuple[int, int, int, int]:
    """`_fast_counts` of one parsed hop (a list of lines); ValueError for a malformed one."""
    if not isinstance(hop, list):
        raise ValueError("evidence: a hop must be a list of lines")
    valid = valid_true = failed = failed_true = 0
    for line in hop:
        if not isinstance(line, list) or len(line) != 5 or line[1] not in ("VALID", "FAILED"):
            raise ValueError(
                f"evidence: a line must be [t, VALID|FAILED, value, support, conflict], got {line!r:.80}"
            )
        if line[1] == "VALID":
            valid += 1
            valid_true += line[2] == value
        else:
            failed += 1
            failed_true += line[2] == value
    return valid, valid_true, failed, failed_true


def _hop_counts(evidence: str, truth: str) -> list[tuple[int, int, int, int]]:
    """`_parsed_counts` of every hop whose truth is known, from the full JSON texts."""
    try:
        truths = json.loads(truth)
    except ValueError:
        raise ValueError("truth: not JSON") from None
    if not isinstance(truths, list) or not all(v is None or isinstance(v, str) for v in truths):
        raise ValueError("truth: must be a JSON list of strings or nulls, one per hop")
    try:
        hops = json.loads(evidence)
    except ValueError:
        raise ValueError("evidence: not JSON") from None
    if not isinstance(hops, list) or len(hops) != len(truths):
        raise ValueError(f"evidence: must be a JSON list with one entry per hop ({len(truths)}, as truth)")
    return [_parsed_counts(hop, value) for hop, value in zip(hops, truths, strict=True) if value is not None]


def episode_quality(
    evidence: str, truth: str, earlier: dict[str, tuple[str, tuple[int, ...], str]] | None = None
) -> tuple[float, ...]:
    """The EPISODE_COLUMNS of one episode from its `evidence` and `truth` texts (module docstring);
    all NaN when `truth` is "" (no truth reported). ValueError naming the column for malformed text.
    `earlier`: a dict kept across one run's episodes, which makes reading long prompts cheaper."""
    if not truth:
        return _UNAVAILABLE
    value = _plain_truth(truth)
    counts = _fast_counts(evidence, value, earlier) if value is not None else None
    per_hop = [counts] if counts is not None else _hop_counts(evidence, truth)
    if not per_hop:
        return (0.0, 0.0, _NAN, _NAN, _NAN)
    current = stale = 0
    truth_present = stale_present = polluted = False
    for valid, valid_true, failed, failed_true in per_hop:
        current += valid_true + failed - failed_true
        stale += valid - valid_true + failed_true
        truth_present |= valid_true > 0
        stale_present |= valid > valid_true
        polluted |= valid - valid_true > valid_true
    return (float(current), float(stale), float(truth_present), float(stale_present), float(polluted))


def episode_columns(
    n: int, evidence: Sequence[str | None] | None, truth: Sequence[str | None] | None
) -> dict[str, np.ndarray]:
    """EPISODE_COLUMNS of a run's `n` episodes as float arrays; all NaN when the log has no sample
    (either sequence None). A ValueError names the row (its position) and the column."""
    if evidence is None or truth is None:
        return {name: np.full(n, np.nan) for name in EPISODE_COLUMNS}
    rows, earlier, seen = [], {}, {}  # seen: a run repeats many (evidence, truth) pairs (an empty prompt)
    for i, pair in enumerate(zip(evidence, truth, strict=True)):
        row = seen.get(pair)
        if row is None:
            try:
                row = seen[pair] = episode_quality(pair[0] or "", pair[1] or "", earlier)
            except ValueError as exc:
                raise ValueError(f"row {i}: {exc}") from None
        rows.append(row)
    values = np.array(rows, dtype=float).reshape(len(rows), len(EPISODE_COLUMNS))
    return {name: values[:, j] for j, name in enumerate(EPISODE_COLUMNS)}


def sample_status(evidence: Sequence[str | None] | None, truth: Sequence[str | None] | None) -> str:
    """Whether a run's memory metrics can be computed: LOGGED, NOT_LOGGED (no sample columns) or NO_TRUTH
    (its environment reports none)."""
    if evidence is None or truth is None:
        return NOT_LOGGED
    return LOGGED if any(truth) else NO_TRUTH


def per_run(episodes: pd.DataFrame, overall: str) -> pd.DataFrame:
    """Each run's METRICS in each phase and over the whole stream (phase `overall`); NaN where undefined
    (no retrieved line, no decision with a known truth, no sample)."""
    keys = ["run", *LABELS, "seed"]
    frame = episodes[[*keys, "phase", *EPISODE_COLUMNS]].assign(lines=episodes["current"] + episodes["stale"])
    parts = []
    for by, phase in (([*keys, "phase"], None), (keys, overall)):
        grouped = frame.groupby(by, sort=False)
        sums = grouped[["stale", "lines"]].sum(min_count=1)
        means = grouped[["truth_present", "stale_present", "polluted"]].mean()
        part = pd.DataFrame(
            {
                "stale_share": sums["stale"] / sums["lines"].where(sums["lines"] > 0),
                "truth_present": means["truth_present"],
                "stale_present": means["stale_present"],
                "pollution": means["polluted"],
                "lines": sums["lines"],
            }
        ).reset_index()
        if phase is not None:
            part.insert(len(keys), "phase", phase)
        parts.append(part)
    return pd.concat(parts, ignore_index=True)


def summarize(episodes: pd.DataFrame, phases: dict[tuple[str, str], list[str]], overall: str) -> pd.DataFrame:
    """Means over seeds with 95% CIs of METRICS per (experiment, env, memory, phase): columns experiment,
    env, memory, phase, metric, mean, low, high, n (seeds with a value). Cells no seed defines are left
    out."""
    from analysis.metrics import settings, sorted_methods  # analysis.metrics imports this module

    columns = [*LABELS, "phase", "metric", "mean", "low", "high", "n"]
    if episodes.empty or episodes["current"].isna().all():
        return pd.DataFrame(columns=columns)
    runs = per_run(episodes, overall)
    cells, samples = [], []
    grouped = {
        k: g for k, g in runs.sort_values("seed", kind="stable").groupby([*LABELS, "phase"], sort=False)
    }
    for setting in settings(runs):
        methods = sorted_methods(
            runs.loc[(runs["experiment"] == setting[0]) & (runs["env"] == setting[1]), "memory"]
        )
        for method in methods:
            for phase in [*phases.get(setting, []), overall]:
                group = grouped.get((*setting, method, phase))
                if group is None:
                    continue
                for metric in METRICS:
                    values = group[metric].dropna().to_numpy(dtype=float)
                    if len(values):
                        cells.append(
                            {
                                "experiment": setting[0],
                                "env": setting[1],
                                "memory": method,
                                "phase": phase,
                                "metric": metric,
                            }
                        )
                        samples.append(values)
    estimates = mean_cis(samples) if samples else []
    records = [
        c | {"mean": e.mean, "low": e.low, "high": e.high, "n": e.n}
        for c, e in zip(cells, estimates, strict=True)
    ]
    return pd.DataFrame.from_records(records, columns=columns)


def lookup(memory: pd.DataFrame, experiment: str, env: str, phase: str, method: str) -> dict[str, float]:
    """The means of METRICS in one cell of `summarize`'s frame (NaN where it has none)."""
    found = dict.fromkeys(METRICS, float("nan"))
    if not memory.empty:
        cell = memory[
            (memory["experiment"] == experiment)
            & (memory["env"] == env)
            & (memory["phase"] == phase)
            & (memory["memory"] == method)
        ]
        found |= dict(zip(cell["metric"], cell["mean"].astype(float), strict=True))
    return found
