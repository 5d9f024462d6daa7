"""executable_drift: controlled drift in which every action is a real tool invocation on real files.

K jobs (archive a folder, convert a CSV to JSON, write a checksum, write a config, publish a file),
each with A candidate invocations; the hidden regime is the version of each tool (see the `tools`
module).
Phases, `phase_length` episodes each: stable (every tool at its stable version) -> full_reversal (every
tool at a new version) -> partial_reversal (a `partial_fraction` of the tools, drawn at random, move
to a third version they have not had, or back to the stable one when A = 2) -> return (the stable
versions exactly). Jobs of one tool drift together, as users of one tool do.

An action runs for real in a per-run sandbox (a temporary directory named after the owning process, removed
by `close()`, at `reset` and at exit; a sandbox whose process died without removing it is removed by the
next `reset` in the same place, see `remove_stale_sandboxes`): the job's inputs are restored and its old
artefacts removed, the command line goes through the gate of the `sandbox` module (shlex, a tool whitelist,
every path confined), a persistent worker (shared by the environments open in one process, e.g. a run's
seeds) runs the tool under a time limit (the `worker` module; a call whose worker died, e.g. killed
from outside, is run once more from the swept sandbox, so a restart changes no outcome; the agent loop
awaits `execute_async`, which sends the call in one batch with the other seeds' waiting calls, and a
call its batch left unanswered runs again alone the same way), and success is decided on disk: the
expected artefact exists with the expected content and format. A stale invocation fails with the tool's
real argparse error, or runs and leaves the wrong artefact, which the check reports.
(Parsing touches nothing, so a call that argparse rejects gets that error from the environment itself,
without a worker round trip.)

Before every call the job's inputs are restored and its artefact paths cleared (before the paths are
checked, so a link planted where an input belongs is replaced rather than refused forever), so an
outcome depends only on the job, the action and the versions, never on what earlier (possibly garbage)
actions left. After every call that reached a tool the sandbox is swept: whatever is not a job's input
or artefact is removed, and the artefacts too when they pass SANDBOX_BUDGET bytes, so the sandbox stays
the size of the jobs' files whatever actions write. (A call refused before it reached a tool ran
nothing but the restore, which writes only what the sweep keeps; its sweep would remove nothing.)

Trials (TEPA-Full) run in a separate trial directory under the versions of the latest task, and draw
from their own RNG, so they never touch the stream or the main sandbox:
- support: run the precedent's invocation for its own job; passes iff the job's artefact is right.
- counterfactual: run it for its own job under the tool's *other* version (the stable one, or the
  full-reversal one when the tool is at its stable version), where a precise precedent should not
  apply; passes iff it does not succeed there.
- contamination: prepare a random other job, run the precedent, then run the other job's current
  invocation on the inputs as the precedent left them; passes iff that still succeeds (the
  precedent broke nothing). Candidate invocations touch only their own job's files, so this bites
  on free-form actions, e.g. one that overwrites another job's input.
A precedent whose key is not a job or whose value is not a command line fails every trial.

Two perturbations, both off by default (`envs.perturbation` defines them exactly): outcome noise
(`noise`, `false_success`: a right invocation reported failed, a wrong one reported succeeded; scoring
uses the true outcome) and random reversals (`reversal_rate`: a per-tool hazard per episode; a reversal
returns the tool to its previous version, or from its first version to another its jobs offer).
"""

from __future__ import annotations

import math
import os
import random
import shutil
import tempfile
from collections.abc import Awaitable, Callable, Coroutine, Hashable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from numbers import Real
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from envs.base import MAX_KEYS, TRIAL_KINDS, EnvironmentBase, Outcome, Task
from envs.executable_drift.sandbox import Layout, Refused, Sandbox, check_invocation, split_invocation
from envs.executable_drift.tools import FLAVOURS, TOOLS, VERSIONS, Tool, subject_for
from envs.executable_drift.worker import SharedToolWorker, ToolFn
from envs.perturbation import OutcomeNoise, ReversalSchedule, check_reversal_rate
from tepa.evidence import Observation
from tepa.validation import check_fraction, check_int

