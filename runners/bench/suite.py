"""`python -m runners.bench --out results/bench.json`: the harness's performance, measured as ratios.

Machines running this are shared and noisy, so every figure is either a ratio between methods measured
in the same process and the same repetition, or a median over repetitions in rotated order; the
memory-operation benchmark counts CPU time, not wall time. Four benchmarks and one timing:

1. memory operations: a stream of observations over many keys with retrieve and feedback mixed in,
   through the `Memory` protocol (runners.bench.memory): events per CPU second and time relative to LWW;
2. prompt footprint: mean prompt tokens per decision over 1,000 controlled_drift episodes;
3. end to end: episodes per second of the runner on the simulated backend, per environment;
4. scaling: the cost of an episode after a stream 1x, 10x and 100x as long, and its log-log slope;
plus the wall time of `make reproduce` (its experiments side by side, then the analysis, into a temporary
results_dir) and, in the same run, the time to verify every stream it wrote against its checksums (what a
rerun does before it skips a stream, and the analysis before it reads one), as a fraction of that wall time,
and the size of the run tree it wrote (bytes of results/runs, as `du -sb` counts them); and what logging
each prompt's sample costs it (runners.bench.samples: its drift experiments on a few seeds with
`log_samples` on and off).

Writes the JSON (`--out`) and a markdown report beside it (`bench.md`) with every figure against its
target.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from analysis.streamlog.atomic import SHARED, atomic_write_bytes
from analysis.streamlog.stream import META, read_meta, verify
from runners.bench import agent as bench_agent
from runners.bench import memory as bench_memory
from runners.bench.breakdown import FLOOR_STAGES, STAGES
from runners.bench.breakdown import breakdown as cpu_breakdown
from runners.bench.clock import children_cpu
from runners.bench.map_timing import MAP_BUDGET_S, time_map
from runners.bench.reference import TARGET_REFERENCE, paired, resolve, two_cpus
from runners.bench.retrieval import retrieval_cost, run_cost
from runners.bench.samples import sample_cost
from runners.bench.testsuite import TEST_BUDGET_S, time_tests
from runners.launch import reproduce
from runners.registry import build_memory
from runners.run import PROJECT_ROOT

E2E_ENVS = {
    "controlled_drift": bench_agent.PAPER_MEMORIES,
    "preference_stream": bench_agent.PAPER_MEMORIES,
    # real tool runs make its episodes ~10x dearer: the methods whose cost differs most
    "executable_drift": ("no_memory", "append_only", "lww", "tepa_rev", "tepa_full"),
    "memoryagentbench": bench_agent.MAB_MEMORIES,
}
# --quick: environments shrunk to a few dozen episodes (memoryagentbench's smallest source is kept).
QUICK_ENV_OVERRIDES = {
    "controlled_drift": ("env.phase_length=10",),
    "preference_stream": ("env.stable_length=10", "env.drift_length=30"),
    "executable_drift": ("env.phase_length=5",),
}
# Reactive Forgetting clears a key only on feedback, which the scaling warm-up (ingested history) does not
# give, so at scale it would be measured as Append-Only; it is left out rather than misreported.
SCALING_MEMORIES = tuple(m for m in bench_agent.PAPER_MEMORIES if m != "reactive")
#: Bytes of results/runs after `make reproduce` (MemoryAgentBench included) before episodes logged what
#: their prompts held (options, evidence, truth): the budget for the run tree is 1.5 times this.
RUN_TREE_BEFORE_SAMPLES_BYTES = 383_128_349
#: --quick's logged-samples timing: one seed of executable drift's shortest phases.
QUICK_SAMPLES: dict[str, Any] = {"seeds": (0,), "overrides": ("env.phase_length=5",)}
#: --quick's keyed-against-dense run: one seed of one method (the cost is start-up and configuration).
QUICK_RETRIEVAL_RUN = ("seeds=[0]", "hydra.sweeper.params.memory=lww")
#: --quick's CPU breakdown: one experiment's methods on short streams.
QUICK_BREAKDOWN: dict[str, Any] = {
    "experiments": ("paper_controlled",),
    "extra": {"paper_controlled": ("env.phase_length=10",)},
}
#: `make reproduce` on a quiet 2-core machine: wall and CPU seconds, and its analysis' wall seconds.
REPRODUCE_WALL_S, REPRODUCE_WALL_MAX_S, REPRODUCE_CPU_S, ANALYSIS_S = 100, 150, 200, 5
#: The transcript viewer's budget on one paper experiment's runs (the README's example), CPU seconds.
VIEWER_EXPERIMENT, VIEWER_CPU_S = "paper_controlled", 10
FLAT_SLOPE = 0.2  # "flat": cost grows less than 100**0.2 = 2.5x over a 100x longer stream
GROWING_SLOPE = 0.5


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m runners.bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None, help="the JSON to write (results/bench.json)")
    parser.add_argument(
        "--markdown", type=Path, default=None, help="the report (default: bench.md beside --out)"
    )
    parser.add_argument(
        "--repeats", type=int, default=3, help="repetitions of every timing (median reported)"
    )
    parser.add_argument("--observations", type=int, default=1_000_000, help="memory-operation stream length")
    parser.add_argument("--keys", type=int, default=10_000, help="keys of the memory-operation stream")
    parser.add_argument(
        "--episodes", type=int, default=1000, help="controlled_drift episodes for the footprint"
    )
    parser.add_argument(
        "--scaling-base", type=int, default=1000, help="stream length of the 1x scaling point"
    )
    parser.add_argument("--scaling-window", type=int, default=30, help="episodes timed at each scaling point")
    parser.add_argument("--skip-reproduce", action="store_true", help="do not time `make reproduce`")
    parser.add_argument("--skip-map", action="store_true", help="do not time `make map` (about 15 minutes)")
    parser.add_argument("--skip-tests", action="store_true", help="do not time `make test` (about 5 minutes)")
    parser.add_argument(
        "--reproduce-dir",
        type=Path,
        default=None,
        help="run the timed `make reproduce` into this folder and keep it (e.g. to diff its tables with "
        "results/tables); default: a temporary folder",
    )
    parser.add_argument(
        "--reference",
        nargs="?",
        const=TARGET_REFERENCE["commit"][:7],
        default=None,
        metavar="COMMIT",
        help="also time `make reproduce` at COMMIT and at this tree back to back, and report the ratios "
        f"(default COMMIT: {TARGET_REFERENCE['commit'][:7]}, the one the targets were set against: "
        "this tree's figures scaled to that machine)",
    )
    parser.add_argument(
        "--reference-pairs", type=int, default=1, help="pairs of timings with --reference (median ratio)"
    )
    parser.add_argument(
        "--reference-together",
        action="store_true",
        help="with --reference, time a pair's two trees at the same time, each on its own CPU, instead of "
        "back to back (the same machine for both, however its speed drifts; two CPUs needed)",
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one repetition: a smoke run")
    parser.add_argument(
        "--only",
        choices=("retrieval", "samples", "reproduce", "breakdown", "tests"),
        default=None,
        help="measure this benchmark alone and print its JSON; with --out naming a full bench.json, "
        "update its section (and bench.md beside it)",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.repeats, args.observations, args.keys, args.episodes = 1, 2000, 50, 40
        args.scaling_base, args.scaling_window = 20, 4
    names = (
        "repeats",
        "observations",
        "keys",
        "episodes",
        "scaling_base",
        "scaling_window",
        "reference_pairs",
    )
    for name in names:
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')}: must be >= 1, got {getattr(args, name)}")
    if args.episodes % 4:
        parser.error(
            f"--episodes: must be a multiple of 4 (controlled_drift's four phases), got {args.episodes}"
        )
    if args.scaling_window < 2:
        parser.error(f"--scaling-window: must be >= 2, got {args.scaling_window}")
    if args.reference is not None:
        try:
            args.reference = resolve(args.reference, PROJECT_ROOT)
            if args.reference_together:
                two_cpus()
        except ValueError as exc:
            parser.error(str(exc))
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.only:
        return only(args)
    args.out = args.out or Path("results/bench.json")
    markdown = args.markdown or args.out.with_name("bench.md")
    report = run(args, log=lambda msg: print(msg, file=sys.stderr, flush=True))
    _write(args.out, json.dumps(report, indent=2) + "\n")
    _write(markdown, render_markdown(report))
    print(f"wrote {args.out} and {markdown}", file=sys.stderr)
    return 0


def _write(path: Path, text: str) -> None:
    """A report written whole (temporary file, then rename): a kill never leaves a truncated one."""
    atomic_write_bytes(path, text.encode("utf-8"), mode=SHARED)


def only(args: argparse.Namespace) -> int:
    """`--only retrieval|samples|reproduce`: that benchmark alone (a target, without the other sections'
    minutes), printed as JSON. With `--out` naming a full report (a `make bench` bench.json), its section is
    replaced, the targets recomputed, the date of the new measurement recorded in its meta, and bench.md
    beside it rewritten; any other `--out` gets the section's JSON alone."""
    quick = args.quick
    measure = {
        "retrieval": lambda: retrieval(args),
        "samples": lambda: sample_cost(args.repeats, tree_bytes, **(QUICK_SAMPLES if quick else {})),
        "reproduce": lambda: measure_reproduce(args),  # run once: it is minutes long
        "breakdown": lambda: cpu_breakdown(**(QUICK_BREAKDOWN if quick else {})),  # each stream once
        "tests": lambda: time_tests(PROJECT_ROOT),  # run once: it is minutes long
    }[args.only]
    if args.only in ("reproduce", "breakdown", "tests"):
        args.repeats = 1
    meta = _meta(args)
    section = measure()
    meta["load_average_end"] = _load()
    text = json.dumps({"meta": meta, args.only: section}, indent=2) + "\n"
    full = _read_report(args.out) if args.out is not None else None
    if full is not None:
        full[args.only] = section
        full["meta"].setdefault("updated", {})[args.only] = meta
        full["targets"] = targets(full)
        _write(args.out, json.dumps(full, indent=2) + "\n")
        markdown = args.markdown or args.out.with_name("bench.md")
        _write(markdown, render_markdown(full))
        print(f"updated the {args.only} section of {args.out} and {markdown}", file=sys.stderr)
    elif args.out is not None:
        _write(args.out, text)
    print(text, end="")
    return 0


