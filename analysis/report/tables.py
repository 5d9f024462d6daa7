"""Tables of our results beside the paper's, written as markdown, CSV and LaTeX.

Each table keeps two views: `data`, raw numbers in long form for the CSV (machines), and `rows`, the
formatted cells for markdown and LaTeX (people). Formatting is fixed (decimals, "n/a", sorted rows) and
nothing depends on time or dict order, so regenerating from the same logs is byte-identical.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from analysis.metrics.compute import NO_MEMORY, ORACLE_RESET, OVERALL, TEPA_REV, Analysis
from analysis.metrics.display import env_label, method_label, settings, sorted_experiments
from analysis.reference import paper, scorecard
from analysis.report.titles import config_title
from analysis.stats import EXACT_MAX_PAIRS, MIN_BOOTSTRAP_SEEDS, MIN_SIGN_FLIP_SEEDS, N_RESAMPLES
from analysis.streamlog.atomic import SHARED, atomic_write_bytes

SUFFIXES = (".md", ".csv", ".tex")
SCORECARD = "scorecard"
MISSING = "n/a"


@dataclass(frozen=True)
class Table:
    """One output table. The first `labels` columns are row labels (left-aligned), the rest values."""

    name: str
    title: str
    columns: list[str]
    rows: list[list[str]]
    data: pd.DataFrame
    labels: int = 2
    note: str = ""
    sources: list[str] = field(default_factory=list)
    #: The experiment whose runs alone it is computed from ("" when several or none).
    experiment: str = ""


# ----------------------------------------------------------------------------------------- formatting


def number(x: float, digits: int = 3, *, signed: bool = False) -> str:
    """Fixed-decimal text; "n/a" for NaN, "inf" for infinities, never "-0.000"."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return MISSING
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    value = round(float(x), digits) + 0.0
    return f"{value:+.{digits}f}" if signed and value != 0 else f"{value:.{digits}f}"


def interval(
    mean: float, low: float, high: float, digits: int = 3, *, signed: bool = False, n: int | None = None
) -> str:
    """Text "mean [low, high]"; just the mean when the interval is undefined (one seed) or a point
    (all seeds agree), where brackets would only repeat it. Given the number of seeds `n`, a mean over
    fewer than MIN_BOOTSTRAP_SEEDS says so in the cell: its interval is withheld."""
    text = number(mean, digits, signed=signed)
    if text != MISSING and n is not None and not _missing(n) and int(n) < MIN_BOOTSTRAP_SEEDS:
        return f"{text} {few_seeds(int(n))}"
    if text == MISSING or math.isnan(low) or math.isnan(high) or low == high:
        return text
    return f"{text} [{number(low, digits)}, {number(high, digits)}]"


def few_seeds(n: int) -> str:
    """The flag of a statistic withheld for its sample size (`analysis.stats.MIN_BOOTSTRAP_SEEDS`)."""
    return f"(n={n}, no CI)"


def pvalue(p: float) -> str:
    """p-values to three decimals, "<0.001" below that."""
    if math.isnan(p):
        return MISSING
    return "<0.001" if p < 0.001 else number(p, 3)


def _p_is(p: float) -> str:
    """A p-value for sentences: "p = 0.002", and two significant digits below 0.001 ("p = 1.9e-06")."""
    return f"p = {p:.1e}" if 0 < p < 0.001 else f"p = {pvalue(p)}"


def reference(value: paper.PaperNumber | None, digits: int = 3) -> str:
    """A paper number, "~"-prefixed when the paper gives it only approximately."""
    if value is None:
        return ""
    return ("~" if value.approximate else "") + number(value.value, digits)


_BREAKS = re.compile(r"[\x00-\x1f\x7f\x85\u2028\u2029]+")
_TAG = re.compile(r"<(?=[A-Za-z/!?])")
# what could still make a link of text shown as typed: a `](` or `][` closing link text, the `://` and
# `www.` of a bare URL (GitHub links those in plain text), and a backslash that would undo an escape
_LINK = re.compile(r"\\|\](?=[(\[])|:(?=//)|(?i:(?<=\bwww)\.)")


