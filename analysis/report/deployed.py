"""The "Retrieval as deployed" section of results/README.md, from the tables in results/deployed/.

The deployed experiments (`deployed_*`, similarity retrieval instead of retrieval by key) have their own
report in `deployed/` beside the paper's (`python -m analysis --runs RUNS --out results/deployed`); this
section puts their overall success beside the keyed paper experiments of `tables/`, mem0's numbers, the
reader-free memory metrics of the runs that logged their evidence, and what they say about the paper's
claim that similarity retrieval keeps stale profiles active. Every number is read from those CSV tables.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from analysis.metrics.display import method_label, sorted_methods
from analysis.reference.paper import PAPER_NUMBERS
from analysis.report.tables import interval, markdown_table, number

FOLDER = "deployed"
MODES = ("bm25", "dense")
#: (setting label, env, keyed paper experiment, deployed experiment stem, the phase a drift is judged in)
SETTINGS = (
    ("preference stream", "preference_stream", "paper_preference", "preference", "drift"),
    ("controlled drift", "controlled_drift", "paper_controlled", "controlled", "full_reversal"),
)
#: The deployed experiments that run mem0 beside other methods on (shortened) streams of their own.
MEM0 = {"preference stream": "deployed_mem0_preference", "controlled drift": "deployed_mem0_controlled"}
#: Methods whose memory metrics are shown (No Memory retrieves nothing).
MEMORY_METHODS = ("append_only", "lww", "sliding_window", "tepa_rev", "tepa_full", "mem0")
#: Memory metrics shown (column of memory_*.csv, header).
MEMORY_COLUMNS = (
    ("stale_share", "stale share"),
    ("truth_present", "truth present"),
    ("pollution", "pollution index"),
)


def deployed_section(root: Path) -> list[str]:
    """The section's markdown parts, or none when `root`/deployed/ holds no report."""
    folder = root / FOLDER
    if not (folder / "README.md").is_file():
        return []
    success = _frames(folder / "tables", "success_deployed_")
    keyed = _frames(root / "tables", "success_paper_")
    if not success:
        return []
    parts = [
        "## Retrieval as deployed (similarity instead of the key)\n",
        "The paper's settings under `retrieval=bm25` and `retrieval=dense` (every method ranks all it keeps "
        "retrievable by similarity to the task's text, top 8, ignoring the key), beside retrieval by key "
        "(the paper experiments above); simulated reader, overall success, means over seeds "
        "[95% bootstrap CI]. Every table, figure and test of these runs: "
        "[deployed/README.md](deployed/README.md).\n",
    ]
    rows = _mode_rows(keyed, success)
    if rows:
        parts.append(markdown_table(["Setting", "Method", "keyed", "bm25", "dense", "Paper"], rows, labels=2))
    paragraph = _paragraph(keyed, success)
    if paragraph:
        parts.append(paragraph + "\n")
    mab = _mab_rows(keyed, success)
    if mab:
        parts += [
            "MemoryAgentBench FactConsolidation, success on its questions:\n",
            markdown_table(["Source", "Method", "keyed", "bm25", "dense"], mab, labels=2),
        ]
    parts += _mem0_parts(success)
    parts += _memory_parts(folder / "tables")
    return parts


def _frames(folder: Path, prefix: str) -> dict[str, pd.DataFrame]:
    """The CSV tables named `prefix`EXPERIMENT.csv in `folder`, by experiment."""
    if not folder.is_dir():
        return {}
    return {p.stem.removeprefix(prefix): pd.read_csv(p) for p in sorted(folder.glob(f"{prefix}*.csv"))}


def _cell(frame: pd.DataFrame | None, env: str, method: str, phase: str) -> pd.Series | None:
    if frame is None:
        return None
    found = frame[(frame["env"] == env) & (frame["memory"] == method) & (frame["phase"] == phase)]
    return None if found.empty else found.iloc[0]


def _mean(frame: pd.DataFrame | None, env: str, method: str, phase: str = "overall") -> float | None:
    row = _cell(frame, env, method, phase)
    return None if row is None else float(row["mean"])


def _text(row: pd.Series | None) -> str:
    return "" if row is None else interval(row["mean"], row["low"], row["high"], n=int(row["n"]))


def _paper(experiment: str, env: str, method: str) -> str:
    for p in PAPER_NUMBERS:
        if (p.experiment, p.env, p.phase, p.method, p.metric) == (
            experiment,
            env,
            "overall",
            method,
            "success",
        ):
            return number(p.value)
    return ""


def _mode_rows(keyed: dict[str, pd.DataFrame], success: dict[str, pd.DataFrame]) -> list[list[str]]:
    rows = []
    for label, env, paper, stem, _ in SETTINGS:
        frames = [keyed.get(paper.removeprefix("paper_")), *(success.get(f"{stem}_{m}") for m in MODES)]
        if all(f is None for f in frames[1:]):
            continue
        methods = sorted_methods(m for f in frames if f is not None for m in f["memory"])
        for i, method in enumerate(methods):
            cells = [_text(_cell(f, env, method, "overall")) for f in frames]
            rows.append([label if i == 0 else "", method_label(method), *cells, _paper(paper, env, method)])
    return rows