def retrieval(args: argparse.Namespace) -> dict[str, Any]:
    """The retrieval section: the stream loop's cost per mode and, under `run`, the preference
    experiment's run keyed and dense (runners.bench.retrieval)."""
    env = QUICK_ENV_OVERRIDES["preference_stream"] if args.quick else ()
    loop = retrieval_cost(args.repeats, overrides=env)
    run = [*env, *QUICK_RETRIEVAL_RUN] if args.quick else ()
    return loop | {"run": run_cost(args.repeats, overrides=run)}


def _read_report(path: Path) -> dict[str, Any] | None:
    """The full report at `path` (one with targets), or None when there is none there; a file that is
    there but not JSON is a one-line error rather than overwritten."""
    if not path.is_file():
        return None
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SystemExit(f"--out {path}: not a readable bench report ({exc})") from None
    return report if isinstance(report, dict) and "targets" in report and "meta" in report else None


def run(args: argparse.Namespace, log: Callable[[str], None] = lambda msg: None) -> dict[str, Any]:
    """Every benchmark; the report as a JSON-ready dict (with how long each section took)."""
    report: dict[str, Any] = {"meta": _meta(args)}
    took: dict[str, float] = {}

    def section(name: str, message: str, measure: Callable[[], dict[str, Any]]) -> None:
        log(message)
        start = time.perf_counter()
        report[name] = measure()
        took[name] = round(time.perf_counter() - start, 1)

    def memory_ops() -> dict[str, Any]:
        stream = bench_memory.make_stream(n_observations=args.observations, n_keys=args.keys)
        factories = {name: (lambda name=name: build_memory(name)) for name in bench_agent.PAPER_MEMORIES}
        return {
            "observations": stream.n_observations,
            "decisions": stream.n_decisions,
            "events": stream.n_events,
            "keys": args.keys,
            "methods": bench_memory.measure(factories, stream, args.repeats),
        }

    tail = min(100, args.episodes)
    section(
        "memory_ops",
        f"memory operations: {args.observations} observations over {args.keys} keys, x{args.repeats}",
        memory_ops,
    )
    section(
        "prompt_footprint",
        f"prompt footprint: {args.episodes} controlled_drift episodes per method",
        lambda: {
            "episodes": args.episodes,
            "tail": tail,
            "methods": bench_agent.prompt_footprint(episodes=args.episodes, tail=tail),
        },
    )
    section(
        "end_to_end",
        f"end to end: episodes per second of the runner, x{args.repeats}",
        lambda: bench_agent.end_to_end(
            E2E_ENVS, args.repeats, overrides=QUICK_ENV_OVERRIDES if args.quick else {}
        ),
    )
    section(
        "scaling",
        f"scaling: {args.scaling_base} x (1, 10, 100) episodes, x{args.repeats}",
        lambda: bench_agent.scaling(
            SCALING_MEMORIES, base=args.scaling_base, window=args.scaling_window, repeats=args.repeats
        ),
    )
    section(
        "retrieval",
        f"retrieval: the preference experiment under keyed, bm25 and dense retrieval, x{args.repeats}",
        lambda: retrieval(args),
    )
    if args.skip_reproduce:
        report["reproduce"] = {"skipped": "--skip-reproduce"}
        report["samples"] = {"skipped": "--skip-reproduce"}
    else:
        section(
            "samples",
            f"logged samples: the drift experiments with log_samples on and off, x{args.repeats}",
            lambda: sample_cost(
                args.repeats,
                tree_bytes,
                **(QUICK_SAMPLES if args.quick else {}),
            ),
        )
        section(
            "reproduce",
            "make reproduce: the Makefile's commands into a temporary results_dir",
            lambda: measure_reproduce(args),
        )
    if args.skip_map or args.quick:
        report["map"] = {"skipped": "--skip-map" if args.skip_map else "--quick"}
    else:
        section("map", "make map: the robustness map into a temporary results_dir", time_map)
    section(
        "breakdown",
        "CPU breakdown: one stream of every job of the paper experiments, profiled",
        lambda: cpu_breakdown(log=log, **(QUICK_BREAKDOWN if args.quick else {})),
    )
    if args.skip_tests or args.quick:
        report["tests"] = {"skipped": "--skip-tests" if args.skip_tests else "--quick"}
    else:
        section("tests", "make test: the suite as the Makefile runs it", lambda: time_tests(PROJECT_ROOT))
    report["meta"]["section_seconds"] = took
    report["meta"]["bench_seconds"] = round(sum(took.values()), 1)
    report["meta"]["load_average_end"] = _load()
    report["targets"] = targets(report)
    return report