def plain(text: str, *, links: bool = False) -> str:
    """One line of inert text for markdown: line breaks and control characters become a space, the `<`
    that would open an HTML tag or an autolink is escaped, and so is what would make a markdown link or
    a bare URL live (`[click](https://example.com)` is shown as typed and links nowhere), so that no
    label or phase name read from a log adds lines, markup, HTML or links to a table or the README.
    `links=True` keeps markdown links (value cells: the scorecard's evidence links are ours)."""
    text = _TAG.sub("&lt;", _BREAKS.sub(" ", text))
    return text if links else _LINK.sub(lambda m: "\\" + m.group(), text)


def markdown_table(columns: Sequence[str], rows: Sequence[Sequence[str]], labels: int) -> str:
    """A GitHub pipe table: label columns left-aligned, value columns right-aligned."""

    def line(cells: Sequence[str], names: int) -> str:
        # headers (phase names among them) and label cells hold names; value cells may hold our links
        escaped = (plain(c, links=i >= names).replace("|", "\\|") for i, c in enumerate(cells))
        return "| " + " | ".join(escaped) + " |"

    rule = ["---" if i < labels else "--:" for i in range(len(columns))]
    head = line(columns, len(columns))
    return "\n".join([head, "|" + "|".join(rule) + "|", *(line(r, labels) for r in rows)]) + "\n"


def to_markdown(table: Table) -> str:
    """The table with its title and note, as a standalone markdown file."""
    parts = [f"### {plain(table.title)}\n", markdown_table(table.columns, table.rows, table.labels)]
    if table.note:
        parts.append(plain(table.note) + "\n")
    return "\n".join(parts)


def publish_table(frame: pd.DataFrame, text: str, out: Path, name: str) -> None:
    """Write a diagnostic table as `out/tables/<name>.csv` and `.md` (`text`), and append `text` to
    `out/README.md` when there is one (a model's generated report gains the section)."""
    (out / "tables").mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(
        out / "tables" / f"{name}.csv", frame.to_csv(index=False).encode(), durable=False, mode=SHARED
    )
    atomic_write_bytes(out / "tables" / f"{name}.md", text.encode(), durable=False, mode=SHARED)
    readme = out / "README.md"
    if readme.is_file():
        appended = readme.read_text(encoding="utf-8").rstrip("\n") + "\n\n" + text
        atomic_write_bytes(readme, appended.encode(), mode=SHARED)


_LATEX_ESCAPES = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"$\sim$",
    "^": r"\textasciicircum{}",
    "<": r"$<$",
    ">": r"$>$",
}


def latex_escape(text: str) -> str:
    """Escape LaTeX specials so any label or cell compiles as plain text (on one line)."""
    return "".join(_LATEX_ESCAPES.get(ch, ch) for ch in _BREAKS.sub(" ", text))


def to_latex(table: Table) -> str:
    """A booktabs table environment with caption and label."""
    spec = "l" * table.labels + "r" * (len(table.columns) - table.labels)
    lines = [
        r"\begin{table}[t]",
        r"\centering",
        r"\small",
        rf"\caption{{{latex_escape(table.title)}}}",
        rf"\label{{tab:{table.name}}}",
        rf"\begin{{tabular}}{{{spec}}}",
        r"\toprule",
        " & ".join(latex_escape(c) for c in table.columns) + r" \\",
        r"\midrule",
        *(" & ".join(latex_escape(c) for c in row) + r" \\" for row in table.rows),
        r"\bottomrule",
        r"\end{tabular}",
        r"\end{table}",
    ]
    return "\n".join(lines) + "\n"