PHASES = ("stable", "full_reversal", "partial_reversal", "return")
SANDBOX_PREFIX = "tepa-executable-"
SANDBOX_BUDGET = 4 * 2**20  # bytes of artefacts a sandbox keeps between calls (correct ones: < 10 kB)
_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class Job:
    """One task key: a tool applied to one subject, with its candidate invocations and input files."""

    key: int
    tool: Tool
    subject: str
    text: str
    options: tuple[str, ...]
    fixture: Mapping[str, bytes]


class ExecutableDrift(EnvironmentBase):
    """The executable-drift environment (see the module docstring).

    `tools` picks which of the built-in tools jobs use (job k uses tool k mod len(tools));
    `extra_tools` adds invocable tools by name, `(argv, version, root) -> message` functions that
    pickle by reference (tests use it for a tool that hangs). `time_limit` bounds every call in seconds.
    `sandbox_dir` is where the per-run sandbox is created (default: /dev/shm if present, else the
    system temp dir).
    """

    name = "executable_drift"
    operational: ClassVar[frozenset[str]] = frozenset({"sandbox_dir"})  # where the sandbox lives

    def __init__(
        self,
        *,
        n_keys: int = 5,
        n_actions: int = 3,
        phase_length: int = 400,
        partial_fraction: float = 0.5,
        time_limit: float = 2.0,
        tools: Iterable[str] | None = None,
        extra_tools: Mapping[str, ToolFn] | None = None,
        sandbox_dir: str | None = None,
        noise: float = 0.0,
        false_success: float | None = None,
        reversal_rate: float = 0.0,
    ) -> None:
        self.n_keys = check_int("n_keys", n_keys, 2, MAX_KEYS)
        self.n_actions = check_int("n_actions", n_actions, 2, len(FLAVOURS))
        self.phase_length = check_int("phase_length", phase_length, 1)
        self.partial_fraction = check_fraction("partial_fraction", partial_fraction)
        if isinstance(time_limit, bool) or not isinstance(time_limit, Real) or not 0 < time_limit < math.inf:
            raise ValueError(f"time_limit must be a positive number of seconds, got {time_limit!r}")
        self.time_limit = float(time_limit)
        self.outcome_noise = OutcomeNoise(noise, false_success)
        self.reversal_rate = check_reversal_rate(reversal_rate)
        self._tools = _tools(tools)
        extra = dict(extra_tools or {})
        clash = sorted(set(extra) & set(TOOLS))
        if clash or not all(isinstance(n, str) and n and callable(f) for n, f in extra.items()):
            raise ValueError(f"extra_tools must map new tool names to functions, got {sorted(extra)!r}")
        if sandbox_dir is not None and not os.path.isdir(sandbox_dir):
            raise ValueError(f"sandbox_dir must be an existing directory, got {sandbox_dir!r}")
        self.sandbox_dir = sandbox_dir if sandbox_dir is not None else _ram_disk()
        self._allowed = frozenset(t.name for t in self._tools) | frozenset(extra)
        self._worker = SharedToolWorker(extra)
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._main: Sandbox | None = None
        self._trial: Sandbox | None = None
        self._seed: int | None = None
        self._jobs: dict[int, Job] = {}
        self._regimes: list[dict[str, str]] = []
        self._schedule: ReversalSchedule | None = None  # random reversals, when reversal_rate > 0
        self._noise: list[float] = []  # per-episode draws of the outcome noise, when there is noise
        self._layout = Layout({}, frozenset())
        self._trial_rng = random.Random(0)
        self._now = 0
        self._regime_t, self._regime = -1, {}  # the last regime asked for and its episode: see _regime_at
        self._tool_calls = 0  # calls that reached a tool: only those can leave what a sweep removes
        self._touched: list[str] | None = []  # what the calls since the last sweep wrote (None: unknown)
        self._died = False  # a call of the current try found its process dead (see _swept)
        self._unanswered = False  # a call of the current try was left unanswered by its batch

    # ----- the protocol
    def __len__(self) -> int:
        """Decision episodes in the stream (for progress bars)."""
        return len(PHASES) * self.phase_length

    @property
    def phase_boundaries(self) -> list[tuple[int, str]]:
        return [(i * self.phase_length, phase) for i, phase in enumerate(PHASES) if i]

    @property
    def sandbox(self) -> Sandbox:
        """The main stream's sandbox (its root is the working directory of every tool call)."""
        self._require_reset()
        assert self._main is not None
        return self._main

    @property
    def worker(self) -> SharedToolWorker:
        return self._worker

    @property
    def jobs(self) -> tuple[Job, ...]:
        """The jobs of the current seed, indexed by key."""
        self._require_reset()
        return tuple(self._jobs.values())

    def reset(self, seed: int) -> None:
        self._seed = check_int("seed", seed, 0)
        self._remove_sandbox()
        remove_stale_sandboxes(self.sandbox_dir)
        owner = f"{SANDBOX_PREFIX}{os.getpid()}-"
        self._tmp = tempfile.TemporaryDirectory(prefix=owner, dir=self.sandbox_dir)
        root = Path(self._tmp.name)
        (root / "main").mkdir()
        (root / "trial").mkdir()
        self._main, self._trial = Sandbox(root / "main"), Sandbox(root / "trial")
        rng = random.Random(f"{self.name}/{self._seed}/regimes")
        self._regimes, chosen = self._draw_regimes(rng)
        self._jobs = {k: self._make_job(k, chosen, rng) for k in range(self.n_keys)}
        self._rendered: dict[tuple[int, str], str] = {}  # see _invocation
        self._layout = Layout.of(
            {p: d for job in self._jobs.values() for p, d in job.fixture.items()},
            [out for job in self._jobs.values() for out in job.tool.outputs(job.subject)],
        )
        self._trial_rng = random.Random(f"{self.name}/{self._seed}/trials")
        self._schedule = None
        if self.reversal_rate > 0:
            self._schedule = ReversalSchedule(
                [i * self.phase_length for i in range(len(PHASES))],
                self._regimes,
                chosen,
                self.reversal_rate,
                len(self),
                random.Random(f"{self.name}/{self._seed}/reversals"),
            )
        self._noise = self.outcome_noise.draws(random.Random(f"{self.name}/{self._seed}/noise"), len(self))
        self._now = 0
        self._regime_t = -1  # see _regime_at

    def tasks(self) -> Iterator[Task]:
        self._require_reset()
        return self._stream(random.Random(f"{self.name}/{self._seed}/tasks"))

    def execute(self, task: Task, action: str) -> Outcome:
        """Run `action` for the task's job. A refused, failed or stopped call is a failure with the
        reason as message; an action that is not a command line at all (not a string, empty, too long,
        unbalanced quotes) writes no observation: there is no invocation to remember."""
        return _at_once(self._execute(task, action, batched=False))

    async def execute_async(self, task: Task, action: str) -> Outcome:
        """`execute`, with the tool call sent in one batch with the calls of the other streams of this
        process that wait at the same time (`SharedToolWorker.submit`): the same outcome, in a shared
        round trip to the worker."""
        return await self._execute(task, action, batched=True)

    async def _execute(self, task: Task, action: str, batched: bool) -> Outcome:
        self._require_reset()
        job = self._job_of(task.key)
        t = check_int("task.t", task.t, 0, len(PHASES) * self.phase_length - 1)
        self._now = t
        try:
            argv = split_invocation(action)
        except Refused as exc:
            return Outcome(False, (), str(exc))
        regime = self._regime_at(t)
        sandbox = self.sandbox
        success, message = await self._swept(
            sandbox, lambda batch: self._attempt(sandbox, job, argv, regime, batched=batch), batched
        )
        reported = self._reported(success, self._noise[t] if self._noise else None)
        if reported != success:
            message = "" if reported else "the job's check did not pass"
        text = f'"{action}" succeeded' if reported else f'"{action}" failed: {message}'
        obs = Observation(task.key, action, reported, t, text, "outcome")
        return Outcome(success, (obs,), message, reported=reported)

    def trial(self, precedent: Any, kind: str) -> bool:
        if kind not in TRIAL_KINDS:
            raise ValueError(f"kind must be one of {TRIAL_KINDS}, got {kind!r}")
        self._require_reset()
        key, value = getattr(precedent, "key", None), getattr(precedent, "value", None)
        job = _lookup(self._jobs, key)
        if job is None:
            return False
        try:
            argv = split_invocation(value)
        except Refused:
            return False
        sandbox = self._trial
        assert sandbox is not None
        other = None
        if kind == "contamination":
            other = self._jobs[self._trial_rng.choice([k for k in self._jobs if k != job.key])]
        # the trial's noise draw, made before it runs, so that a rerun (`_swept`) draws nothing more
        u = self._trial_rng.random() if self.outcome_noise.active else None
        return _at_once(self._swept(sandbox, lambda _: self._run_trial(sandbox, job, argv, kind, other, u)))

    def truth(self, key: Hashable) -> str | None:
        """The invocation that does job `key` under the tools' versions at the latest task (what that
        task's `correct` holds; None: not a job)."""
        self._require_reset()
        job = _lookup(self._jobs, key)
        return None if job is None else self._invocation(job, self._regime_at(self._now)[job.tool.name])

    def _invocation(self, job: Job, version: str) -> str:
        """The job's right invocation under `version`, rendered once per stream (the tasks and the
        truth of every decision ask for it again)."""
        right = self._rendered.get((job.key, version))
        if right is None:
            right = self._rendered[(job.key, version)] = job.tool.invocation(job.subject, version)
        return right

    async def _run_trial(
        self, sandbox: Sandbox, job: Job, argv: list[str], kind: str, other_job: Job | None, u: float | None
    ) -> bool:
        regime = self._regime_at(self._now)
        if kind == "support":
            return self._reported((await self._attempt(sandbox, job, argv, regime))[0], u)
        if kind == "counterfactual":
            tool = job.tool.name
            stable, full = self._regimes[0][tool], self._regimes[1][tool]
            other = dict(regime, **{tool: full if regime[tool] == stable else stable})
            return not self._reported((await self._attempt(sandbox, job, argv, other))[0], u)
        assert other_job is not None
        other_job.tool.prepare(sandbox, other_job.subject, other_job.fixture)
        await self._attempt(sandbox, job, argv, regime)
        correct = split_invocation(other_job.tool.invocation(other_job.subject, regime[other_job.tool.name]))
        ok, _ = await self._attempt(sandbox, other_job, correct, regime, restore_inputs=False)
        return self._reported(ok, u)

    def _reported(self, success: bool, u: float | None) -> bool:
        """What the agent is told about an execution (`u`: its noise draw, None without noise)."""
        return success if u is None else self.outcome_noise.report(success, u)

    # ----- beyond the protocol
    def versions_at(self, t: int) -> dict[str, str]:
        """The hidden regime at episode `t`: tool name -> version."""
        self._require_reset()
        return dict(self._regime_at(t))

    def close(self) -> None:
        """Stop the tool worker and remove the sandbox (idempotent; `reset` starts afresh)."""
        self._worker.close()
        self._remove_sandbox()
        self._seed = None

    def __enter__(self) -> ExecutableDrift:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----- internals
    async def _attempt(
        self,
        sandbox: Sandbox,
        job: Job,
        argv: list[str],
        regime: Mapping[str, str],
        restore_inputs: bool = True,
        batched: bool = False,
    ) -> tuple[bool, str]:
        """Run `argv` for `job` in `sandbox` under `regime`: the one place success is decided. `batched`:
        the call waits for a batch (`SharedToolWorker.submit`); one the batch left unanswered counts as
        a call whose process died (see `_swept`)."""
        tool = job.tool
        tool.prepare(sandbox, job.subject, job.fixture, restore_inputs)  # first: a planted link goes
        try:
            check_invocation(argv, self._allowed, sandbox)
        except Refused as exc:
            return False, str(exc)
        version = regime.get(argv[0], "")
        program = TOOLS.get(argv[0])
        usage = program.usage_error(argv[1:], version) if program is not None else None
        if usage is not None:
            return False, usage
        self._tool_calls += 1
        call = (argv[0], argv[1:], version, str(sandbox.root), self.time_limit)
        result = (await self._worker.submit(call)) if batched else self._worker.run(call)
        if result is None:
            self._unanswered = True
            return False, "the batch was not answered"
        self._died = self._died or result.died
        written = program.written(argv[1:], version) if program is not None else None
        path = None
        if written is not None and not result.stopped:
            path = sandbox.named(written)
        sandbox.forget(path)  # an input it wrote in place is read again before the next call
        if self._touched is not None:  # see _swept
            if path is None:
                self._touched = None
            else:
                self._touched.append(path)
        if not result.ok:
            return False, result.message
        problem = tool.verify(sandbox, job.subject, job.fixture, regime[tool.name])
        return (True, result.message) if problem is None else (False, problem)

    async def _swept(
        self, sandbox: Sandbox, run: Callable[[bool], Awaitable[_T]], batched: bool = False
    ) -> _T:
        """`run(batched)`, then `sandbox` swept when it reached a tool (see `_tool_calls`). Run again from
        the swept sandbox, one call at a time, when the tool process died under it: a worker killed from
        outside must not change an outcome (a call that kills it twice is a failure, as on any run). A
        call a batch left unanswered is run again the same way, and that does not count as a try.

        The sweep is told the paths the built-in tools wrote (`Tool.written`; the restore before a call
        adds and removes files, which their folders show): then it lists only the folders that changed
        (`Sandbox.sweep`). A call that was stopped, or of a tool whose writes are not known (`extra_tools`),
        makes it list every folder."""
        calls = self._tool_calls
        try:
            result = await self._tried(sandbox, run, batched)
            if self._unanswered:
                result = await self._tried(sandbox, run, False, swept=True)
            if self._died:
                result = await self._tried(sandbox, run, False, swept=True)
            return result
        finally:
            if self._tool_calls != calls:
                sandbox.sweep(self._layout, SANDBOX_BUDGET, self._touched)

    async def _tried(
        self, sandbox: Sandbox, run: Callable[[bool], Awaitable[_T]], batched: bool, swept: bool = False
    ) -> _T:
        """One try of `run`, from a swept sandbox when `swept` (a try before it may have left anything)."""
        if swept:
            sandbox.sweep(self._layout, SANDBOX_BUDGET)
        self._touched, self._died, self._unanswered = [], False, False
        return await run(batched)

    def _stream(self, rng: random.Random) -> Iterator[Task]:
        for t in range(len(PHASES) * self.phase_length):
            key = rng.randrange(self.n_keys)
            job, regime = self._jobs[key], self._regime_at(t)
            version = regime[job.tool.name]
            self._now = t
            right = self._invocation(job, version)
            yield Task(
                key=key,
                text=job.text,
                phase=PHASES[t // self.phase_length],
                t=t,
                options=_shuffled(rng, job.options),
                correct=right,
                meta={"tool": job.tool.name, "version": version},
            )

    def _draw_regimes(self, rng: random.Random) -> tuple[list[dict[str, str]], dict[str, tuple[str, ...]]]:
        """Per phase, tool -> version; and per tool, the versions it takes (which its jobs offer)."""
        names = [tool.name for tool in self._tools]
        picks = {name: tuple(rng.sample(sorted(VERSIONS), 3)) for name in names}
        stable = {name: picks[name][0] for name in names}
        full = {name: picks[name][1] for name in names}
        moved = rng.sample(names, max(1, round(self.partial_fraction * len(names))))
        third = 2 if self.n_actions >= 3 else 0
        partial = {name: picks[name][third] if name in moved else full[name] for name in names}
        chosen = {name: tuple(dict.fromkeys((stable[name], full[name], partial[name]))) for name in names}
        return [stable, full, partial, dict(stable)], chosen

    def _make_job(self, key: int, chosen: Mapping[str, tuple[str, ...]], rng: random.Random) -> Job:
        """Job `key`: its tool, subject and A candidate invocations (the versions' flavours first)."""
        tool = self._tools[key % len(self._tools)]
        subject = subject_for(tool, key // len(self._tools))
        needed = [(VERSIONS[v].syntax, VERSIONS[v].convention) for v in chosen[tool.name]]
        spare = [f for f in FLAVOURS if f not in needed]
        flavours = needed + rng.sample(spare, self.n_actions - len(needed))
        return Job(
            key=key,
            tool=tool,
            subject=subject,
            text=f"Job {key}: {tool.describe(subject)}.",
            options=tuple(tool.render(f, subject) for f in sorted(flavours)),
            fixture=tool.fixture(subject),
        )

    def _regime_at(self, t: int) -> dict[str, str]:
        """The regime at episode `t` (read-only: the last one is kept, as the task, the call and the
        truth of one episode ask for it in turn)."""
        if t == self._regime_t:
            return self._regime
        regime = self._regimes[min(max(t, 0) // self.phase_length, len(PHASES) - 1)]
        if self._schedule is not None:
            regime = {name: self._schedule.at(name, t) for name in regime}
        self._regime_t, self._regime = t, regime
        return regime

    def _job_of(self, key: Any) -> Job:
        job = _lookup(self._jobs, key)
        if job is None:
            raise ValueError(
                f"task.key must be a job of this environment (0..{self.n_keys - 1}), got {key!r}"
            )
        return job

    def _remove_sandbox(self) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()
        self._tmp, self._main, self._trial = None, None, None

    def _require_reset(self) -> None:
        if self._seed is None:
            raise RuntimeError(f"{self.name}: call reset(seed) before using the environment")


def _at_once(work: Coroutine[Any, Any, _T]) -> _T:
    """The result of `work`, a coroutine that never suspends (its tool calls are made at once, not
    batched): the synchronous `execute` and `trial` share the asynchronous path's code."""
    try:
        work.send(None)
    except StopIteration as done:
        return done.value
    work.close()
    raise RuntimeError("a tool call made at once waited for a batch")


def _shuffled(rng: random.Random, options: tuple[str, ...]) -> tuple[str, ...]:
    """`tuple(rng.sample(options, len(options)))`, drawn as CPython's `sample` draws a whole population
    (always its pool path: one `_randbelow` per pick, the pool's last element moved into the gap),
    without its argument checks and set-size arithmetic, which cost more than the draws (a test holds it
    to `sample`)."""
    n = len(options)
    pool = list(options)
    picked = []
    randbelow = rng._randbelow  # type: ignore[attr-defined]
    for i in range(n):
        j = randbelow(n - i)
        picked.append(pool[j])
        pool[j] = pool[n - i - 1]
    return tuple(picked)


def remove_stale_sandboxes(parent: str | None) -> list[Path]:
    """Remove the sandboxes in `parent` (None: the temp dir) whose owning process is gone, and return them.

    A sandbox is named `tepa-executable-<owner pid>-<random>`. Its owner removes it on close, at exit
    and when a run is stopped by SIGINT or SIGTERM; a process killed outright (SIGKILL, a crash) cannot,
    so the next environment created in the same place does. A pid that is alive (or that belongs to
    another user) keeps its sandbox."""
    removed = []
    for path in Path(parent or tempfile.gettempdir()).glob(f"{SANDBOX_PREFIX}*"):
        pid = path.name.removeprefix(SANDBOX_PREFIX).split("-", 1)[0]
        if pid.isdigit() and not _alive(int(pid)) and path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _ram_disk() -> str | None:
    """/dev/shm when the system has it (joblib does the same): a run creates and deletes files some 10^5
    times, which costs milliseconds each on some disks and microseconds in RAM. None: the temp dir."""
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK | os.X_OK) else None


def _lookup(jobs: Mapping[int, Job], key: Any) -> Job | None:
    """The job of an untrusted key (None for unknown or unhashable keys)."""
    try:
        return jobs.get(key)
    except TypeError:
        return None


def _tools(names: Iterable[str] | None) -> tuple[Tool, ...]:
    if names is None:
        return tuple(TOOLS.values())
    chosen = [names] if isinstance(names, str) else list(names)
    if not chosen or len(set(chosen)) != len(chosen) or not set(chosen) <= set(TOOLS):
        raise ValueError(f"tools must be distinct names among {sorted(TOOLS)}, got {chosen!r}")
    return tuple(TOOLS[name] for name in chosen)
