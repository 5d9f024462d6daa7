"""Where `make reproduce`'s CPU goes, per experiment and stage, and each environment's floor.

One stream of every sweep point of a paper experiment (each method; each source for MemoryAgentBench)
runs through the runner (`runners.run.run_spec`: environment, memory, simulated reader, logs) under
cProfile. Every function's own time goes to the stage of the module it is in (`stage_of`); a built-in
function (a system call, `json.dumps`) or one of the standard library has no stage of its own, so its
time goes to its callers' stages in proportion to what each spent in it. The tool worker is a child
process: its CPU (after the stream, once the worker is stopped and reaped) is environment time. A job's
executable streams share one worker and send their waiting calls to it in one batch, so the stream's CPU
is measured as its job runs it: all the job's seeds at once, divided among them (the worker's start and
the batched round trips shared as in `make reproduce`), and the same run, profiled on a CPU clock,
splits this process's part by stage (on a wall clock, the time spent waiting for the worker counted as
this process's environment time, beside the worker's own CPU). A stage's share of the profiled time,
times the stream's CPU measured without the profiler, is that stage's CPU; times the experiment's
streams, the experiment's.
Everything runs on one CPU, as `make reproduce` runs a job and the processes it starts
(`runners.launch.slots`): a tool call costs the worker and its job less CPU on one core than across
two. Configuration is measured apart: one composition of a job's config (the median over the jobs),
times the compositions `make reproduce` makes of the experiment's jobs (`compositions`: the sweeper's
check of each, the launcher's worker's where jobs run in worker processes, the run identity's where
jobs override a value).

The floor of an environment is what an episode cannot avoid: the memory operations (retrieve,
observe, feedback), rendering the prompt and the reader parsing it, from the same profile; for
executable drift also one real tool call and its file operations (`tool_floor`: the job's inputs and
artefact written and read, the call through the tool worker), measured alone; beside it the same
tools run in this process, without a worker: what the isolation costs per call.
"""

from __future__ import annotations

import asyncio
import cProfile
import os
import pstats
import sysconfig
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from runners.bench.clock import children_cpu
from runners.bench.memory import median
from runners.compose import compose_config, compose_spec
from runners.config import ConfigError
from runners.launch import reproduce
from runners.launch import slots as job_slots
from runners.registry import swept_memories
from runners.run import run_spec

STAGES = ("configuration", "environment", "memory", "prompt", "reader", "logging", "loop")
#: Path fragments of a function's module and the stage it belongs to; the first that matches wins.
_RULES = (
    ("/envs/", "environment"),
    ("/tepa/", "memory"),
    ("/baselines/", "memory"),
    ("/runners/agent/prompt.py", "prompt"),
    ("/runners/agent/sample.py", "prompt"),  # what the prompt held, for the log
    ("/runners/llm/", "reader"),
    ("/runners/store/", "logging"),
    ("/analysis/", "logging"),  # the episode record, its checks and the log format
    ("/pyarrow/", "logging"),
    ("/pandas/", "logging"),
    ("/numpy/", "logging"),
    ("/hydra/", "configuration"),
    ("/omegaconf/", "configuration"),
    ("/yaml/", "configuration"),
    ("/runners/compose.py", "configuration"),
    ("/runners/config.py", "configuration"),
    ("/runners/registry.py", "configuration"),
)
#: Where the standard library's modules are.
_STDLIB = os.path.join(sysconfig.get_paths()["stdlib"], "").replace(os.sep, "/")
#: The stages whose work no episode can skip (the memory operations, the prompt, the reader parsing it).
FLOOR_STAGES = ("memory", "prompt", "reader")
EXPERIMENTS = reproduce.EXPERIMENTS
#: The experiments whose job's streams share a tool worker and its batched round trips: timed all at once.
SHARED_WORKER = ("paper_executable",)
#: MemoryAgentBench's sweep over sources (conf/experiment/paper_memoryagentbench.yaml).
MAB_SOURCES = tuple(
    f"factconsolidation_{hops}_{size}" for hops in ("sh", "mh") for size in ("6k", "32k", "262k")
)


def stage_of(filename: str) -> str | None:
    """The stage of a function defined in `filename`; None for a built-in (no module file) or a function
    of the standard library (random.sample for an environment, json for the log: its time is its
    callers'); "loop" for anything else (the agent loop, the runner)."""
    path = filename.replace(os.sep, "/")
    if filename == "~" or filename.startswith("<") or _in_stdlib(path):
        return None
    for fragment, stage in _RULES:
        if fragment in path:
            return stage
    return "loop"


def _in_stdlib(path: str) -> bool:
    """Whether `path` is a module of the standard library (not of a package installed beside it)."""
    return path.startswith(_STDLIB) and "/site-packages/" not in path and "/dist-packages/" not in path