def write_tables(
    tables: Sequence[Table], directory: str | Path, removable: Collection[str] | None = None
) -> list[Path]:
    """Write every table as .md, .csv and .tex. Earlier outputs of tables no longer made are removed
    when `removable` (table names) lists them, or all of them when it is None."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for table in tables:
        base = directory / table.name
        csv = table.data.to_csv(index=False, float_format="%.6g", lineterminator="\n")
        markdown = one_level_down(to_markdown(table))
        for suffix, text in ((".md", markdown), (".tex", to_latex(table)), (".csv", csv)):
            atomic_write_bytes(base.with_suffix(suffix), text.encode(), durable=False, mode=SHARED)
        written += [base.with_suffix(s) for s in SUFFIXES]
    for stale in sorted(p for p in directory.iterdir() if p.suffix in SUFFIXES and p not in written):
        if removable is None or stale.stem in removable:
            stale.unlink()
    return written


_RELATIVE_LINK = re.compile(r"\]\((?![a-z][a-z0-9+.-]*:|/)([^)\s]*)")


def one_level_down(markdown: str) -> str:
    """A table's markdown with its links (written for the page of `out`, where it is embedded) made to
    resolve from `out/tables/`, where its own file lives: `(sensitivity.md)` becomes `(../sensitivity.md)`,
    `(#runs)` `(../README.md#runs)`."""

    def rebase(link: re.Match) -> str:
        return f"](../{'README.md' if link[1].startswith('#') else ''}{link[1]}"

    return _RELATIVE_LINK.sub(rebase, markdown)


# ------------------------------------------------------------------------------------------- helpers


def _of(frame: pd.DataFrame, **where: str) -> pd.DataFrame:
    if frame.empty:
        return frame
    mask = pd.Series(True, index=frame.index)
    for column, value in where.items():
        mask &= frame[column] == value
    return frame[mask]


def _keyed(frame: pd.DataFrame, *keys: str) -> dict[tuple, dict]:
    """Rows as dicts keyed by the values of `keys`, for cell lookups (a mask per cell is slow)."""
    return {tuple(r[k] for k in keys): r for r in frame.to_dict("records")} if len(frame) else {}


def _phase_columns(analysis: Analysis, experiment: str, pairs: list[tuple[str, str]]) -> list[str]:
    """The experiment's phases in stream order (union over its envs), then OVERALL if there are two+."""
    columns: list[str] = []
    for setting in pairs:
        columns += [p for p in analysis.phases.get(setting, []) if p not in columns]
    return columns + [OVERALL] if len(columns) > 1 else columns


def _wide(
    analysis: Analysis, estimates: pd.DataFrame, experiment: str, skip: str = ""
) -> tuple[list[str], list[list[str]]]:
    """Setting x method rows with one "mean [CI]" cell per phase."""
    pairs = [s for s in settings(estimates) if s[0] == experiment]
    phases = _phase_columns(analysis, experiment, pairs)
    keyed = _keyed(estimates, "experiment", "env", "memory", "phase")
    rows = []
    for setting in pairs:
        of_setting = _of(estimates, experiment=setting[0], env=setting[1])
        for method in dict.fromkeys(of_setting["memory"]):
            if method == skip:
                continue
            cells = []
            for phase in phases:
                row = keyed.get((*setting, method, phase))
                cells.append(
                    MISSING if row is None else interval(row["mean"], row["low"], row["high"], n=row["n"])
                )
            rows.append([env_label(setting[1]), method_label(method), *cells])
    return ["Setting", "Method", *phases], rows


def _seeds_note(frame: pd.DataFrame, intervals: str = "seeds") -> str:
    counts = sorted(set(int(n) for n in frame["n"])) if "n" in frame and len(frame) else []
    seeds = "/".join(str(c) for c in counts) if counts else "0"
    over = (
        "95% two-level percentile bootstrap CI: seeds, then episodes within each drawn seed"
        if intervals == "seeds+episodes"
        else "95% bootstrap CI over seeds"
    )
    few = (
        f" (n=k, no CI): fewer than {MIN_BOOTSTRAP_SEEDS} seeds, too few for a bootstrap interval."
        if counts and counts[0] < MIN_BOOTSTRAP_SEEDS
        else ""
    )
    return f"Mean over seeds ({seeds} seeds per cell) [{over}; omitted when all seeds agree].{few}"


# --------------------------------------------------------------------------------------- paper tables


def _paper_rows(
    analysis: Analysis, experiment: str, env: str, phase: str, *, with_mpi: bool
) -> tuple[list[list[str]], list[dict]]:
    """Our success (and MPI) for each method of one cell of a paper table, beside the paper's."""
    mpis = _keyed(_of(analysis.mpi, experiment=experiment, env=env, phase=phase), "memory")
    rows, data = [], []
    for _, row in _of(analysis.success, experiment=experiment, env=env, phase=phase).iterrows():
        method = row["memory"]
        ref = paper.lookup(experiment, env, phase, method)
        diff = row["mean"] - ref.value if ref else float("nan")
        cells = [
            env_label(env),
            method_label(method),
            interval(row["mean"], row["low"], row["high"], n=row["n"]),
            reference(ref),
            number(diff, signed=True) if ref else "",
        ]
        record = {"experiment": experiment, "env": env, "phase": phase, "memory": method, "n": row["n"]}
        record |= {"mean": row["mean"], "low": row["low"], "high": row["high"]}
        record |= {
            "paper": ref.value if ref else float("nan"),
            "paper_approximate": bool(ref and ref.approximate),
        }
        record |= {"diff": diff}
        if with_mpi:
            mpi = mpis.get((method,))
            mpi_ref = paper.lookup(experiment, env, phase, method, "mpi")
            cells.append("" if mpi is None else interval(mpi["mean"], mpi["low"], mpi["high"], n=mpi["n"]))
            cells.append(reference(mpi_ref, 2))
            nan = float("nan")
            record |= {
                "mpi": mpi["mean"] if mpi is not None else nan,
                "mpi_low": mpi["low"] if mpi is not None else nan,
                "mpi_high": mpi["high"] if mpi is not None else nan,
                "mpi_paper": mpi_ref.value if mpi_ref else nan,
            }
        rows.append(cells)
        data.append(record)
    return rows, data


