"""Figures: success over time with phase boundaries, MPI per method and phase, threshold-sweep heatmaps,
and lifecycle timelines of TEPA-Rev against TEPA-NoRev in the drift settings.

Each figure is a job: a picklable call that renders one PNG in memory (a `Drawing`), so that another
process can draw it while the analysis computes, and only the caller writes files (`write_figures`),
once every input has been checked. The figures drawn from the logs alone (`log_jobs`) can start before
the metrics exist; the others need them (`metric_jobs`).

Matplotlib's object API on the Agg canvas (no pyplot, so no global state and no display needed),
imported by the first figure (`new_figure`): the report imports this module for its files and jobs, and
a process that draws nothing need not pay matplotlib's start-up. PNGs
are written without the "Software" metadata entry (the only version-dependent field), so the same logs
give byte-identical images with the same matplotlib. Each method keeps one colour across all figures.
"""

from __future__ import annotations

import importlib
import io
import textwrap
import zlib
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from analysis.data.load import experiment_variants, in_sweep
from analysis.metrics.compute import NO_MEMORY, ORACLE_RESET, OVERALL, TEPA_REV, Analysis, phase_orders
from analysis.metrics.display import (
    env_label,
    method_label,
    settings,
    sorted_experiments,
    sorted_methods,
)
from analysis.report.timeline import busiest_key, draw_timeline, legend_handles, read_lifecycle, read_phases
from analysis.report.titles import config_title
from analysis.streamlog.atomic import SHARED, atomic_write_bytes

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

#: Lifecycle timelines, one seed of one setting of every experiment where a memory logged lifecycle
#: events: revocation against the ablation without it where both ran, else every method that logged events.
TIMELINE_METHODS = (TEPA_REV, "tepa_norev")
TIMELINE_SEED = 0
#: The archive events a timeline draws (`analysis.report.timeline`): a memory logging any has a lifecycle.
LIFECYCLE_EVENTS = ("created", "promoted", "revoked", "repromoted")

PNG_METADATA = {"Software": None}
DPI = 110
#: A method's colour is fixed by its label, never by which other methods a figure shows or the registry
#: lists, so one method has one colour in every figure and adding a method recolours no other. The
#: methods of the committed results keep the colours they were drawn in: the built-ins (conf/memory, by
#: display rank), mem0 (no display entry) and the lifecycle ablation's variants (conf/lifecycle).
FIXED_COLORS = {
    "no_memory": "#7f7f7f",  # rank 10
    "append_only": "#d62728",  # 20
    "lww": "#ff7f0e",  # 30
    "sliding_window": "#8c564b",  # 40
    "reactive": "#e377c2",  # 50
    "oracle_reset": "#17becf",  # 60
    "tepa_rev": "#1f77b4",  # 70
    "tepa_full": "#2ca02c",  # 80
    "tepa_norev": "#9467bd",  # 90
    "tepa_rev_literal": "#aec7e8",  # 100
    "mem0": "#bcbd22",
    "tepa_rev-clear_recent_on_revoke=false": "#bcbd22",
    "tepa_rev-counts=lifetime": "#393b79",
    "tepa_rev-own_failure_new_epoch=false": "#637939",
    "tepa_rev-revoked_counts_conflicts=true": "#8c6d31",
    "tepa_rev-stale_feedback=active_only": "#843c39",
    "tepa_rev-stale_feedback=count": "#7b4173",
}
#: Any other method (a user's own, whatever its rank) gets one of these colours and line styles, chosen
#: by a stable hash of its label (CRC-32, the same in every process), not by its place among the others.
_EXTRA_COLORS = (
    "#ffbb78",
    "#98df8a",
    "#ff9896",
    "#c5b0d5",
    "#c49c94",
    "#f7b6d2",
    "#dbdb8d",
    "#9edae5",
    "#5254a3",
    "#8ca252",
    "#bd9e39",
    "#ad494a",
    "#a55194",
    "#6b6ecf",
    "#b5cf6b",
    "#e7ba52",
    "#d6616b",
    "#ce6dbd",
)
_EXTRA_STYLES = ("-", "-.")
_STYLES = {NO_MEMORY: ":", ORACLE_RESET: "--"}