def stage_seconds(stats: pstats.Stats) -> dict[str, float]:
    """Profiled seconds per stage: own time by module, built-ins' time split among their callers."""
    table: Mapping[Any, Any] = stats.stats  # type: ignore[attr-defined]
    out = dict.fromkeys(STAGES, 0.0)

    def give(func: Any, seconds: float, depth: int = 0) -> None:
        stage = stage_of(func[0])
        if stage is not None:
            out[stage] += seconds
            return
        callers = table.get(func, (0, 0, 0, 0, {}))[4]
        total = sum(c[2] for c in callers.values())
        if depth > 8 or not callers or total <= 0:
            out["loop"] += seconds
            return
        for caller, timing in callers.items():
            give(caller, seconds * timing[2] / total, depth + 1)

    for func, (_, _, own, _, _) in table.items():
        if own > 0:
            give(func, own)
    return out


def profile_stream(
    overrides: Sequence[str], seed: int = 0, warm: bool = False, together: int = 1
) -> dict[str, Any]:
    """One stream of `overrides` through the runner into a temporary folder: timed (CPU of this process
    and of the tool worker) with `together` seeds from `seed` on running at once, as a job runs them, and
    divided among them; then profiled. Its episodes, CPU seconds and CPU per stage. `warm`: run it
    once before, untimed (imports and caches, as a job's first stream finds them). The profiled run is
    the timed one again (the same seeds at once: a batched tool call costs the job other work than one
    sent alone), under a CPU clock (`cpu_profiler`)."""
    spec = compose_spec([*overrides, "progress=false"])
    with tempfile.TemporaryDirectory(prefix="tepa-bench-breakdown-") as tmp:
        one = replace(spec, seeds=(seed,), name="bench")
        if warm:
            asyncio.run(run_spec(replace(one, results_dir=f"{tmp}/warm")))
        own, child = time.process_time(), children_cpu()
        seeds = tuple(range(seed, seed + together))
        summary = asyncio.run(run_spec(replace(one, seeds=seeds, results_dir=f"{tmp}/timed")))
        own, child = (time.process_time() - own) / together, (children_cpu() - child) / together
        profiler = cpu_profiler()
        profiler.enable()
        asyncio.run(run_spec(replace(one, seeds=seeds, results_dir=f"{tmp}/profiled")))
        profiler.disable()
    profiled = stage_seconds(pstats.Stats(profiler))
    total = sum(profiled.values()) or 1.0
    stages = {stage: own * seconds / total for stage, seconds in profiled.items()}
    stages["environment"] += child  # the tool worker
    return {"episodes": summary.episodes_run / together, "cpu_s": own + child, "stages": stages}


def cpu_profiler() -> cProfile.Profile:
    """A profiler that counts CPU time, not wall time: waiting for the tool worker's reply is not the
    environment's CPU (the worker's own is added apart), and on a wall clock it inflated that stage."""
    return cProfile.Profile(time.process_time)


def composition_seconds(overrides: Sequence[str], repeats: int = 3) -> float:
    """CPU seconds of one composition of a job's config (median of `repeats`, after one untimed)."""
    compose_config(overrides)
    times = []
    for _ in range(repeats):
        start = time.process_time()
        compose_config(overrides)
        times.append(time.process_time() - start)
    return median(times)


def compositions(experiment: str, points: Sequence[Sequence[str]]) -> int:
    """How many times `make reproduce` composes a config for the experiment's jobs (`points`): once each
    when the sweeper checks it; again in the launcher's worker process when its jobs run there (the
    experiment that runs two at a time; one at a time, they run in the sweep's process on the config its
    check composed, `runners.launch.validated`); and once per option set for the run identity where the
    jobs override a value of the config (a dotted key such as `env.source`: `runners.store.identity`,
    once per process)."""
    step = next(s for s in reproduce.steps("results") if s.name == experiment)
    per_job = 1 if reproduce.ONE_JOB_AT_A_TIME in step.command else 2
    identities = set()
    for point in points:
        groups = tuple(o for o in point if "." not in o.partition("=")[0])
        if len(groups) < len(point):  # a value override
            identities.add(groups)
    return per_job * len(points) + len(identities)


def sweep_points(experiment: str) -> Iterator[tuple[str, ...]]:
    """The overrides of each job of a paper experiment's sweep."""
    sources = MAB_SOURCES if experiment == "paper_memoryagentbench" else (None,)
    for source in sources:
        for memory in swept_memories(experiment):
            yield (
                f"experiment={experiment}",
                f"memory={memory}",
                *([f"env.source={source}"] if source else []),
            )