_PAPER_COLUMNS = ["Setting", "Method", "Success (ours)", "Success (paper)", "Ours - paper"]
_PAPER_NOTE = "Paper: the TEPA paper's reported value (~ = approximate); Ours - paper uses our mean."


def _paper_table(
    analysis: Analysis, name: str, title: str, cells: list[tuple[str, str, str]], note: str = ""
) -> Table | None:
    """Ours beside the paper's for each (experiment, env, phase) cell; MPI columns when reported."""
    with_mpi = any(n.metric == "mpi" and (n.experiment, n.env, n.phase) in cells for n in paper.PAPER_NUMBERS)
    rows, data = [], []
    for experiment, env, phase in cells:
        r, d = _paper_rows(analysis, experiment, env, phase, with_mpi=with_mpi)
        rows += r
        data += d
    if not rows:
        return None
    frame = pd.DataFrame(data)
    title = _variant_title(analysis, title, [c[0] for c in cells])
    columns = _PAPER_COLUMNS + (["MPI (ours)", "MPI (paper)"] if with_mpi else [])
    text = " ".join(p for p in (_seeds_note(frame, analysis.intervals), _PAPER_NOTE, note) if p)
    return Table(name, title, columns, rows, frame, note=text)


def _variant_title(analysis: Analysis, title: str, experiments: list[str]) -> str:
    """A paper table's title, naming the configuration variants of its experiments' runs if any."""
    named = [
        config_title(e, analysis.variants) for e in dict.fromkeys(experiments) if analysis.variants.get(e)
    ]
    return f"{title}: {'; '.join(named)}" if named else title


def _gain_note(analysis: Analysis, experiment: str, env: str) -> str:
    """Our TEPA-Rev - Append-Only at full reversal beside the paper's ~0.74, p < 0.001."""
    ref = paper.lookup(experiment, env, "full_reversal", TEPA_REV, "diff", "append_only")
    matches = _of(analysis.paired, experiment=experiment, env=env, phase="full_reversal", other="append_only")
    if ref is None or matches.empty:
        return ""
    ours = matches.iloc[0]
    return (
        f"{env_label(env)}: TEPA-Rev - Append-Only = "
        f"{interval(ours['diff'], ours['diff_low'], ours['diff_high'], signed=True, n=ours['n'])}, "
        f"exact sign-flip {_p_is(ours['p'])} (Holm {pvalue(ours['p_holm'])}), "
        f"paired bootstrap {_p_is(ours['p_boot'])} (Holm {pvalue(ours['p_boot_holm'])}), "
        f"n = {int(ours['n'])} seeds; paper {reference(ref, 2)}, {ref.note}."
    )


def paper_tables(analysis: Analysis) -> list[Table]:
    """The paper's tables: drift at full reversal, preference stream overall, MemoryAgentBench."""
    drift = [("paper_controlled", "controlled_drift"), ("paper_executable", "executable_drift")]
    tables = [
        _paper_table(
            analysis,
            "paper_drift",
            "Drift settings, full reversal: success and MPI, ours vs the paper",
            [(e, v, "full_reversal") for e, v in drift],
            " ".join(filter(None, (_gain_note(analysis, e, v) for e, v in drift))),
        ),
        _paper_table(
            analysis,
            "paper_preference",
            "Preference stream, overall success: ours vs the paper",
            [("paper_preference", "preference_stream", OVERALL)],
        ),
        _mab_table(analysis),
    ]
    return [t for t in tables if t is not None]


