"""Figures: success over time with phase boundaries, MPI per method and phase, threshold-sweep heatmaps,
and lifecycle timelines of TEPA-Rev against TEPA-NoRev in the drift settings.

Each figure is a job: a picklable call that renders one PNG in memory (a `Drawing`), so that another
process can draw it while the analysis computes, and only the caller writes files (`write_figures`),
once every input has been checked. The figures drawn from the logs alone (`log_jobs`) can start before
the metrics exist; the others need them (`metric_jobs`).

Matplotlib's object API on the Agg canvas (no pyplot, so no global state and no display needed). PNGs
are written without the "Software" metadata entry (the only version-dependent field), so the same logs
give byte-identical images with the same matplotlib. Each method keeps one colour across all figures.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from analysis.data.load import in_sweep
from analysis.metrics import (
    METHOD_ORDER,
    NO_MEMORY,
    ORACLE_RESET,
    OVERALL,
    TEPA_REV,
    Analysis,
    env_label,
    method_label,
    phase_orders,
    settings,
    sorted_experiments,
    sorted_methods,
)
from analysis.report.timeline import busiest_key, draw_timeline, legend_handles, read_lifecycle, read_phases

#: Lifecycle timelines: the drift experiments, revocation against the ablation without it, one seed.
TIMELINES = (("paper_controlled", "controlled_drift"), ("paper_executable", "executable_drift"))
TIMELINE_METHODS = (TEPA_REV, "tepa_norev")
TIMELINE_SEED = 0

PNG_METADATA = {"Software": None}
DPI = 110
_COLORS = dict(
    zip(
        METHOD_ORDER,
        (
            "#7f7f7f",
            "#d62728",
            "#ff7f0e",
            "#8c564b",
            "#e377c2",
            "#17becf",
            "#1f77b4",
            "#2ca02c",
            "#9467bd",
            "#aec7e8",
        ),
        strict=False,  # a method ranked beyond these gets one of _EXTRA_COLORS
    )
)
_EXTRA_COLORS = ("#bcbd22", "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173")
_STYLES = {NO_MEMORY: ":", ORACLE_RESET: "--"}


#: The episode columns success over time reads (the rows a job carries to the drawing process).
_SUCCESS_COLUMNS = ["memory", "seed", "t", "phase", "success"]


@dataclass(frozen=True)
class FigureFile:
    """A written figure, with the title the report shows above it."""

    path: Path
    title: str


@dataclass(frozen=True)
class Drawing:
    """A figure rendered to PNG, not yet written: its file name, the report's title for it, the image."""

    name: str
    title: str
    png: bytes


#: One figure to draw: a drawing function below with its data bound (a picklable partial); None when
#: there is nothing to draw.
Job = Callable[[], Drawing | None]


def method_colors(methods: Iterable[str]) -> dict[str, str]:
    """A fixed colour per method: the built-in methods always get the same one; others follow in order."""
    extra = [m for m in sorted_methods(methods) if m not in _COLORS]
    return _COLORS | {m: _EXTRA_COLORS[i % len(_EXTRA_COLORS)] for i, m in enumerate(extra)}


def render(figure: Figure) -> bytes:
    """The figure as PNG bytes (the same bytes `save_figure` writes)."""
    FigureCanvasAgg(figure)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI, metadata=PNG_METADATA)
    return buffer.getvalue()


def save_figure(figure: Figure, path: Path) -> None:
    path.write_bytes(render(figure))


def _phase_starts(rows: pd.DataFrame, phases: list[str]) -> list[tuple[str, int]]:
    first = rows.groupby("phase")["t"].min()
    return [(p, int(first[p])) for p in phases if p in first.index]


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
    rows: pd.DataFrame, phases: list[str], experiment: str, env: str, window: int
) -> Drawing:
    """Rolling success of each method (per seed, then averaged over seeds) with phases shaded; `rows`:
    the episodes of that experiment and env."""
    colors = method_colors(rows["memory"])
    figure = Figure(figsize=(10, 4.2), layout="constrained")
    ax = figure.add_subplot()
    end = shade_phases(ax, rows, phases)
    n_seeds = 0
    for method in sorted_methods(rows["memory"]):
        grid = rows[rows["memory"] == method].pivot(index="t", columns="seed", values="success").astype(float)
        rolling = grid.rolling(window, min_periods=1).mean().mean(axis=1)
        n_seeds = max(n_seeds, grid.shape[1])
        ax.plot(
            rolling.index,
            rolling.to_numpy(),
            color=colors[method],
            ls=_STYLES.get(method, "-"),
            lw=1.4,
            label=method_label(method),
        )
    ax.set_xlim(int(rows["t"].min()), end)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("episode t (stream position)")
    ax.set_ylabel(f"success, rolling mean of {window}")
    title = f"{experiment} / {env_label(env)}: success over time (mean over {n_seeds} seeds)"
    ax.set_title(title, pad=22)
    figure.legend(loc="outside right upper", frameon=False, fontsize=9)
    return Drawing(f"success_over_time_{experiment}_{env}.png", title, render(figure))


def mpi_bars(mpi: pd.DataFrame, phases: dict[tuple[str, str], list[str]], experiment: str) -> Drawing | None:
    """Grouped bars: MPI of each method in each phase (or source), with 95% CI error bars (`mpi`,
    `phases`: the Analysis' frame and phase orders)."""
    data = mpi[mpi["experiment"] == experiment] if len(mpi) else mpi
    if data.empty:
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
    figure = Figure(figsize=(max(7.0, 1.3 * len(groups) + 2), 4.2), layout="constrained")
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
    title = f"{experiment}: memory pollution index (> 0: worse than No Memory)"
    ax.set_title(title)
    figure.legend(loc="outside right upper", frameon=False, fontsize=9)
    return Drawing(f"mpi_{experiment}.png", title, render(figure))