def reproduce_commands(results_dir: str) -> tuple[list[reproduce.Step], list[str]]:
    """The Makefile's `reproduce` recipe with this interpreter and another results_dir: the experiments
    (`runners.launch.reproduce`, run side by side) and then the analysis' command."""
    analysis = [
        sys.executable,
        "-m",
        "analysis",
        "--runs",
        f"{results_dir}/runs",
        "--out",
        results_dir,
        "--quiet",
    ]
    return reproduce.steps(results_dir), analysis


def measure_reproduce(args: argparse.Namespace) -> dict[str, Any]:
    """The reproduce section: `time_reproduce`, and with `--reference` the pairs of timings of the
    reference commit and this tree under `reference` (runners.bench.reference)."""
    section = time_reproduce(args.reproduce_dir)
    if args.reference is not None:
        section["reference"] = paired(
            args.reference, PROJECT_ROOT, args.reference_pairs, together=args.reference_together
        )
    return section


def time_reproduce(keep: Path | None = None) -> dict[str, Any]:
    """Wall time of `make reproduce` in total and of each step: an experiment's time runs from the start
    of all (they run side by side, a guard's time included), the analysis' after them. A step whose
    guard fails is listed as skipped; a failed step is reported, not raised. The outputs go to a
    temporary folder, or to `keep` (which must not exist yet: a timing from skipped streams would mean
    nothing), where they stay."""
    if keep is not None:
        keep.mkdir(parents=True)  # FileExistsError: refuse to time a rerun over old streams
    with (
        contextlib.nullcontext(str(keep.resolve()))
        if keep is not None
        else tempfile.TemporaryDirectory(prefix="tepa-bench-reproduce-")
    ) as tmp:
        experiments, analysis = reproduce_commands(tmp)
        start, cpu_start = time.perf_counter(), children_cpu()
        ran = reproduce.run_side_by_side(experiments, echo=False, cwd=PROJECT_ROOT)
        steps, skipped = ran["steps_s"], ran["skipped_steps"]
        if "failed" in ran:
            return {"steps_s": steps, "failed": ran["failed"]}
        done = subprocess.run(analysis, cwd=PROJECT_ROOT, capture_output=True, text=True)
        wall = round(time.perf_counter() - start, 1)
        steps["analysis"] = round(wall - ran["wall_s"], 1)
        if done.returncode:
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            return {"steps_s": steps, "failed": f"analysis: exit {done.returncode}: {' / '.join(tail)}"}
        cpu = round(children_cpu() - cpu_start, 1)
        viewer = time_viewer(Path(tmp) / "runs" / VIEWER_EXPERIMENT)
        verification = time_verification(Path(tmp) / "runs")
        tree = tree_bytes(Path(tmp) / "runs")
    verification["fraction_of_reproduce"] = round(verification["seconds"] / wall, 4) if wall else None
    return {
        "steps_s": steps,
        "skipped_steps": skipped,
        "wall_s": wall,
        "cpu_s": cpu,
        "verification": verification,
        "run_tree_bytes": tree,
        "viewer": viewer,
    }