def _mab_table(analysis: Analysis) -> Table | None:
    """Per source: our methods beside the paper's, then published systems on that source."""
    experiment = "paper_memoryagentbench"
    rows, data = [], []
    for env in [v for e, v in settings(analysis.success) if e == experiment]:
        r, d = _paper_rows(analysis, experiment, env, "questions", with_mpi=False)
        published = [n for n in paper.PUBLISHED_SYSTEMS if n.env == env]
        rows += r + [[env_label(env), f"{n.method} [published]", "", reference(n), ""] for n in published]
        data += d + [
            {"experiment": n.experiment, "env": n.env, "phase": n.phase, "memory": n.method, "paper": n.value}
            for n in published
        ]
    if not rows:
        return None
    frame = pd.DataFrame(data)
    note = " ".join(
        (
            _seeds_note(frame.dropna(subset=["n"]), analysis.intervals),
            _PAPER_NOTE,
            f"Rows marked [published] are other systems as published in {paper.MAB_PAPER}, for context.",
        )
    )
    title = _variant_title(
        analysis, "MemoryAgentBench FactConsolidation, per source: ours vs the paper", [experiment]
    )
    return Table("paper_memoryagentbench", title, _PAPER_COLUMNS, rows, frame, note=note)


def reference_table() -> Table:
    """Every published number used, with its source, so readers can tell them from ours."""
    numbers = (*paper.PAPER_NUMBERS, *paper.PUBLISHED_SYSTEMS)
    rows = [
        [
            n.experiment,
            env_label(n.env),
            n.phase,
            method_label(n.method) + (f" - {method_label(n.other)}" if n.other else ""),
            n.metric,
            reference(n),
            n.note,
            "TEPA paper" if n.source == paper.TEPA_PAPER else "MemoryAgentBench paper",
        ]
        for n in numbers
    ]
    columns = ["Experiment", "Setting", "Phase", "Method", "Metric", "Value", "Note", "Source"]
    note = f"TEPA paper: {paper.TEPA_PAPER}. MemoryAgentBench paper: {paper.MAB_PAPER}."
    return Table(
        "paper_numbers",
        "Published numbers used as references",
        columns,
        rows,
        paper.paper_frame(numbers),
        labels=5,
        note=note,
    )


#: The verdicts whose cell says how far off our number is.
_OFF = (scorecard.DIRECTION, scorecard.NOT_REPRODUCED)


def gap(record: dict) -> float:
    """Ours - the paper's for a graded number (success, MPI, difference); NaN for others."""
    if record["metric"] not in ("success", "mpi", "diff") or _missing(record.get("ours")):
        return math.nan
    return float(record["ours"]) - float(record["paper"]) if not _missing(record.get("paper")) else math.nan


def verdict_text(record: dict) -> str:
    """The verdict with its size where it falls short: "direction only (+0.57 off)"."""
    off = gap(record)
    if record["verdict"] in _OFF and not math.isnan(off):
        return f"{record['verdict']} ({number(off, 2, signed=True)} off)"
    return str(record["verdict"])