#: The episode columns success over time reads (the rows a job carries to the drawing process).
_SUCCESS_COLUMNS = ["memory", "seed", "t", "phase", "success"]


@dataclass(frozen=True)
class FigureFile:
    """A written figure, with the title the report shows above it and the experiment it shows."""

    path: Path
    title: str
    experiment: str = ""


@dataclass(frozen=True)
class Drawing:
    """A figure rendered to PNG, not yet written: its file name, the report's title for it, the image,
    and the experiment whose runs it shows."""

    name: str
    title: str
    png: bytes
    experiment: str = ""


#: One figure to draw: a drawing function below with its data bound (a picklable partial); None when
#: there is nothing to draw.
Job = Callable[[], Drawing | None]


def _label_hash(method: str) -> int:
    return zlib.crc32(method.encode("utf-8"))


def method_color(method: str) -> str:
    """A method's colour: FIXED_COLORS', else one of _EXTRA_COLORS chosen by its label alone."""
    fixed = FIXED_COLORS.get(method)
    return fixed if fixed is not None else _EXTRA_COLORS[_label_hash(method) % len(_EXTRA_COLORS)]


def method_style(method: str) -> str:
    """A method's line style: dotted No Memory, dashed Oracle Reset, solid for the other fixed methods;
    any other method's chosen by its label alone (so two sharing a colour are still told apart)."""
    if method in _STYLES:
        return _STYLES[method]
    if method in FIXED_COLORS:
        return "-"
    return _EXTRA_STYLES[_label_hash(method) // len(_EXTRA_COLORS) % len(_EXTRA_STYLES)]


def method_colors(methods: Iterable[str]) -> dict[str, str]:
    """Method -> its colour (`method_color`): each method's own, whichever others are present."""
    return {m: method_color(m) for m in sorted_methods(methods)}


def seed_counts(rows: pd.DataFrame) -> tuple[str, dict[str, str]]:
    """How many seeds each method's curve averages (`rows`: episodes with `memory` and `seed`): the
    title's text ("20 seeds") and no legend suffixes when every method has the same number; else
    "5-20 seeds, per method in legend" and each method's " (n seeds)" for its legend entry."""
    counts = rows.groupby("memory")["seed"].nunique()
    low, high = int(counts.min()), int(counts.max())
    if low == high:
        return f"{high} seeds", {}
    return f"{low}-{high} seeds, per method in legend", {m: f" ({int(n)} seeds)" for m, n in counts.items()}


def set_title(ax: Axes, title: str, **options: float) -> None:
    """The axes' title, wrapped to the axes' width once the layout has placed them (call it last): a
    long title (an experiment's name and its variant) ran past the figure's left edge and was clipped."""
    text = ax.set_title(title, **options)
    figure = ax.get_figure()
    engine = figure.get_layout_engine()
    per_line = len(title)
    for _ in range(8):  # each pass lays the figure out again (the axes move as the title grows)
        if engine is not None:  # the layout alone: drawing it too, unrendered, cost a tenth of the figures
            engine.execute(figure)
        wide, room = text.get_window_extent().width, ax.get_window_extent().width
        if wide <= room or per_line <= 10:
            return
        per_line = max(10, min(per_line - 1, int(per_line * room / wide * 0.95)))
        text.set_text(textwrap.fill(title, per_line))


#: The matplotlib modules drawing imports (`new_figure`, `render`).
MATPLOTLIB = ("matplotlib.figure", "matplotlib.backends.backend_agg")


def import_matplotlib() -> None:
    """Import MATPLOTLIB ahead of the first figure (a drawing process does it while the logs load)."""
    for name in MATPLOTLIB:
        importlib.import_module(name)


def new_figure(**options: Any) -> Figure:
    """`matplotlib.figure.Figure(**options)`, matplotlib imported here (see the module docstring)."""
    from matplotlib.figure import Figure

    return Figure(**options)


def render(figure: Figure) -> bytes:
    """The figure as PNG bytes at DPI (the same bytes `save_figure` writes), laid out and drawn once by
    the canvas' draw: `savefig` also laid it out and drew it unrendered before drawing it, for the same
    bytes and 6-7% more CPU per figure."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(figure)
    figure.set_dpi(DPI)
    buffer = io.BytesIO()
    canvas.print_png(buffer, metadata=PNG_METADATA)
    return buffer.getvalue()


def save_figure(figure: Figure, path: Path) -> None:
    atomic_write_bytes(path, render(figure), durable=False, mode=SHARED)


def _phase_starts(rows: pd.DataFrame, phases: list[str]) -> list[tuple[str, int]]:
    first = rows.groupby("phase")["t"].min()
    return [(p, int(first[p])) for p in phases if p in first.index]


def success_curves(rows: pd.DataFrame, window: int) -> dict[str, tuple[pd.Series, str]]:
    """Method -> its rolling success (per seed, then the mean over seeds) and its legend label, in method
    order. A curve identical to an earlier method's would hide behind it: its label names that one."""
    curves: dict[str, tuple[pd.Series, str]] = {}
    drawn: dict[bytes, str] = {}  # each curve so far -> the first method that has it
    for method in sorted_methods(rows["memory"]):
        grid = rows[rows["memory"] == method].pivot(index="t", columns="seed", values="success").astype(float)
        rolling = grid.rolling(window, min_periods=1).mean().mean(axis=1)
        same = drawn.setdefault(rolling.index.to_numpy().tobytes() + rolling.to_numpy().tobytes(), method)
        hidden = "" if same == method else f" (same curve as {method_label(same)})"
        curves[method] = (rolling, method_label(method) + hidden)
    return curves


def shade_phases(ax: Any, rows: pd.DataFrame, phases: list[str]) -> int:
    """Shade every other phase of `rows` (episodes with `t` and `phase`), mark the boundaries and name
    the phases above the axes; returns the end of the stream (last t + 1)."""
    starts = _phase_starts(rows, phases)
    end = int(rows["t"].max()) + 1
    for i, (phase, start) in enumerate(starts):
        stop = starts[i + 1][1] if i + 1 < len(starts) else end
        ax.axvspan(start, stop, color="#000000", alpha=0.06 if i % 2 else 0.0, lw=0)
        if i:
            ax.axvline(start, color="#555555", lw=0.8, ls="-")
        ax.text(
            (start + stop) / 2,
            1.01,
            phase.replace("_", " "),
            transform=ax.get_xaxis_transform(),
            ha="center",
            va="bottom",
            fontsize=9,
        )
    return end


def success_over_time(
    rows: pd.DataFrame,
    phases: list[str],
    experiment: str,
    env: str,
    window: int,
    variants: Sequence[str] = (),
) -> Drawing:
    """Rolling success of each method (per seed, then averaged over seeds) with phases shaded; `rows`:
    the episodes of that experiment and env, `variants`: its runs' configuration variants (the title
    names them). A curve identical to an earlier one would hide behind it: its legend entry says so."""
    colors = method_colors(rows["memory"])
    figure = new_figure(figsize=(10, 4.2), layout="constrained")
    ax = figure.add_subplot()
    end = shade_phases(ax, rows, phases)
    curves = success_curves(rows, window)
    seeds, per_method = seed_counts(rows)
    for method, (rolling, label) in curves.items():
        ax.plot(
            rolling.index,
            rolling.to_numpy(),
            color=colors[method],
            ls=method_style(method),
            lw=1.4,
            label=label + per_method.get(method, ""),
        )
    ax.set_xlim(int(rows["t"].min()), end)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("episode t (stream position)")
    ax.set_ylabel(f"success, rolling mean of {window}")
    name = config_title(experiment, {experiment: list(variants)})
    title = f"{name} / {env_label(env)}: success over time (mean over {seeds})"
    figure.legend(loc="outside right upper", frameon=False, fontsize=9)
    set_title(ax, title, pad=22)
    return Drawing(f"success_over_time_{experiment}_{env}.png", title, render(figure), experiment)


def mpi_bars(
    mpi: pd.DataFrame, phases: dict[tuple[str, str], list[str]], experiment: str, variants: Sequence[str] = ()
) -> Drawing | None:
    """Grouped bars: MPI of each method in each phase (or source), with 95% CI error bars (`mpi`,
    `phases`: the Analysis' frame and phase orders; `variants` as in `success_over_time`). None when no
    MPI is defined (No Memory scored 0 everywhere): an empty chart says nothing."""
    data = mpi[mpi["experiment"] == experiment] if len(mpi) else mpi
    if data.empty or data["mean"].isna().all():
        return None
    pairs = [s for s in settings(data) if s[0] == experiment]
    groups = []
    for setting in pairs:
        of_setting = phases[setting] + ([OVERALL] if len(phases[setting]) > 1 else [])
        for phase in of_setting:
            name, source = phase.replace("_", " "), env_label(setting[1])
            label = name if len(pairs) == 1 else source if len(of_setting) == 1 else f"{source}\n{name}"
            groups.append((setting[1], phase, label))
    methods = sorted_methods(data["memory"])
    colors = method_colors(methods)
    width = 0.8 / len(methods)
    figure = new_figure(figsize=(max(7.0, 1.3 * len(groups) + 2), 4.2), layout="constrained")
    ax = figure.add_subplot()
    x = np.arange(len(groups))
    cells = {(r["env"], r["phase"], r["memory"]): r for r in data.to_dict("records")}
    missing = {"mean": np.nan, "low": np.nan, "high": np.nan}
    for i, method in enumerate(methods):
        found = [cells.get((env, phase, method), missing) for env, phase, _ in groups]
        values = np.array([r["mean"] for r in found])
        errors = np.nan_to_num(
            np.array([values - [r["low"] for r in found], [r["high"] for r in found] - values])
        )
        offset = (i - (len(methods) - 1) / 2) * width
        ax.bar(
            x + offset,
            values,
            width,
            yerr=errors,
            color=colors[method],
            label=method_label(method),
            capsize=2,
            error_kw={"lw": 0.8},
        )
    ax.axhline(0, color="#000000", lw=0.8)
    ax.set_xticks(x, [g[2] for g in groups])
    ax.set_ylabel("MPI = (S_NoMem - S_m) / S_NoMem")
    ax.set_xlabel("phase" if len(pairs) == 1 else "source / phase")
    name = config_title(experiment, {experiment: list(variants)})
    title = f"{name}: memory pollution index (> 0: worse than No Memory)"
    figure.legend(loc="outside right upper", frameon=False, fontsize=9)
    set_title(ax, title)  # once the legend has taken its room
    return Drawing(f"mpi_{experiment}.png", title, render(figure), experiment)


def sweep_heatmap(points: pd.DataFrame, names: list[str], experiment: str, env: str, method: str) -> Drawing:
    """Overall success of one swept (experiment, env, method) over the first two swept parameters (one
    row when a single key was swept); `points`: its overall rows of the Analysis' sweep frame, `names`:
    the swept parameters' short names. Further swept parameters, if any, are averaged over (the title
    says so).
    """
    x_name, y_name = names[0], names[1] if len(names) > 1 else None
    grid = points.assign(_one_row=0).pivot_table(
        index=y_name or "_one_row", columns=x_name, values="mean", aggfunc="mean"
    )
    figure = new_figure(figsize=(1.1 * grid.shape[1] + 3, 0.8 * grid.shape[0] + 2), layout="constrained")
    ax = figure.add_subplot()
    image = ax.imshow(grid.to_numpy(), origin="lower", cmap="viridis", vmin=0, vmax=1, aspect="auto")
    for (r, c), value in np.ndenumerate(grid.to_numpy()):
        if not np.isnan(value):
            ax.text(
                c,
                r,
                f"{value:.2f}",
                ha="center",
                va="center",
                fontsize=8,
                color="white" if value < 0.6 else "black",
            )
    ax.set_xticks(range(grid.shape[1]), [f"{v:g}" for v in grid.columns])
    ax.set_yticks(range(grid.shape[0]), [f"{v:g}" for v in grid.index] if y_name else [""])
    ax.set_xlabel(x_name)
    ax.set_ylabel(y_name or "")
    figure.colorbar(image, ax=ax, label="overall success (mean over seeds)")
    rest = f", averaged over {', '.join(names[2:])}" if len(names) > 2 else ""
    title = f"{experiment}: sweep of {', '.join(names[:2])}, {method_label(method)} on {env_label(env)}{rest}"
    set_title(ax, title)
    return Drawing(f"sweep_{experiment}_{env}_{method}.png", title, render(figure), experiment)


def lifecycle_timeline(
    run_dirs: dict[str, Path], experiment: str, env: str, variants: Sequence[str] = ()
) -> Drawing | None:
    """One key's precedents over time in each method's stream (`run_dirs`: method -> stream
    directory), one panel per method; the key is the busiest (`busiest_key`) of the first method that
    has one (TEPA-Rev where it ran)."""
    events = {method: read_lifecycle(d) for method, d in run_dirs.items()}
    key = next((k for k in map(busiest_key, events.values()) if k is not None), None)
    if key is None:
        return None
    figure = new_figure(figsize=(10, 1.2 + 1.6 * len(run_dirs)), layout="constrained")
    axes = figure.subplots(len(run_dirs), 1, sharex=True, squeeze=False)[:, 0]
    for ax, (method, run_dir) in zip(axes, run_dirs.items(), strict=True):
        phases, end = read_phases(run_dir)
        draw_timeline(ax, events[method], key, phases, end)
        ax.set_ylabel(method_label(method), fontsize=9)
    axes[-1].set_xlabel("episode t (stream position)")
    seed = TIMELINE_SEED
    named = config_title(experiment, {experiment: list(variants)})
    title = f"{named} / {env_label(env)}: precedents of key {key} over time (seed {seed}), by state"
    figure.suptitle(title, fontsize=10)
    figure.legend(handles=legend_handles(), loc="outside right upper", frameon=False, fontsize=9)
    return Drawing(f"lifecycle_{experiment}.png", title, render(figure), experiment)


def _timeline_runs(
    runs: pd.DataFrame, events: pd.DataFrame, root: Path
) -> dict[tuple[str, str], dict[str, Path]]:
    """Per setting, the stream directories at TIMELINE_SEED of the methods to draw: TIMELINE_METHODS
    where all of them logged lifecycle events, else every method that did (in method order)."""
    logged = set(events.loc[events["event"].isin(LIFECYCLE_EVENTS), "run"]) if len(events) else set()
    chosen = runs[(runs["seed"] == TIMELINE_SEED) & runs["run"].isin(logged)]
    found: dict[tuple[str, str], dict[str, Path]] = {}
    for experiment, env in settings(chosen):
        of_setting = chosen[(chosen["experiment"] == experiment) & (chosen["env"] == env)]
        run_of = dict(zip(of_setting["memory"], of_setting["run"], strict=True))
        methods = TIMELINE_METHODS if set(TIMELINE_METHODS) <= set(run_of) else sorted_methods(run_of)
        found[(experiment, env)] = {m: root / str(run_of[m]) for m in methods}
    return found


def success_jobs(episodes: pd.DataFrame, runs: pd.DataFrame, window: int) -> list[Job]:
    """Success over time of every setting, from the logs alone (`analysis.data.load.RunLogs`' episodes
    and runs). Only streams with phase boundaries: a single-phase stream (MemoryAgentBench's independent
    questions) has no drift to show over time; a sweep's grid points are drawn as heatmaps instead."""
    phases = phase_orders(episodes)
    swept = set(runs.loc[in_sweep(runs), "run"])
    variants = experiment_variants(runs[~runs["run"].isin(swept)])
    regular = episodes[~episodes["run"].isin(swept)] if swept else episodes
    jobs: list[Job] = []
    for experiment, env in settings(regular):
        if len(phases[(experiment, env)]) > 1:
            of_setting = (regular["experiment"] == experiment) & (regular["env"] == env)
            rows = regular.loc[of_setting, _SUCCESS_COLUMNS]
            named = variants.get(experiment, [])
            jobs.append(
                partial(success_over_time, rows, phases[(experiment, env)], experiment, env, window, named)
            )
    return jobs


def timeline_jobs(runs: pd.DataFrame, events: pd.DataFrame, root: str | Path) -> list[Job]:
    """A lifecycle timeline of every experiment outside the sweeps where a memory logged lifecycle
    events, in its first such setting (env order), read from the streams' logs under the run-log `root`
    (`analysis.data.load.RunLogs`' runs and events)."""
    regular = runs[~in_sweep(runs)]
    variants = experiment_variants(regular)
    jobs: list[Job] = []
    drawn: set[str] = set()
    for (experiment, env), run_dirs in _timeline_runs(regular, events, Path(root)).items():
        if experiment not in drawn:
            drawn.add(experiment)
            named = variants.get(experiment, [])
            jobs.append(partial(lifecycle_timeline, run_dirs, experiment, env, named))
    return jobs


def metric_jobs(analysis: Analysis) -> list[Job]:
    """The figures of computed metrics: MPI bars of every experiment, then the sweep heatmaps."""
    return mpi_jobs(analysis.mpi, analysis.phases, analysis.variants) + sweep_jobs(analysis)


def mpi_jobs(
    mpi: pd.DataFrame, phases: dict[tuple[str, str], list[str]], variants: dict[str, list[str]]
) -> list[Job]:
    """MPI bars of every experiment (the Analysis' `mpi`, `phases` and `variants`), which can be drawn
    before the other metrics exist (`analysis.metrics.compute.analyse`'s `mpi_ready`)."""
    experiments = sorted_experiments(mpi["experiment"]) if len(mpi) else []
    return [
        partial(
            mpi_bars, mpi[mpi["experiment"] == experiment], phases, experiment, variants.get(experiment, [])
        )
        for experiment in experiments
    ]


def sweep_jobs(analysis: Analysis) -> list[Job]:
    """The sweep heatmaps: one per swept (experiment, env, method)."""
    jobs: list[Job] = []
    overall = analysis.sweep[analysis.sweep["phase"] == OVERALL] if len(analysis.sweep) else analysis.sweep
    for experiment, env in settings(overall):
        params = analysis.sweep_params.get(experiment)
        if not params:
            continue
        names = [p.rsplit(".", 1)[-1] for p in params]
        of_env = overall[(overall["experiment"] == experiment) & (overall["env"] == env)]
        for method in dict.fromkeys(of_env["memory"]):
            points = of_env[of_env["memory"] == method]
            jobs.append(partial(sweep_heatmap, points, names, experiment, env, method))
    return jobs


#: Figure kinds in report order, by file-name prefix (others follow them).
FIGURE_KINDS = ("success_over_time_", "mpi_", "sweep_", "lifecycle_")


def report_order(figures: Iterable[FigureFile]) -> list[FigureFile]:
    """Figures in report order: by kind (FIGURE_KINDS), then experiment; in the given order otherwise
    (so figures kept from earlier runs fall into the place a full analysis gives them)."""

    def kind(figure: FigureFile) -> int:
        name = figure.path.name
        return next((i for i, p in enumerate(FIGURE_KINDS) if name.startswith(p)), len(FIGURE_KINDS))

    listed = list(figures)
    rank = {e: i for i, e in enumerate(sorted_experiments(f.experiment for f in listed))}
    return sorted(listed, key=lambda f: (kind(f), rank[f.experiment]))


def write_figures(
    drawings: Iterable[Drawing | None], directory: str | Path, removable: Collection[str] | None = None
) -> list[FigureFile]:
    """Write the drawings into `directory` in the given order. Earlier PNGs no longer made are removed
    when `removable` (file names) lists them, or all of them when it is None."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    files = []
    for drawing in drawings:
        if drawing is not None:
            path = directory / drawing.name
            atomic_write_bytes(path, drawing.png, durable=False, mode=SHARED)
            files.append(FigureFile(path, drawing.title, drawing.experiment))
    written = {f.path for f in files}
    for stale in sorted(p for p in directory.glob("*.png") if p not in written):
        if removable is None or stale.name in removable:
            stale.unlink()
    return files
