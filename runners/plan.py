"""What a run will cost before it runs: `python -m runners.run ... plan=true` (also with `-m`: one line per
run of the sweep, then a TOTAL line).

Nothing is written and no endpoint is called. Hydra writes its job folders (`.hydra/`, `multirun.yaml`)
before a task function runs, so `runners.run.cli` hands `plan=true` to `main` here before Hydra starts:
each job's config is composed with Hydra's compose API, the sweep expanded as Hydra's basic sweeper
expands it (the experiment's `hydra.sweeper.params`, then the command line's).

For each run the streams and decisions are exact (`len(env)` per seed, at most `max_episodes`). The
model calls, prompt tokens and completion tokens come from one dry pass of the run's first seed, scaled
to all its seeds by their decisions: a stand-in reader plays the model (the newest VALID memory line that
names an option wins, as a reader that trusts fresh experience), memory follows its choices as in a run,
and the configured backend's scoring decides what is sent for each decision (with
`llm.option_logprobs`, one request per distinct prompt: what is sent when every option is among its
prompt's alternatives, as the preset one-token action names are; an option that is not costs one more).
Prompt tokens are counted
from the rendered prompts without a tokenizer (`runners.agent.prompt.count_tokens`), an *estimate*: the
real model's choices change what memory holds. Completion tokens are a *bound*: every call generating
the most it may (`llm.max_tokens` in text mode, one token per scored option or letter). The cost of each
is shown apart, per million tokens (`llm.price_in`, `llm.price_out`); cached replies are not subtracted.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from runners.agent.loop import run_stream
from runners.agent.prompt import EVIDENCE_LINE, LABELS, OPTION_LINE, count_message_tokens
from runners.config import ConfigError, RunSpec, validate
from runners.llm.backend import Reply, Request
from runners.llm.scoring import SCORINGS

# `plan=true` (or true's other spellings) as a command-line override, with or without `+` / `++`.
_PLAN_ON = re.compile(r"\+{0,2}plan=(true|yes|on|1)", re.IGNORECASE)
_MULTIRUN = ("-m", "--multirun")
_CONFIG_DIR = ("--config-dir", "-cd")


@dataclass(frozen=True)
class Plan:
    """What one run takes. `exact_calls`: whether the calls are known rather than scaled from the dry
    pass (every decision of it took the same number); `completion_tokens`: None when nothing bounds
    the replies' length."""

    streams: int
    decisions: int
    calls: int
    prompt_tokens: int
    completion_tokens: int | None
    price_in: float = 0.0
    price_out: float = 0.0
    exact_calls: bool = True
    unbounded: str = ""  # why nothing bounds the completion tokens, when nothing does

    @property
    def prompt_cost(self) -> float:
        return self.prompt_tokens * self.price_in / 1e6

    @property
    def completion_cost(self) -> float:
        return (self.completion_tokens or 0) * self.price_out / 1e6

    def describe(self, name: str = "") -> str:
        """One line; the estimate and the bound are named as such (`NOTE` says how they are made)."""
        completions = None if self.completion_tokens is None and self.price_out else self.completion_cost
        cost = _cost(self.prompt_cost, completions, bool(self.price_in or self.price_out))
        return f"plan{f' {name}' if name else ''}: {self._numbers()}{cost}"

    def _numbers(self) -> str:
        calls = f"{self.calls:,} model calls" if self.exact_calls else f"about {self.calls:,} model calls"
        if self.completion_tokens is None:
            bound = f"no bound on completion tokens ({self.unbounded or 'in some runs'})"
        else:
            bound = f"at most {self.completion_tokens:,} completion tokens (bound)"
        return (
            f"{self.streams:,} stream(s), {self.decisions:,} decisions, {calls}, "
            f"about {self.prompt_tokens:,} prompt tokens (estimate), {bound}"
        )


#: The line after the plans: what the estimate and the bound are.
NOTE = (
    "(prompt tokens: an estimate, from a dry pass of each run's first seed scaled to its seeds; completion "
    "tokens: a bound, every call generating its maximum; cost: $ is the currency of llm.price_in / "
    "llm.price_out, the prices of a million prompt / completion tokens)"
)


def money(amount: float) -> str:
    """An amount in the prices' currency: `$24.73`, `$1,234.50`; below a dollar four decimals
    (`$0.0042`), so that a small run's cost does not read as nothing."""
    return f"${amount:,.2f}" if amount >= 1 or amount == 0 else f"${amount:.4f}"


def _cost(prompts: float, completions: float | None, priced: bool) -> str:
    """The cost part of a line (`completions` None: unbounded); nothing when no price is set."""
    if not priced:
        return ""
    if completions is None:
        return f"; cost about {money(prompts)} (prompts) + an unbounded cost of completions"
    return (
        f"; cost about {money(prompts)} (prompts) + at most {money(completions)} (completions) "
        f"= at most about {money(prompts + completions)}"
    )