def scorecard_table(analysis: Analysis, root: Path | None = None) -> Table:
    """Every number the paper reports: ours, the paper's, the verdict (with how far off), and why when
    it differs; then, with the results folder `root`, the robustness map's conclusions beyond the paper.
    Which runs each row comes from is the page's to say (`analysis.report.readme`): the table files stay
    what a full analysis of all the runs writes, whatever was kept."""
    data = scorecard.scorecard(analysis)
    if root is not None:
        data = pd.concat([data, scorecard.beyond_the_paper(root)], ignore_index=True)
    data = data.assign(gap=[gap(r) for r in data.to_dict("records")])
    rows = []
    for r in data.to_dict("records"):
        if r["metric"] in ("map_gap", "map_winner"):
            ours, theirs = r["summary"] or MISSING, "not in the paper"
        elif r["metric"] == "p":
            ours = (
                f"sign-flip {pvalue(r['p_sign_flip'])}, bootstrap {pvalue(r['p_bootstrap'])}"
                if "p_sign_flip" in r and not _missing(r["p_sign_flip"])
                else MISSING
            )
            theirs = f"< {r['paper']:g}"
        else:
            digits = 2 if r["metric"] == "mpi" else 3
            signed = r["metric"] == "diff"
            ours = (
                MISSING
                if _missing(r.get("ours"))
                else interval(r["ours"], r["low"], r["high"], signed=signed, n=r.get("n"))
            )
            theirs = ("~" if r["paper_approximate"] else "") + number(r["paper"], digits, signed=signed)
        link = f"[evidence]({r['evidence']})" if r["evidence"] else ""
        why = f"{r['reason']} ({link})" if r["reason"] and link else r["reason"] or link
        cells = [env_label(r["env"]), r["phase"], scorecard.describe(r), verdict_text(r), ours, theirs]
        rows.append([*cells, _memory_figures(r), why])
    verdicts = data["verdict"].value_counts()
    optional = (scorecard.VARIANT, scorecard.BEYOND)
    shown = [v for v in (*scorecard.VERDICTS, scorecard.BEYOND) if v not in optional or verdicts.get(v, 0)]
    counts = ", ".join(f"{int(verdicts.get(v, 0))} {v}" for v in shown)
    variant = (
        " Variant: our runs of the cell are not the paper experiment's configuration (the keys that "
        f"differ are named) or have fewer than {MIN_BOOTSTRAP_SEEDS} seeds; they are not graded."
        if verdicts.get(scorecard.VARIANT, 0)
        else ""
    )
    note = (
        f"{len(data)} rows: {counts}. The verdict of a number that falls short says how far off ours is "
        "(ours - the paper's). Reproduced: the paper's value inside our 95% interval or within "
        f"{scorecard.TOLERANCE:g} of our mean; direction only: the same sign (MPI, differences) and the "
        "same ordering against the other methods the paper reports in the cell (success); a p-value "
        "claim is reproduced when both our exact sign-flip and paired bootstrap p meet it."
        f"{variant} Intervals as in the tables below; the same scorecard is in tables/scorecard.csv."
    )
    if (data["metric"].isin(["map_gap", "map_winner"])).any():
        note += (
            " Rows of the robustness map (`make map`) are beyond the paper, which has no such number: "
            "TEPA against the best simple baseline of each cell, picked on the tuning seeds and compared "
            "on the evaluation seeds (wins / loses: Holm-corrected sign-flip p < 0.05), the mean gap over "
            "the cells with its interval over the evaluation seeds; not run until the map has run."
        )
    note += (
        " Memory: the method's stale share of retrieved lines and pollution index in the same cell, "
        "from the logged evidence alone (no reader; see the memory-quality section)."
    )
    columns = [
        "Setting",
        "Phase",
        "Number",
        "Verdict",
        "Ours [95% CI]",
        "Paper",
        "Memory",
        "Why not (evidence)",
    ]
    return Table(SCORECARD, "Reproduction scorecard", columns, rows, data, labels=4, note=note)


def _memory_figures(record: dict) -> str:
    """The memory-level figures beside a success row of the scorecard ("" for other rows)."""
    if record["metric"] != "success":
        return ""
    share, pollution = record.get("stale_share"), record.get("pollution")
    if _missing(share) and _missing(pollution):
        return MISSING
    return f"stale {number(share, 2)}, pollution {number(pollution, 2)}"


def _missing(x: object) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def _supported(n: int, text: str) -> str:
    """`text`, or the reason it is withheld: a bootstrap p or d_z over fewer than MIN_BOOTSTRAP_SEEDS."""
    return text if int(n) >= MIN_BOOTSTRAP_SEEDS else f"{MISSING} (n={int(n)} < {MIN_BOOTSTRAP_SEEDS})"


# ---------------------------------------------------------------------------------- per experiment


def success_table(analysis: Analysis, experiment: str) -> Table | None:
    """Success per phase (and overall) for every method of one experiment."""
    data = _of(analysis.success, experiment=experiment)
    if data.empty:
        return None
    columns, rows = _wide(analysis, analysis.success, experiment)
    return Table(
        f"success_{experiment}",
        f"{config_title(experiment, analysis.variants)}: success per phase",
        columns,
        rows,
        data.reset_index(drop=True),
        note=_seeds_note(data, analysis.intervals),
    )


def mpi_table(analysis: Analysis, experiment: str) -> Table | None:
    """MPI per phase for every method against No Memory on matched seeds."""
    data = _of(analysis.mpi, experiment=experiment)
    if data.empty:
        return None
    columns, rows = _wide(analysis, analysis.mpi, experiment, skip=NO_MEMORY)
    note = (
        "MPI = (S_NoMem - S_m) / S_NoMem over seed-matched means; > 0: memory made the agent worse than "
        "no memory. " + _seeds_note(data)
    )
    return Table(
        f"mpi_{experiment}",
        f"{config_title(experiment, analysis.variants)}: memory pollution index (MPI) per phase",
        columns,
        rows,
        data.reset_index(drop=True),
        note=note,
    )


