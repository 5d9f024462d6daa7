"""The Hydra entry point: `python -m runners.run [overrides]` (console script `tepa-run`).

One run is one (experiment, env, memory, llm) config over one or more seeds (`seed=0` or
`seeds=[0,1,2]`); its streams, one per seed, run concurrently under the backend's own concurrency limit
and log to `results/runs/<experiment>/<env>/<memory>/seed=<n>/` (see `runners.runlog`). A complete
stream is skipped, an interrupted one resumes. Sweeps are Hydra multiruns (`-m`), launched locally
(`hydra/launcher=joblib`) or on SLURM (`hydra/launcher=submitit_slurm`). The config is checked before
any episode runs: a bad value stops the run with one line that names the key.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import subprocess
import sys
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import CompactHydraException
from omegaconf import DictConfig
from tqdm import tqdm

from runners.backend import BackendExhausted
from runners.config import ConfigError, RunSpec, validate
from runners.loop import run_stream
from runners.plan import plan
from runners.preflight import check_command_line
from runners.runlog import StaleRunError, StreamLog, fingerprint, stream_dir

log = logging.getLogger(__name__)
# conf/hydra/launcher/{joblib,submitit_slurm}.yaml set this project's launcher defaults under the
# plugins' own names, which Hydra 1.3 still merges with the plugins' schemas but warns about.
warnings.filterwarnings("ignore", message=r"(?s).*validated against ConfigStore schema", category=UserWarning)

PROJECT_ROOT = Path(__file__).resolve().parent.parent
CONF_DIR = PROJECT_ROOT / "conf"  # absolute, so that it resolves the same from `-m`, the script and workers
# Backend settings that change how calls are made, not what the model answers: a rerun that changes
# only these continues (or skips) the same streams.
OPERATIONAL = frozenset({
    "api_key_env", "cache_path", "max_concurrency", "timeout", "max_retries", "max_failed_calls",
    "backoff_base", "backoff_max", "retry_after_max", "max_retry_wait", "max_total_tokens", "price_in",
    "price_out",
})  # fmt: skip
VERSIONED = ("tepa-harness", "hydra-core", "omegaconf", "numpy", "pandas", "pyarrow", "openai", "tqdm")


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
        return (
            f"{n} stream(s): {n - skipped} run, {skipped} skipped (complete); "
            f"{self.episodes_run} episode(s) executed, {replayed} replayed"
        )


def execute(cfg: DictConfig, choices: Mapping[str, str | None]) -> RunSummary:
    """Validate a composed config and run it (`choices`: the selected group options, for labels); with
    `plan=true`, print its plan instead (`runners.plan`) and run nothing."""
    spec = validate(cfg, choices)
    if spec.plan:
        print(plan(spec).describe(f"{spec.name} {spec.env.label} {spec.memory.label}"), flush=True)
        return RunSummary(())
    return asyncio.run(run_spec(spec))


async def run_spec(spec: RunSpec) -> RunSummary:
    """Run every seed of `spec` that is not complete yet, concurrently."""
    # Build everything before the first episode (and before looking at old runs), so that a bad value
    # stops the run with its message whatever is on disk.
    parts: dict[int, tuple[Any, Any]] = {}
    backend = None
    try:
        for seed in spec.seeds:
            parts[seed] = (spec.env.build(), spec.memory.build())
        backend = spec.llm.build()
        logs = {seed: _stream_log(spec, seed) for seed in spec.seeds}
        try:
            done = {seed for seed, slog in logs.items() if slog.is_complete()}
        except StaleRunError as exc:
            raise ConfigError(str(exc)) from None
        for seed in done:
            logs[seed].discard_partial()
        outcomes = {seed: StreamOutcome(logs[seed].dir, seed, skipped=True) for seed in done}
        pending = [seed for seed in spec.seeds if seed not in done]
        total = _total([parts[seed][0] for seed in pending])
        enabled = spec.progress if spec.progress is not None else sys.stderr.isatty()
        desc = f"{spec.name} {spec.env.label} {spec.memory.label}"
        with tqdm(
            total=total, desc=desc, unit="ep", disable=not enabled or not pending, dynamic_ncols=True
        ) as bar:
            results = await asyncio.gather(
                *(_run_one(spec, seed, *parts[seed], backend, logs[seed], bar) for seed in pending),
                return_exceptions=True,
            )
    finally:
        for env, _ in parts.values():
            close = getattr(env, "close", None)
            if close is not None:
                close()
        aclose = getattr(backend, "aclose", None)
        if aclose is not None:
            await aclose()
    # A bug in one stream outranks an endpoint that is down in all of them.
    failures = sorted(
        (r for r in results if isinstance(r, BaseException)), key=lambda r: isinstance(r, BackendExhausted)
    )
    if failures and isinstance(failures[0], BackendExhausted):
        raise RunStopped(f"stopped: {failures[0]}; rerun the same command to resume") from None
    if failures:
        raise failures[0]
    outcomes.update(zip(pending, results, strict=True))
    return RunSummary(tuple(outcomes[seed] for seed in spec.seeds))


async def _run_one(
    spec: RunSpec, seed: int, env: Any, memory: Any, backend: Any, slog: StreamLog, bar: tqdm
) -> StreamOutcome:
    started, clock = datetime.now(UTC), time.perf_counter()
    replay = _until_failed_call(slog.replay())
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
        )
    finally:
        slog.close()
    meta = {
        **labels,
        "seed": seed,
        "replayed": len(replay),
        "started_at": started.isoformat(timespec="seconds"),
        "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "wall_time_s": round(time.perf_counter() - clock, 3),
        "backend_stats": backend.stats(),  # the run's backend, shared by its concurrent streams
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


def _stream_log(spec: RunSpec, seed: int) -> StreamLog:
    """A stream's log, keyed by the fingerprint of what determines its episodes."""
    identity = {
        "env": {"_target_": spec.env.target, **spec.env.params},
        "memory": {"_target_": spec.memory.target, **spec.memory.params},
        "llm": {
            "_target_": spec.llm.target,
            **{k: v for k, v in spec.llm.params.items() if k not in OPERATIONAL},
        },
        "seed": seed,
    }
    directory = stream_dir(spec.results_dir, spec.name, spec.env.label, spec.memory.label, seed)
    return StreamLog(directory, fingerprint(identity))


def _total(envs: list[Any]) -> int | None:
    """Episodes in all streams, when every environment knows its length (`len(env)`)."""
    try:
        return sum(len(env) for env in envs)
    except TypeError:
        return None


@functools.cache
def _versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {"python": sys.version.split()[0]}
    for name in VERSIONED:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
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
    summary = execute(cfg, HydraConfig.get().runtime.choices)
    if summary.streams:  # a plan ran nothing
        log.info(summary.describe())


def cli() -> None:
    """`python -m runners.run` / `tepa-run`: the checks Hydra's own output must not precede
    (`runners.preflight`: secrets, unwritable folders, broken YAML), then the Hydra entry point."""
    try:
        check_command_line(sys.argv[1:], CONF_DIR)
    except ConfigError as exc:
        sys.exit(f"error: {exc}")
    main()


if __name__ == "__main__":
    # Call the importable `runners.run.main`, not this `__main__` copy: launchers (joblib, submitit)
    # pickle the task function by reference, and a worker can import `runners.run` but not `__main__`.
    from runners.run import cli as _cli

    _cli()