def total(plans: Sequence[Plan]) -> str:
    """The TOTAL line over the runs of a sweep (costs at each run's own prices)."""
    bounds = [p.completion_tokens for p in plans]
    summed = Plan(
        streams=sum(p.streams for p in plans),
        decisions=sum(p.decisions for p in plans),
        calls=sum(p.calls for p in plans),
        prompt_tokens=sum(p.prompt_tokens for p in plans),
        completion_tokens=None if None in bounds else sum(b or 0 for b in bounds),
        exact_calls=all(p.exact_calls for p in plans),
    )
    open_ended = any(p.completion_tokens is None and p.price_out for p in plans)
    completions = None if open_ended else sum(p.completion_cost for p in plans)
    cost = _cost(
        sum(p.prompt_cost for p in plans), completions, any(p.price_in or p.price_out for p in plans)
    )
    return f"TOTAL ({len(plans)} run(s)): {summed._numbers()}{cost}"


class _StandIn:
    """The model's stand-in in the dry pass: the newest VALID memory line that names an option (the
    value for a free-form question), else an option no FAILED line names, drawn from the seed. It reads
    the memory lines from the newest back, so it costs next to nothing however long the prompt."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def answer(self, request: Request) -> str:
        prompt = request.messages[-1]["content"]
        tail = prompt.rfind("\nOptions:\n")
        options = [m.group("text") for m in OPTION_LINE.finditer(prompt, tail)] if tail >= 0 else []
        failed: set[str] = set()
        end = tail if tail >= 0 else len(prompt)
        while (start := prompt.rfind("\n- [step ", 0, end)) >= 0:
            line = EVIDENCE_LINE.match(prompt, start + 1, end)
            end = start
            if line is None:
                continue
            value = line.group("value")[1:-1]
            if line.group("verdict") == "FAILED":
                failed.add(value)
            elif not options:
                return f"Answer: {value}"
            elif value in options and value not in failed:
                return f"Answer: {LABELS[options.index(value)]}"
        if not options:
            return "Answer: unknown"
        left = [i for i, o in enumerate(options) if o not in failed] or list(range(len(options)))
        return f"Answer: {LABELS[self.rng.choice(left)]}"


class _DryBackend:
    """Counts what the configured backend would send for each request; the stand-in answers."""

    name = "dry"

    def __init__(
        self, seed: int, scoring: str | None, max_tokens: int | None, option_logprobs: int = 0
    ) -> None:
        from runners.llm.openai_backend import planned_cost  # the openai client: imported here only

        self.planned_cost = planned_cost
        self.option_logprobs = option_logprobs
        self.reader = _StandIn(seed)
        self.scoring = scoring
        self.max_tokens = max_tokens
        self.calls = self.prompt_tokens = self.completion_tokens = 0
        self.open_ended = False  # a reply whose length nothing bounds (llm.max_tokens=null) was asked for

    async def complete(self, request: Request) -> Reply:
        if self.scoring is None:  # not an openai backend: one call per decision
            calls, prompt, completion = 1, count_message_tokens(request.messages), 0
        else:
            calls, prompt, completion = self.planned_cost(
                request, self.scoring, self.max_tokens, self.option_logprobs
            )
            scored = (SCORINGS.get(self.scoring) and request.options) or (
                self.scoring == "logprobs" and request.labels
            )
            self.open_ended |= self.max_tokens is None and not scored
        self.calls += calls
        self.prompt_tokens += prompt
        self.completion_tokens += completion
        return Reply(text=self.reader.answer(request), prompt_tokens=0, completion_tokens=0)

    def stats(self) -> dict:
        return {}


def plan(spec: RunSpec) -> Plan:
    """The plan of `spec`: one dry pass of its first seed, scaled to all seeds (module docstring)."""
    from runners.llm.openai_backend import OpenAIBackend, check_budget  # the openai client: here only

    params = spec.llm.params
    is_openai = issubclass(spec.llm.cls, OpenAIBackend)
    prices = (params.get("price_in", 0.0), params.get("price_out", 0.0)) if is_openai else (0.0, 0.0)
    scoring, max_tokens, option_logprobs = None, None, 0
    if is_openai:
        try:
            check_budget(params.get("max_total_tokens"), *prices)
        except ValueError as exc:
            raise ConfigError(f"llm.{exc}") from None
        scoring, max_tokens = params.get("scoring", "text"), params.get("max_tokens")
        option_logprobs = params.get("option_logprobs", 0)
    first = spec.seeds[0]
    dry = _DryBackend(first, scoring, max_tokens, option_logprobs)
    with contextlib.closing(spec.env.build()) as env:
        sampled = len(
            asyncio.run(
                run_stream(
                    env,
                    spec.memory.build(),
                    dry,
                    seed=first,
                    labels={},
                    max_episodes=spec.max_episodes,
                    max_evidence=spec.max_evidence,
                    ranker=spec.retrieval.ranker(),
                )
            ).records
        )
        decisions = sampled + sum(_decisions(env, seed, spec.max_episodes) for seed in spec.seeds[1:])
    scale = decisions / sampled if sampled else 0.0
    unbounded = (
        "not an openai backend" if scoring is None else "llm.max_tokens=null" if dry.open_ended else ""
    )
    return Plan(
        streams=len(spec.seeds),
        decisions=decisions,
        calls=round(dry.calls * scale),
        prompt_tokens=round(dry.prompt_tokens * scale),
        completion_tokens=None if unbounded else round(dry.completion_tokens * scale),
        price_in=prices[0],
        price_out=prices[1],
        exact_calls=len(spec.seeds) == 1 or (sampled > 0 and dry.calls % sampled == 0),
        unbounded=unbounded,
    )


def _decisions(env: object, seed: int, max_episodes: int | None) -> int:
    """The decisions of `env`'s stream for `seed` (at most `max_episodes`)."""
    env.reset(seed)  # type: ignore[attr-defined]
    n = len(env)  # type: ignore[arg-type]
    return n if max_episodes is None else min(n, max_episodes)