def paired_table(analysis: Analysis, experiment: str) -> Table | None:
    """TEPA-Rev against every other method: difference, CI, p, Holm p, d_z, beside the paper."""
    data = _of(analysis.paired, experiment=experiment)
    if data.empty:
        return None
    rows = []
    for _, r in data.iterrows():
        ref = paper.lookup(r["experiment"], r["env"], r["phase"], r["memory"], "diff", r["other"])
        rows.append(
            [
                env_label(r["env"]),
                r["phase"],
                f"{method_label(r['memory'])} - {method_label(r['other'])}",
                str(int(r["n"])),
                interval(r["diff"], r["diff_low"], r["diff_high"], signed=True, n=r["n"]),
                pvalue(r["p"]),
                pvalue(r["p_holm"]),
                *(_supported(r["n"], text) for text in (pvalue(r["p_boot"]), pvalue(r["p_boot_holm"]))),
                _supported(r["n"], number(r["d_z"], 2)),
                f"{reference(ref, 2)}, {ref.note}" if ref else "",
            ]
        )
    columns = [
        "Setting",
        "Phase",
        "Comparison",
        "n",
        "Diff [95% CI]",
        "p (sign-flip)",
        "Holm p (sign-flip)",
        "p (bootstrap)",
        "Holm p (bootstrap)",
        "d_z",
        "Paper",
    ]
    note = (
        "Paired on matched seeds: mean success difference with paired bootstrap CI; two two-sided tests "
        f"of a zero mean difference: the sign-flip permutation p (exact up to {EXACT_MAX_PAIRS} seeds, "
        f"smallest p 2 / 2^n: with fewer than {MIN_SIGN_FLIP_SEEDS} seeds p < 0.05 is impossible) and the "
        f"paired bootstrap p (the seeds' differences centred on 0 to impose the null, {N_RESAMPLES} "
        f"resamples, p = (1 + hits) / ({N_RESAMPLES} + 1), smallest {pvalue(1 / (N_RESAMPLES + 1))}); Holm "
        "correction of each across the comparisons of a setting and phase; Cohen's d_z. With fewer than "
        f"{MIN_BOOTSTRAP_SEEDS} seeds the bootstrap interval and p and d_z are withheld (n/a): n seeds give "
        "only C(2n-1, n) distinct resamples, and the bootstrap p would fall below what an exact test on n "
        "seeds can reach."
    )
    return Table(
        f"paired_{experiment}",
        f"{config_title(experiment, analysis.variants)}: paired tests, TEPA-Rev vs each method",
        columns,
        rows,
        data.reset_index(drop=True),
        labels=3,
        note=note,
    )


def adaptation_table(analysis: Analysis, experiment: str) -> Table | None:
    """Episodes to recover after each phase boundary, and the difference to Oracle Reset."""
    data = _of(analysis.adaptation, experiment=experiment)
    if data.empty:
        return None
    rows = [
        [
            env_label(r["env"]),
            r["phase"],
            method_label(r["memory"]),
            interval(r["mean"], r["low"], r["high"], 1, n=r["n"]),
            f"{int(r['n_recovered'])}/{int(r['n_runs'])}",
            ""
            if r["memory"] == ORACLE_RESET
            else interval(r["diff_mean"], r["diff_low"], r["diff_high"], 1, signed=True, n=r["diff_n"]),
        ]
        for _, r in data.iterrows()
    ]
    columns = ["Setting", "Phase entered", "Method", "Lag (episodes)", "Recovered", "Lag - Oracle Reset"]
    level = "the run's own" if analysis.reference is None else f"{method_label(analysis.reference)}'s"
    note = (
        f"Lag: episodes after the boundary before the first window of {analysis.window} episodes "
        f"whose success is within {analysis.tolerance:g} of {level} stable level (mean success over the "
        f"last {analysis.window} episodes of the first phase, same seed). Mean [95% CI] over the seeds "
        "that recovered; Recovered: seeds that did / all seeds. Lag - Oracle Reset: paired over seeds "
        "where both recovered."
    )
    return Table(
        f"adaptation_{experiment}",
        f"{config_title(experiment, analysis.variants)}: adaptation after phase boundaries",
        columns,
        rows,
        data.reset_index(drop=True),
        labels=3,
        note=note,
    )