def breakdown(
    experiments: Sequence[str] = EXPERIMENTS,
    extra: Mapping[str, Sequence[str]] | None = None,
    log: Any = lambda msg: None,
) -> dict[str, Any]:
    """Per experiment: its jobs and streams, CPU seconds per stage (configuration included) for all its
    streams, and the CPU per episode beside the floor's. `extra` adds overrides to every job of an
    experiment (e.g. shorter streams for a smoke run: the figures then describe those). An experiment
    that cannot be built (MemoryAgentBench without its data) is reported as skipped."""
    with tempfile.TemporaryDirectory(prefix="tepa-bench-slot-") as folder:
        one_cpu = {job_slots.SLOTS_ENV: str(job_slots.create(folder, 1))}
        with job_slots.held(one_cpu):
            return _breakdown(experiments, extra or {}, log)


def _breakdown(experiments: Sequence[str], extra: Mapping[str, Sequence[str]], log: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for experiment in experiments:
        log(f"breakdown: {experiment}")
        try:
            points = [(*p, *extra.get(experiment, ())) for p in sweep_points(experiment)]
            seeds = len(compose_spec(points[0]).seeds)
            together = seeds if experiment in SHARED_WORKER else 1
            profiles = [profile_stream(p, warm=i == 0, together=together) for i, p in enumerate(points)]
        except (ConfigError, ValueError, OSError, RuntimeError) as exc:
            out[experiment] = {"skipped": f"{type(exc).__name__}: {str(exc).splitlines()[0]}"}
            continue
        stages = dict.fromkeys(STAGES, 0.0)
        for prof in profiles:
            for stage, seconds in prof["stages"].items():
                stages[stage] += seconds * seeds
        per_composition = median([composition_seconds(p) for p in points])
        stages["configuration"] += compositions(experiment, points) * per_composition
        episodes = sum(p["episodes"] for p in profiles)
        cpu = sum(p["cpu_s"] for p in profiles)
        floor = sum(sum(p["stages"][s] for s in FLOOR_STAGES) for p in profiles)
        entry = {
            "jobs": len(points),
            "streams": len(points) * seeds,
            "cpu_s": {stage: round(seconds, 2) for stage, seconds in stages.items()},
            "cpu_total_s": round(sum(stages.values()), 1),
            "us_per_episode": round(cpu / episodes * 1e6, 1),
            "floor_us_per_episode": round(floor / episodes * 1e6, 1),
        }
        if experiment == "paper_executable":
            tool = tool_floor()
            entry["tool_floor_us"] = tool
            entry["floor_us_per_episode"] = round(entry["floor_us_per_episode"] + tool["total_us"], 1)
        out[experiment] = entry
    return out


def tool_floor(calls: int = 1000) -> dict[str, float]:
    """Microseconds of the executable-drift work one episode cannot avoid, measured alone: one tool call
    through the tool worker (each job's right invocation in turn, its inputs in place) and the file
    operations around it (the artefact read for the check, then removed). CPU of this process and of the
    worker, per call; and the same calls with the tools run in this process (`in_process_us`), which
    shows what the worker's isolation (its own process, time limit and file size limit) costs."""
    from envs.executable_drift.env import ExecutableDrift
    from envs.executable_drift.tools import TOOLS, VERSIONS

    with ExecutableDrift(phase_length=1) as env:
        env.reset(0)
        jobs = env.jobs
        box = env.sandbox
        root = str(box.root)
        for job in jobs:  # the inputs, written once: an episode finds them in place
            job.tool.prepare(box, job.subject, job.fixture)
        work = []
        for job in jobs:
            version = env.versions_at(0)[job.tool.name]
            argv = job.tool.invocation(job.subject, version).split()
            out = job.tool.params(job.subject, job.tool.conventions[VERSIONS[version].convention])["out"]
            work.append((argv, version, out))
        argv, version, out = work[0]
        env.worker.call(argv[0], argv[1:], version, root, env.time_limit)  # starts the worker: not timed
        box.clear(out)
        own, child = time.process_time(), _worker_cpu(env.worker.pid)
        for i in range(calls):
            argv, version, out = work[i % len(work)]
            env.worker.call(argv[0], argv[1:], version, root, env.time_limit)
            box.read_plain(out)
            box.clear(out)
        own, child = time.process_time() - own, _worker_cpu(env.worker.pid) - child
        alone = time.process_time()
        for i in range(calls):
            argv, version, out = work[i % len(work)]
            TOOLS[argv[0]].run(argv[1:], version, root)
            box.read_plain(out)
            box.clear(out)
        alone = time.process_time() - alone
    return {
        "parent_us": round(own / calls * 1e6, 1),
        "worker_us": round(child / calls * 1e6, 1),
        "total_us": round((own + child) / calls * 1e6, 1),
        "in_process_us": round(alone / calls * 1e6, 1),
    }


def _worker_cpu(pid: int | None) -> float:
    """CPU seconds of the running tool worker so far (Linux /proc; 0 elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