# --- the command line --------------------------------------------------------------------------------


def requested(argv: Sequence[str]) -> bool:
    """Whether the command line asks for a plan (`plan=true`); `main` then answers it without Hydra."""
    return any(_PLAN_ON.fullmatch(arg) for arg in argv)


def main(argv: Sequence[str], conf_dir: str) -> int:
    """Print the plan of every job the command line composes (a `-m` sweep: each job, then TOTAL);
    a config that cannot run gives one line on stderr and exit code 1. Writes nothing."""
    from hydra import initialize_config_dir
    from hydra.errors import HydraException

    from runners.compose import _one_line, compose_config
    from runners.launch import slurm_script

    multirun = any(arg in _MULTIRUN for arg in argv)
    overrides, search = _split(argv)
    try:
        with initialize_config_dir(config_dir=conf_dir, version_base="1.3"):
            jobs = _jobs(overrides + search, multirun)
            swept = _swept(jobs)
            plans = []
            for job in jobs:
                cfg = compose_config(job)
                spec = validate(cfg, cfg.hydra.runtime.choices)
                plans.append(plan(spec))
                print(plans[-1].describe(point_name(spec, job, swept)), flush=True)
            script = slurm_script.for_plan(cfg, jobs, _PLAN_ON) if multirun else ""  # submitit_slurm's
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except HydraException as exc:
        print(f"error: {_one_line(str(exc))}", file=sys.stderr)
        return 1
    if multirun:
        print(total(plans), flush=True)
    print(NOTE, flush=True)
    if script:
        print(script, flush=True)
    return 0


def _assignments(job: Sequence[str]) -> dict[str, str]:
    """A job's overrides as key -> value (`+`/`++` dropped; the last of a key wins)."""
    pairs = (o.split("=", 1) for o in job if "=" in o)
    return {key.lstrip("+~"): value for key, value in pairs}


def _swept(jobs: Sequence[Sequence[str]]) -> list[str]:
    """The keys whose value differs between the jobs of a sweep, in the order the first job sets them."""
    assigned = [_assignments(job) for job in jobs]
    keys = list(dict.fromkeys(k for a in assigned for k in a))
    return [k for k in keys if len({a.get(k) for a in assigned}) > 1]


def point_name(spec: RunSpec, job: Sequence[str], swept: Sequence[str]) -> str:
    """A plan line's name: experiment, env and memory labels, then the job's value of each swept key
    (`memory.theta_rev=0.3`), so that the points of a sweep are told apart; a swept group option the
    label already shows (`memory=lww` labelled lww) is not repeated."""
    assigned = _assignments(job)
    shown = {"env": spec.env.label, "memory": spec.memory.label}
    values = [
        f"{key}={assigned[key]}" for key in swept if key in assigned and shown.get(key) != assigned[key]
    ]
    return " ".join([spec.name, spec.env.label, spec.memory.label, *values])


def _split(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """The overrides of `argv`, and a `--config-dir` as the search-path override Hydra makes of it."""
    overrides, search, skip = [], [], False
    for i, arg in enumerate(argv):
        if skip:
            skip = False
        elif arg in _CONFIG_DIR and i + 1 < len(argv):
            search.append(argv[i + 1])
            skip = True
        elif arg.startswith("--config-dir="):
            search.append(arg.split("=", 1)[1])
        elif not arg.startswith("-"):
            overrides.append(arg)
    paths = ",".join(f"file://{Path(d).resolve()}" for d in search)
    return overrides, [f"hydra.searchpath=[{paths}]"] if search else []


def _jobs(overrides: list[str], multirun: bool) -> list[list[str]]:
    """Every job's overrides, as Hydra's basic sweeper makes them (one job without `-m`)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from runners.compose import compose_config

    parser = OverridesParser.create(config_loader=GlobalHydra.instance().config_loader())
    parsed = parser.parse_overrides(overrides)
    if not multirun:
        swept = next((o.input_line for o in parsed if o.is_sweep_override()), None)
        if swept is not None:
            raise ConfigError(f"{swept}: a sweep; add -m (--multirun) to plan every job of it")
        return [overrides]
    base = compose_config([o.input_line for o in parsed if not o.is_sweep_override()])
    params = [f"{k}={v}" for k, v in (base.hydra.sweeper.get("params") or {}).items()]
    batches = BasicSweeper.split_arguments(parser.parse_overrides(params + overrides), None)
    return [list(job) for batch in batches for job in batch]