_COSTS = (
    ("prompt_tokens", "Prompt tokens / episode", 1),
    ("promotions", "Promotions / run", 1),
    ("revocations", "Revocations / run", 1),
    ("repromotions", "Re-promotions / run", 1),
    ("trials", "Trials / run", 1),
    ("trials_per_promotion", "Trials / promotion", 2),
)


def cost_table(analysis: Analysis, experiment: str) -> Table | None:
    """Prompt size, lifecycle events (from the archive) and TEPA-Full's trial cost per method."""
    data = _of(analysis.cost_summary, experiment=experiment)
    if data.empty:
        return None
    keyed = _keyed(data, "env", "memory", "metric")
    rows = []
    for setting in [s for s in settings(data) if s[0] == experiment]:
        of_setting = _of(data, experiment=setting[0], env=setting[1])
        for method in dict.fromkeys(of_setting["memory"]):
            cells = []
            for metric, _, digits in _COSTS:
                r = keyed.get((setting[1], method, metric))
                cells.append(
                    MISSING if r is None else interval(r["mean"], r["low"], r["high"], digits, n=r["n"])
                )
            rows.append([env_label(setting[1]), method_label(method), *cells])
    columns = ["Setting", "Method", *(label for _, label, _ in _COSTS)]
    note = (
        "Mean per run [95% CI over seeds; omitted when all seeds agree]. Lifecycle counts come "
        "from archive.jsonl; trials are trial executions (TEPA-Full); trials / promotion counts "
        "promotions and re-promotions."
    )
    return Table(
        f"cost_{experiment}",
        f"{config_title(experiment, analysis.variants)}: prompt size, lifecycle and trial cost",
        columns,
        rows,
        data.reset_index(drop=True),
        note=note,
    )


def sweep_table(analysis: Analysis, experiment: str) -> Table | None:
    """Success per phase (and overall) of every swept configuration of one experiment (a column per
    swept key)."""
    data = _of(analysis.sweep, experiment=experiment)
    if data.empty:
        return None
    names = [p.rsplit(".", 1)[-1] for p in analysis.sweep_params.get(experiment, [])]
    pairs = [s for s in settings(data) if s[0] == experiment]
    phases = _phase_columns(analysis, experiment, pairs)
    keyed = _keyed(data, "env", "memory", *names, "phase")
    rows = []
    points = data.drop_duplicates(["env", "memory", *names])
    for r in points.to_dict("records"):
        cells, counts = [], set()
        for phase in phases:
            cell = keyed.get((r["env"], r["memory"], *(r[n] for n in names), phase))
            cells.append(
                MISSING if cell is None else interval(cell["mean"], cell["low"], cell["high"], n=cell["n"])
            )
            counts |= {int(cell["n"])} if cell is not None else set()
        point = [f"{r[n]:g}" for n in names]
        seeds = "/".join(str(c) for c in sorted(counts))
        rows.append([env_label(r["env"]), method_label(r["memory"]), *point, *cells, seeds])
    columns = ["Setting", "Method", *names, *phases, "n"]
    return Table(
        f"sweep_{experiment}",
        f"{experiment}: success per phase of every swept configuration",
        columns,
        rows,
        data.reset_index(drop=True),
        labels=2 + len(names),
        note=_seeds_note(data, analysis.intervals),
    )


def build_tables(analysis: Analysis, root: Path | None = None) -> list[Table]:
    """Every table, in report order: the scorecard (with the robustness map's rows from the results
    folder `root`), paper tables, per-experiment tables, the sweep, the references."""
    tables = [scorecard_table(analysis, root), *paper_tables(analysis)]
    experiments = sorted_experiments(analysis.success["experiment"]) if len(analysis.success) else []
    for experiment in experiments:
        for make in (success_table, mpi_table, paired_table, adaptation_table, cost_table):
            table = make(analysis, experiment)
            if table is not None:
                tables.append(table)
    swept = sorted_experiments(analysis.sweep["experiment"]) if len(analysis.sweep) else []
    tables += [t for t in (sweep_table(analysis, e) for e in swept) if t is not None]
    tables.append(reference_table())
    return tables