def time_viewer(runs: Path) -> dict[str, Any]:
    """CPU and wall seconds of the transcript viewer's page of the experiment's runs under `runs`, as the
    README runs it (`python -m analysis.view RUNS --out view.html`); when it failed or the runs are missing,
    its last output under `failed` (MemoryAgentBench skipped does not touch paper_controlled, so that is a
    real failure)."""
    with tempfile.TemporaryDirectory(prefix="tepa-bench-view-") as tmp:
        command = [sys.executable, "-m", "analysis.view", str(runs), "--out", f"{tmp}/view.html"]
        start, cpu = time.perf_counter(), children_cpu()
        done = subprocess.run(command, cwd=PROJECT_ROOT, capture_output=True, text=True)
        wall, cpu = time.perf_counter() - start, children_cpu() - cpu
    if done.returncode:
        return {"experiment": runs.name, "failed": (done.stderr or done.stdout).strip()[-300:]}
    return {"experiment": runs.name, "wall_s": round(wall, 1), "cpu_s": round(cpu, 1)}


def tree_bytes(root: Path) -> int:
    """The apparent size of everything under `root`, directories included (what `du -sb` reports; 0
    when nothing was written)."""
    return sum(p.lstat().st_size for p in (root, *root.rglob("*"))) if root.is_dir() else 0


def time_verification(runs: Path) -> dict[str, Any]:
    """Time `analysis.data.logformat.verify` over every complete stream under `runs` (each file read and
    hashed once, as a rerun or the analysis does); raises if any stream fails."""
    start = time.perf_counter()
    streams, size = 0, 0
    for meta_path in sorted(runs.rglob(META)):
        meta = read_meta(meta_path.parent)
        if not meta or meta.get("complete") is not True:
            continue
        problem = verify(meta_path.parent, meta)
        if problem is not None:
            raise RuntimeError(problem)
        streams += 1
        size += sum(f["bytes"] for f in meta["files"].values())
    return {
        "streams": streams,
        "megabytes": round(size / 1e6, 1),
        "seconds": round(time.perf_counter() - start, 2),
    }