def _paragraph(keyed: dict[str, pd.DataFrame], success: dict[str, pd.DataFrame]) -> str:
    """Whether similarity retrieval brings Append-Only toward the paper's number on the preference
    stream, and what it does to LWW and TEPA, in numbers read from the tables."""
    env, paper = "preference_stream", "paper_preference"
    target = next(
        (
            p.value
            for p in PAPER_NUMBERS
            if (p.experiment, p.env, p.method, p.phase) == (paper, env, "append_only", "overall")
        ),
        None,
    )
    frames = {"keyed": keyed.get("preference"), **{m: success.get(f"preference_{m}") for m in MODES}}
    ao = {mode: _mean(f, env, "append_only") for mode, f in frames.items()}
    if target is None or ao["keyed"] is None or all(ao[m] is None for m in MODES):
        return ""
    moves = []
    for mode in MODES:
        if ao[mode] is None:
            continue
        shift = abs(ao["keyed"] - target) - abs(ao[mode] - target)
        way = "toward" if shift > 0 else "away from"
        moves.append(f"{mode} moves it {number(abs(shift))} {way} it ({number(ao[mode])})")
    nearest = min(v for v in ao.values() if v is not None)
    text = (
        "**Does similarity retrieval bring Append-Only toward the paper's "
        f"{number(target)} on the preference stream?** Keyed, Append-Only scores {number(ao['keyed'])} "
        "overall; " + " and ".join(moves) + ". The nearest it comes is "
        f"{number(nearest)}, still {number(nearest - target)} above the paper's number"
    )
    no_memory = _mean(frames["dense"], env, "no_memory")
    text += f" (No Memory: {number(no_memory)})." if no_memory is not None else "."
    others = []
    for method in ("lww", "tepa_rev", "tepa_full"):
        values = {mode: _mean(f, env, method) for mode, f in frames.items()}
        if any(v is None for v in values.values()):
            continue
        below = [m for m in MODES if no_memory is not None and values[m] < no_memory]
        others.append(
            f"{method_label(method)} {number(values['keyed'])} keyed, "
            + ", ".join(f"{number(values[m])} under {m}" for m in MODES)
            + (f" (below No Memory under {' and '.join(below)})" if below else "")
        )
    if others:
        text += " LWW and TEPA: " + "; ".join(others) + "."
    return text


def _mab_rows(keyed: dict[str, pd.DataFrame], success: dict[str, pd.DataFrame]) -> list[list[str]]:
    frames = [keyed.get("memoryagentbench"), *(success.get(f"memoryagentbench_{m}") for m in MODES)]
    if all(f is None for f in frames[1:]):
        return []
    envs = sorted({e for f in frames[1:] if f is not None for e in f["env"]}, key=_source_order)
    rows = []
    for env in envs:
        methods = sorted_methods(m for f in frames[1:] if f is not None for m in f[f["env"] == env]["memory"])
        for i, method in enumerate(methods):
            cells = [
                number(v) if (v := _mean(f, env, method, "questions")) is not None else "" for f in frames
            ]
            rows.append(
                [env.removeprefix("memoryagentbench_") if i == 0 else "", method_label(method), *cells]
            )
    return rows


def _source_order(env: str) -> tuple[str, int]:
    """sh before mh, then by context length (6k, 32k, 262k)."""
    kind, _, size = env.removeprefix("memoryagentbench_").partition("_")
    return ({"sh": "0", "mh": "1"}.get(kind, kind), int(size.removesuffix("k") or 0))


def _mem0_parts(success: dict[str, pd.DataFrame]) -> list[str]:
    parts = []
    for label, experiment in MEM0.items():
        frame = success.get(experiment.removeprefix("deployed_"))
        if frame is None or "mem0" not in set(frame["memory"]):
            continue
        phases = list(dict.fromkeys(frame["phase"]))
        rows = [
            [method_label(m), *(_text(_cell(frame, frame["env"].iloc[0], m, p)) for p in phases)]
            for m in sorted_methods(frame["memory"])
        ]
        seeds = int(frame["n"].max())
        parts += [
            f"mem0 (`memory=mem0`, infer=false, offline) on the {label} under dense retrieval, beside other "
            f"methods on the same streams (`{experiment}`, {seeds} seeds; the streams are shortened to keep "
            "mem0's run time in bounds, so these numbers are not the full-stream ones above):\n",
            markdown_table(["Method", *phases], rows, labels=1),
        ]
    return parts


def _memory_parts(folder: Path) -> list[str]:
    """The reader-free memory metrics of the deployed runs that have them, in each setting's drift phase."""
    frames = _frames(folder, "memory_deployed_")
    rows = []
    for experiment, frame in frames.items():
        for label, env, _, _, phase in SETTINGS:
            part = frame[(frame["env"] == env) & (frame["phase"] == phase)]
            for method in sorted_methods(m for m in part["memory"] if m in MEMORY_METHODS):
                row = part[part["memory"] == method].iloc[0]
                if all(pd.isna(row[f"{c}_mean"]) for c, _ in MEMORY_COLUMNS):
                    continue
                cells = [
                    interval(row[f"{c}_mean"], row[f"{c}_low"], row[f"{c}_high"], 2, n=_seeds(row[f"{c}_n"]))
                    for c, _ in MEMORY_COLUMNS
                ]
                rows.append([f"deployed_{experiment}", f"{label}, {phase}", method_label(method), *cells])
    if not rows:
        return []
    return [
        "Memory quality without a reader (what the prompts held against the truth of the task's key, in each "
        "setting's drift phase; runs that logged their evidence). Under similarity retrieval a prompt also "
        "holds other keys' lines, and each is judged against the task's truth: another user's or slot's "
        "line whose value differs counts as stale.\n",
        markdown_table(["Experiment", "Setting", "Method", *(h for _, h in MEMORY_COLUMNS)], rows, labels=3),
    ]


def _seeds(n: float) -> int | None:
    return None if pd.isna(n) else int(n)