def sweep_heatmap(points: pd.DataFrame, names: list[str], env: str, method: str) -> Drawing:
    """Overall success of one swept (env, method) over the first two swept parameters (one row when a
    single key was swept); `points`: its rows of the Analysis' sweep frame, `names`: the swept
    parameters' short names. Further swept parameters, if any, are averaged over (the title says so).
    """
    x_name, y_name = names[0], names[1] if len(names) > 1 else None
    grid = points.assign(_one_row=0).pivot_table(
        index=y_name or "_one_row", columns=x_name, values="mean", aggfunc="mean"
    )
    figure = Figure(figsize=(1.1 * grid.shape[1] + 3, 0.8 * grid.shape[0] + 2), layout="constrained")
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
    title = f"Sweep of {', '.join(names[:2])}: {method_label(method)} on {env_label(env)}{rest}"
    ax.set_title(title)
    return Drawing(f"sweep_{env}_{method}.png", title, render(figure))


def lifecycle_timeline(run_dirs: dict[str, Path], experiment: str, env: str) -> Drawing | None:
    """One key's precedents over time in each method's stream (`run_dirs`: method -> stream
    directory), one panel per method; the key is TEPA-Rev's busiest (`busiest_key`)."""
    events = {method: read_lifecycle(d) for method, d in run_dirs.items()}
    key = busiest_key(events[TEPA_REV]) if TEPA_REV in events else None
    if key is None:
        return None
    figure = Figure(figsize=(10, 1.2 + 1.6 * len(run_dirs)), layout="constrained")
    axes = figure.subplots(len(run_dirs), 1, sharex=True, squeeze=False)[:, 0]
    for ax, (method, run_dir) in zip(axes, run_dirs.items(), strict=True):
        phases, end = read_phases(run_dir)
        draw_timeline(ax, events[method], key, phases, end)
        ax.set_ylabel(method_label(method), fontsize=9)
    axes[-1].set_xlabel("episode t (stream position)")
    seed = TIMELINE_SEED
    title = f"{experiment} / {env_label(env)}: precedents of key {key} over time (seed {seed}), by state"
    figure.suptitle(title, fontsize=10)
    figure.legend(handles=legend_handles(), loc="outside right upper", frameon=False, fontsize=9)
    return Drawing(f"lifecycle_{experiment}.png", title, render(figure))


def _timeline_runs(runs: pd.DataFrame, root: Path, experiment: str, env: str) -> dict[str, Path]:
    """Stream directories of the timeline methods at TIMELINE_SEED, for the methods that have one."""
    found = {}
    for method in TIMELINE_METHODS:
        match = runs[
            (runs["experiment"] == experiment)
            & (runs["env"] == env)
            & (runs["memory"] == method)
            & (runs["seed"] == TIMELINE_SEED)
        ]
        if len(match):
            found[method] = root / str(match["run"].iloc[0])
    return found


def success_jobs(episodes: pd.DataFrame, runs: pd.DataFrame, window: int) -> list[Job]:
    """Success over time of every setting, from the logs alone (`analysis.data.load.RunLogs`' episodes
    and runs). Only streams with phase boundaries: a single-phase stream (MemoryAgentBench's independent
    questions) has no drift to show over time; a sweep's grid points are drawn as heatmaps instead."""
    phases = phase_orders(episodes)
    swept = set(runs.loc[in_sweep(runs), "run"])
    regular = episodes[~episodes["run"].isin(swept)] if swept else episodes
    jobs: list[Job] = []
    for experiment, env in settings(regular):
        if len(phases[(experiment, env)]) > 1:
            of_setting = (regular["experiment"] == experiment) & (regular["env"] == env)
            rows = regular.loc[of_setting, _SUCCESS_COLUMNS]
            jobs.append(partial(success_over_time, rows, phases[(experiment, env)], experiment, env, window))
    return jobs


def timeline_jobs(runs: pd.DataFrame, root: str | Path) -> list[Job]:
    """The lifecycle timelines (TIMELINES), read from the streams' logs under the run-log `root`."""
    return [
        partial(lifecycle_timeline, _timeline_runs(runs, Path(root), experiment, env), experiment, env)
        for experiment, env in TIMELINES
    ]


def metric_jobs(analysis: Analysis) -> list[Job]:
    """The figures of computed metrics: MPI bars of every experiment, then the sweep heatmaps."""
    mpi = analysis.mpi
    experiments = sorted_experiments(mpi["experiment"]) if len(mpi) else []
    jobs: list[Job] = [
        partial(mpi_bars, mpi[mpi["experiment"] == experiment], analysis.phases, experiment)
        for experiment in experiments
    ]
    if analysis.sweep.empty or not analysis.sweep_params:
        return jobs
    names = [p.rsplit(".", 1)[-1] for p in analysis.sweep_params]
    for env in dict.fromkeys(analysis.sweep["env"]):
        of_env = analysis.sweep[analysis.sweep["env"] == env]
        for method in dict.fromkeys(of_env["memory"]):
            jobs.append(partial(sweep_heatmap, of_env[of_env["memory"] == method], names, env, method))
    return jobs


def write_figures(drawings: Iterable[Drawing | None], directory: str | Path) -> list[FigureFile]:
    """Write the drawings into `directory` in the given order (earlier PNGs no longer made are removed)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    files = []
    for drawing in drawings:
        if drawing is not None:
            path = directory / drawing.name
            path.write_bytes(drawing.png)
            files.append(FigureFile(path, drawing.title))
    written = {f.path for f in files}
    for stale in sorted(p for p in directory.glob("*.png") if p not in written):
        stale.unlink()
    return files