def _tree_ratio(rep: dict[str, Any]) -> float | None:
    """The run tree's size relative to RUN_TREE_BEFORE_SAMPLES_BYTES."""
    size = rep.get("run_tree_bytes")
    return None if size is None else round(size / RUN_TREE_BEFORE_SAMPLES_BYTES, 3)


def targets(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Each figure with a target: its value, the target, and whether it is met (None when
    the figure was not measured)."""
    ops = report["memory_ops"]["methods"]
    fp = report["prompt_footprint"]["methods"]
    sc = report["scaling"]["methods"]
    rep = report["reproduce"]
    scaled = rep.get("reference", {}).get("scaled", {})

    def row(name: str, value: float | None, op: str, bound: float) -> dict[str, Any]:
        met = None if value is None else (value <= bound if op == "<=" else value >= bound)
        return {"figure": name, "value": value, "target": f"{op} {bound:g}", "met": met}

    tokens = {m: v["mean_prompt_tokens"] for m, v in fp.items()}
    rows = [
        row("memory ops: TEPA-Rev time / LWW time", ops["tepa_rev"]["time_vs_lww"], "<=", 3),
        row("memory ops: TEPA-Rev events per CPU second", ops["tepa_rev"]["events_per_s"], ">=", 300_000),
        row("prompt tokens: TEPA-Rev / LWW", tokens["tepa_rev"] / tokens["lww"], "<=", 1.2),
        row("prompt tokens: TEPA-Rev / Append-Only", tokens["tepa_rev"] / tokens["append_only"], "<=", 0.1),
        row("make reproduce: wall seconds", rep.get("wall_s"), "<=", REPRODUCE_WALL_S),
        row("make reproduce: wall seconds, at most", rep.get("wall_s"), "<=", REPRODUCE_WALL_MAX_S),
        row("make reproduce: CPU seconds", rep.get("cpu_s"), "<=", REPRODUCE_CPU_S),
        row(
            "make reproduce: the analysis, wall seconds",
            rep.get("steps_s", {}).get("analysis"),
            "<=",
            ANALYSIS_S,
        ),
        *(
            row(f"{name}, scaled to the targets' reference machine", scaled.get(figure), "<=", bound)
            for name, figure, bound in (
                ("make reproduce: wall seconds", "wall_s", REPRODUCE_WALL_S),
                ("make reproduce: CPU seconds", "cpu_s", REPRODUCE_CPU_S),
                ("make reproduce: the analysis, wall seconds", "analysis_s", ANALYSIS_S),
            )
        ),
        row(
            f"transcript viewer on {VIEWER_EXPERIMENT}: CPU seconds",
            rep.get("viewer", {}).get("cpu_s"),
            "<=",
            VIEWER_CPU_S,
        ),
        row("make test: wall seconds", _test_wall(report.get("tests", {})), "<=", TEST_BUDGET_S),
        row("make map: wall seconds", report.get("map", {}).get("wall_s"), "<=", MAP_BUDGET_S),
        row("make reproduce: run tree / before the logged samples", _tree_ratio(rep), "<=", 1.5),
        row(
            "make reproduce: wall time with logged samples / without",
            report.get("samples", {}).get("ratio"),
            "<=",
            1.1,
        ),
        row(
            "dense retrieval: paper_preference run wall time / keyed",
            report.get("retrieval", {}).get("run", {}).get("dense_ratio"),
            "<=",
            2,
        ),
        row(
            "verifying every stream / make reproduce wall time",
            rep.get("verification", {}).get("fraction_of_reproduce"),
            "<=",
            0.05,
        ),
    ]
    for method in ("tepa_rev", "tepa_full", "tepa_norev"):
        rows.append(
            row(f"scaling: {method} slope of time per episode", sc[method]["slope_time"], "<=", FLAT_SLOPE)
        )
    rows.append(
        row(
            "scaling: append_only slope of time per episode",
            sc["append_only"]["slope_time"],
            ">=",
            GROWING_SLOPE,
        )
    )
    return rows


def render_markdown(report: dict[str, Any]) -> str:
    """The report as markdown: targets first, then one table per benchmark."""
    meta = report["meta"]
    out = [
        "## Performance (`make bench`)",
        "",
        f"Measured {meta['date']} on {meta['cpus']} CPUs ({meta['platform']}, Python {meta['python']}), "
        f"load average {meta['load_average_start']} at the start and {meta['load_average_end']} at the end; "
        f"{meta['repeats']} repetitions, medians. Reproduce with `make bench`, i.e. `{meta['command']}` "
        "(`--skip-reproduce` leaves out the timing of `make reproduce`); it took "
        f"{meta['bench_seconds']:g} s ("
        + ", ".join(f"{k.replace('_', ' ')} {v:g} s" for k, v in meta["section_seconds"].items())
        + ")."
        + "".join(
            f" The {name} section was measured again on {m['date']} (`{m['command']}`, "
            + ("once" if m["repeats"] == 1 else f"{m['repeats']} repetitions")
            + f", load average {m['load_average_start']} at the start and "
            f"{m.get('load_average_end', 'unknown')} at the end)."
            for name, m in meta.get("updated", {}).items()
        ),
        "",
        "| figure | value | target | met |",
        "|---|---:|---|---|",
    ]
    for t in report["targets"]:
        met = {True: "yes", False: "**no**", None: "not measured"}[t["met"]]
        out.append(f"| {t['figure']} | {_num(t['value'])} | {t['target']} | {met} |")

    ops = report["memory_ops"]
    out += [
        "",
        f"**Memory operations** ({ops['observations']:,} observations over {ops['keys']:,} keys, a retrieve "
        f"and a feedback every second observation: {ops['events']:,} protocol calls; CPU time):",
        "",
        "| method | events / CPU s | time vs LWW |",
        "|---|---:|---:|",
    ]
    for name, m in ops["methods"].items():
        out.append(f"| {name} | {m['events_per_s']:,.0f} | {m['time_vs_lww']:.2f} |")

    fp = report["prompt_footprint"]
    lww, ao = fp["methods"]["lww"]["mean_prompt_tokens"], fp["methods"]["append_only"]["mean_prompt_tokens"]
    out += [
        "",
        f"**Prompt footprint** (controlled_drift, {fp['episodes']:,} episodes; "
        "the simulated backend's token estimate):",
        "",
        f"| method | mean prompt tokens | last {fp['tail']} episodes | vs LWW | vs Append-Only |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, m in fp["methods"].items():
        mean = m["mean_prompt_tokens"]
        out.append(
            f"| {name} | {mean:,.1f} | {m['final_prompt_tokens']:,.1f} | {mean / lww:.2f} | {mean / ao:.3f} |"
        )

    out += [
        "",
        "**End to end** (the runner on the simulated backend, one seed, logs included; episodes/s):",
        "",
    ]
    e2e = report["end_to_end"]
    methods = sorted({m for env in e2e.values() for m in env.get("methods", {})}, key=_method_order)
    out += [
        "| environment | all methods | " + " | ".join(methods) + " |",
        "|---|" + "---:|" * (len(methods) + 1),
    ]
    for env, r in e2e.items():
        if "skipped" in r:
            out.append(f"| {env} | skipped: {r['skipped']} |" + " |" * len(methods))
            continue
        cells = [f"{r['methods'][m]['episodes_per_s']:,.0f}" if m in r["methods"] else "" for m in methods]
        out.append(f"| {env} | {r['episodes_per_s']:,.0f} | " + " | ".join(cells) + " |")
    robustness = report.get("map", {})
    if "skipped" in robustness:
        out += ["", f"`make map`: not timed ({robustness['skipped']})."]
    elif robustness:
        total = (
            f"{robustness['wall_s']:g} s" if "wall_s" in robustness else f"failed ({robustness['failed']})"
        )
        steps = ", ".join(f"{k} {v:g} s" for k, v in robustness["steps_s"].items())
        cpu = f"; {robustness['cpu_s']:g} CPU seconds" if robustness.get("cpu_s") is not None else ""
        out += ["", f"`make map` wall time: {total} ({steps}{cpu}; budget {MAP_BUDGET_S} s)."]
    samples = report.get("samples", {})
    if "ratio" in samples:
        seeds = ", ".join(map(str, samples["seeds"]))
        out += [
            "",
            f"Logging what each prompt held ({' and '.join(samples['experiments'])}, seeds {seeds}, side by "
            f"side and then the analysis, as `make reproduce` runs them): {samples['seconds_logged']:g} s "
            f"with `log_samples=true` against {samples['seconds_unlogged']:g} s without (medians); the "
            f"median of the rounds' paired ratios {samples['ratio']:g} x"
            + (
                f" (rounds: {', '.join(f'{r:g}' for r in samples['round_ratios'])}); CPU seconds "
                f"{samples['cpu_seconds_logged']:g} against {samples['cpu_seconds_unlogged']:g}, "
                f"{samples['cpu_ratio']:g} x"
                if "round_ratios" in samples
                else ""
            )
            + f"; the run tree {samples['tree_ratio']:g} x as large.",
        ]
    ret = report.get("retrieval", {})
    if "run" in ret:
        run, loop = ret["run"], ret["ratio_to_keyed"]
        out += [
            "",
            f"Retrieval modes on the preference experiment. The run (`{run['experiment']}` as `make "
            "reproduce` runs it, every method and seed, each mode into a fresh folder, so that dense "
            f"embeds every text anew): {run['seconds']['dense']:g} s dense against "
            f"{run['seconds']['keyed']:g} s keyed, {run['dense_ratio']:g} x (CPU "
            f"{run['cpu_seconds']['dense']:g} s against {run['cpu_seconds']['keyed']:g} s, "
            f"{run['dense_cpu_ratio']:g} x). The stream loop alone (every method, one seed, embeddings "
            f"warm, nothing but the episodes timed, the stricter figure): bm25 {loop['bm25']:.2f} x and "
            f"dense {loop['dense']:.2f} x keyed; ranking every item a method holds and reading top-k "
            "lines instead of one key's is the cost, and the run adds what both modes pay alike "
            "(start-up, configuration, logs).",
        ]
    rep = report["reproduce"]
    if "skipped" in rep:
        out += ["", f"`make reproduce`: not timed ({rep['skipped']})."]
    else:
        times = dict(rep["steps_s"])
        analysis = times.pop("analysis", None)
        steps = "side by side: " + ", ".join(f"{k} ended after {v:g} s" for k, v in times.items())
        steps += f"; then the analysis {analysis:g} s" if analysis is not None else ""
        total = f"{rep['wall_s']:g} s" if "wall_s" in rep else f"failed ({rep['failed']})"
        skipped = "".join(
            f"; {name} skipped (its data check failed)" for name in rep.get("skipped_steps", ())
        )
        cpu = f"; {rep['cpu_s']:g} CPU seconds in all" if rep.get("cpu_s") is not None else ""
        out += ["", f"`make reproduce` wall time: {total} ({steps}{skipped}{cpu})."]
        out += _reference_markdown(rep.get("reference"))
        view = rep.get("viewer") or {}
        if "cpu_s" in view:
            out += [
                "",
                f"The transcript viewer's page of its {view['experiment']} runs (`python -m analysis.view`): "
                f"{view['cpu_s']:g} CPU seconds, {view['wall_s']:g} s wall.",
            ]
        elif "failed" in view:
            out += [
                "",
                f"The transcript viewer's page of its {view['experiment']} runs **failed**: {view['failed']}",
            ]
        v = rep.get("verification", {})
        if v.get("fraction_of_reproduce") is not None:
            out += [
                "",
                f"Verifying the checksums of all {v['streams']} streams it wrote ({v['megabytes']:g} MB; "
                "what a rerun does before skipping them and the analysis before reading them): "
                f"{v['seconds']:g} s, {100 * v['fraction_of_reproduce']:.1f}% of its wall time.",
            ]
        if rep.get("run_tree_bytes") is not None:
            out += [
                "",
                f"The run tree it wrote: {rep['run_tree_bytes']:,} bytes ({_tree_ratio(rep):g} x its size "
                f"before episodes logged their samples, {RUN_TREE_BEFORE_SAMPLES_BYTES:,} bytes).",
            ]

    out += _breakdown_markdown(report) + _tests_markdown(report)
    sc = report["scaling"]
    sizes = sc["sizes"]
    out += [
        "",
        "**Scaling** (controlled_drift; cost of one episode after a stream of "
        f"{', '.join(f'{s:,}' for s in sizes)} episodes, over {sc['window']} episodes; "
        "slope of log cost on log stream length: 0 flat, 1 linear):",
        "",
        "| method | "
        + " | ".join(f"us/episode @{s:,}" for s in sizes)
        + " | slope | "
        + " | ".join(f"tokens @{s:,}" for s in sizes)
        + " | slope |",
        "|---|" + "---:|" * (2 * len(sizes) + 2),
    ]
    for name, m in sc["methods"].items():
        us = " | ".join(f"{x:,.0f}" for x in m["us_per_episode"])
        tok = " | ".join(f"{x:,.0f}" for x in m["prompt_tokens"])
        out.append(f"| {name} | {us} | {m['slope_time']:.2f} | {tok} | {m['slope_tokens']:.2f} |")
    return "\n".join(out) + "\n"


def _reference_markdown(reference: dict[str, Any] | None) -> list[str]:
    """The pairs of timings against a reference commit (`--reference`), as one paragraph."""
    if not reference:
        return []
    commit = reference["commit"][:7]
    pairs = "; ".join(
        f"{commit} {p['reference'].get('wall_s', 'failed')} s / {p['reference'].get('cpu_s', '-')} CPU s "
        f"against {p['this'].get('wall_s', 'failed')} s / {p['this'].get('cpu_s', '-')} CPU s"
        for p in reference["pairs"]
    )
    how = (
        "at the same time, each on its own CPU with one slot (a tree that ended first ran again, untimed, "
        "until the other ended; the CPUs swapped from pair to pair)"
        if reference.get("together")
        else "back to back"
    )
    if "failed" in reference:
        return ["", f"Timed against commit {commit} {how}: **failed** ({reference['failed']}); {pairs}."]
    ratios = reference["ratios"]
    text = (
        f"Timed against commit {commit} {how}, {len(reference['pairs'])} pair(s) ({pairs}): this "
        f"tree takes {ratios['wall_s']:g} x its wall time, {ratios['cpu_s']:g} x its CPU time and "
        f"{ratios['analysis_s']:g} x its analysis' wall time (medians of the pairs' ratios)."
    )
    scaled = reference.get("scaled")
    if scaled:
        text += (
            f" On the machine where {commit} took {TARGET_REFERENCE['wall_s']:g} s, "
            f"{TARGET_REFERENCE['cpu_s']:g} CPU s and {TARGET_REFERENCE['analysis_s']:g} s of analysis "
            f"(where the targets were set), that is {scaled['wall_s']:g} s, {scaled['cpu_s']:g} CPU s and "
            f"{scaled['analysis_s']:g} s: the scaled rows of the table above."
        )
    return ["", text]


def _test_wall(tests: dict[str, Any]) -> float | None:
    """The suite's wall seconds when it passed (a failing suite's time is no figure)."""
    return tests.get("wall_s") if tests.get("exit_code") == 0 else None


def _breakdown_markdown(report: dict[str, Any]) -> list[str]:
    """The CPU breakdown per experiment and stage, and each environment's cost per episode beside its
    floor (runners.bench.breakdown)."""
    bd = report.get("breakdown")
    if not bd:
        return []
    out = [
        "",
        "**Where the CPU goes** (one stream of every job profiled on a CPU clock, the stages' shares "
        "times its CPU measured without the profiler, times the experiment's seeds; configuration: one "
        "Hydra composition of a job, times the compositions `make reproduce` makes of the experiment's "
        "jobs; CPU seconds):",
        "",
        "| experiment | jobs | streams | " + " | ".join(STAGES) + " | total |",
        "|---|---:|---:|" + "---:|" * (len(STAGES) + 1),
    ]
    for name, e in bd.items():
        if "skipped" in e:
            out.append(f"| {name} | skipped: {e['skipped']} |" + " |" * (len(STAGES) + 2))
            continue
        cells = " | ".join(f"{e['cpu_s'][s]:,.1f}" for s in STAGES)
        out.append(f"| {name} | {e['jobs']} | {e['streams']} | {cells} | {e['cpu_total_s']:,.1f} |")
    out += [
        "",
        f"**Cost per episode and its floor** (CPU microseconds per episode, the run's logs included; the "
        f"floor is the work no episode can skip: the {', '.join(FLOOR_STAGES)} stages, and for executable "
        "drift one real tool call through the tool worker with its artefact read and removed, measured "
        "alone):",
        "",
        "| experiment | us / episode | floor us / episode | ratio |",
        "|---|---:|---:|---:|",
    ]
    for name, e in bd.items():
        if "skipped" not in e:
            ratio = e["us_per_episode"] / e["floor_us_per_episode"] if e["floor_us_per_episode"] else None
            out.append(
                f"| {name} | {e['us_per_episode']:,.0f} | {e['floor_us_per_episode']:,.0f} | {_num(ratio)} |"
            )
    tool = bd.get("paper_executable", {}).get("tool_floor_us")
    if tool:
        out += [
            "",
            f"One tool call with its file operations, alone: {tool['total_us']:g} us of CPU "
            f"({tool['parent_us']:g} in the environment's process, {tool['worker_us']:g} in the worker)"
            + (
                f"; the same tools run in the environment's process, without the worker's isolation: "
                f"{tool['in_process_us']:g} us."
                if "in_process_us" in tool
                else "."
            ),
        ]
    return out


def _tests_markdown(report: dict[str, Any]) -> list[str]:
    tests = report.get("tests")
    if not tests:
        return []
    if "skipped" in tests:
        return ["", f"`make test`: not timed ({tests['skipped']})."]
    state = "passed" if tests["exit_code"] == 0 else f"**failed** (exit {tests['exit_code']})"
    return [
        "",
        f"`make test` ({tests['workers']} workers): {tests['wall_s']:g} s wall, "
        f"{tests['cpu_s']:g} CPU seconds; {state}: {tests['summary']}.",
    ]


def _num(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"


def _method_order(name: str) -> int:
    order = bench_agent.PAPER_MEMORIES
    return order.index(name) if name in order else len(order)


def _load() -> str:
    try:
        return " ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def _reference_options(args: argparse.Namespace) -> str:
    """The `--reference` options of the command, as given (none without `--reference`)."""
    if args.reference is None:
        return ""
    return (
        f" --reference {args.reference[:7]}"
        + (f" --reference-pairs {args.reference_pairs}" if args.reference_pairs != 1 else "")
        + (" --reference-together" if args.reference_together else "")
    )


def _meta(args: argparse.Namespace) -> dict[str, Any]:
    try:
        commit = (
            subprocess.run(
                ["git", "-C", str(PROJECT_ROOT), "rev-parse", "HEAD"],
                capture_output=True,
                text=True,
                timeout=10,
            ).stdout.strip()
            or None
        )
    except (OSError, subprocess.SubprocessError):
        commit = None
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "platform": platform.platform(terse=True),
        "cpus": os.cpu_count(),
        "git_commit": commit,
        "repeats": args.repeats,
        "command": "python -m runners.bench"
        + (f" --only {args.only}" if args.only else "")
        + _reference_options(args)
        + (f" --out {args.out}" if args.out else ""),
        "load_average_start": _load(),
    }
