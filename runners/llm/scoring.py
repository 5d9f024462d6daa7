"""How the openai backend turns a multiple-choice decision into the prompts it scores (`llm.scoring`).

The modes are named here once (`SCORINGS`); `loglik` and the three debiased modes score every option's
text as the continuation of a completion-style prompt (`runners.llm.loglik`), so they need an endpoint
that returns prompt log-probabilities:

- `loglik`: the options listed as shown, each option's summed log-probability.
- `permuted`: the same, averaged over every rotation of the option list (each option is shown once at
  each position), so that a preference for a position adds the same to every option.
- `calibrated`: contextual calibration (Zhao et al. 2021, "Calibrate before use"): each option's
  log-probability minus its log-probability under the same prompt with the memory lines removed, so what
  is left is what the memory adds. With no memory both prompts are the same, so nothing is sent: every
  option scores 0 and the tie is broken at random (seeded by the stream and the prompt), not by position.
- `cloze`: the prompt lists no options (nothing to copy by position); each option's text is scored as the
  answer.

Why the prompt is reordered for real models (`prefix_first`): a server that caches the evaluated prompt
reuses it only up to the first token that differs. The harness's renderer puts the step number first, so
every decision was read from the top again; here what stays the same across a stream's decisions comes
first (the instructions, then the memory lines, with their count moved after them), the decision's own
text (step, task, session statement, options) last. The simulated reader reads the renderer's own order
(`runners.agent.prompt.render`), so its decisions do not change.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from runners.agent.prompt import (
    ANSWER_CUE,
    EVIDENCE_LINE,
    LABELS,
    LETTER_INSTRUCTION,
    NAME_INSTRUCTION,
    NO_MEMORY,
    OPTION_LINE,
)

#: Every `llm.scoring` mode, and whether it scores option texts by their prompt log-probabilities.
SCORINGS: dict[str, bool] = {
    "text": False,
    "logprobs": False,
    "loglik": True,
    "permuted": True,
    "calibrated": True,
    "cloze": True,
}
CLOZE_INSTRUCTION = "Reply with your choice."
MEMORY_HEADER = "Memory, oldest first:"
_OPTIONS_HEADER = "Options:"


@dataclass(frozen=True, slots=True)
class Decision:
    """A user message split into its parts: memory lines (empty: an empty memory shown; None: the message
    has no memory section), the decision's own lines (step, task, session statement) and the options'
    texts."""

    memory: tuple[str, ...] | None
    own: tuple[str, ...]
    options: tuple[str, ...]


def split_decision(user: str) -> Decision | None:
    """The parts of a rendered multiple-choice user message; None when it is not one (no option lines or
    lines this module does not know, e.g. a task with its own layout): it is then sent as rendered."""
    lines = user.split("\n")
    memory: list[str] | None = None
    own: list[str] = []
    options: list[str] = []
    section = "own"
    for line in lines:
        if line == LETTER_INSTRUCTION:
            section = "end"
        elif section == "end":
            return None
        elif line == _OPTIONS_HEADER:
            section = "options"
        elif section == "options":
            match = OPTION_LINE.match(line)
            if match is None:
                return None
            options.append(match["text"])
        elif line == NO_MEMORY and memory is None:
            memory, section = [], "own"
        elif memory is None and line.startswith("Memory (") and line.endswith(" entries, oldest first):"):
            memory, section = [], "memory"
        elif section == "memory" and EVIDENCE_LINE.match(line):
            memory.append(line)
        else:
            section = "own"
            own.append(line)
    if section != "end" or not options:
        return None
    return Decision(None if memory is None else tuple(memory), tuple(own), tuple(options))


def prefix_first(system: str, decision: Decision, options: Sequence[str] | None, memory: bool = True) -> str:
    """The completion-style prompt, shared part first: instructions, memory lines, then the decision's
    own lines, the options in the order given (None: no option list, the cloze prompt) and the answer
    cue. `memory=False` leaves the memory lines out (the calibration prompt)."""
    parts = [system, ""]
    if memory and decision.memory:
        parts += [MEMORY_HEADER, *decision.memory, f"({len(decision.memory)} entries)"]
    elif decision.memory is not None:
        parts.append(NO_MEMORY)
    parts += decision.own
    if options is None:
        parts.append(CLOZE_INSTRUCTION)
    else:
        parts += [_OPTIONS_HEADER, *(f"{LABELS[i]}) {o}" for i, o in enumerate(options)), NAME_INSTRUCTION]
    return "\n".join(parts) + f"\n{ANSWER_CUE}"


def rotations(options: Sequence[str]) -> list[tuple[str, ...]]:
    """Every rotation of the option list, the shown order first."""
    return [tuple(options[r:]) + tuple(options[:r]) for r in range(len(options))]


@dataclass(frozen=True, slots=True)
class Plan:
    """The prompts one decision is scored by: `prompts[i]` scores `options[option_of[i]]` with weight
    `weight[i]`; an option's score is the weighted sum of its prompts' log-likelihoods (0 without
    prompts). `shown` is the prompt as the decision shows it (ties are drawn from it)."""

    prompts: tuple[str, ...]
    option_of: tuple[int, ...]
    weight: tuple[float, ...]
    shown: str


def plan_prompts(scoring: str, system: str, decision: Decision, options: Sequence[str]) -> Plan:
    """The prompts (without the option continuation) that `scoring` sends for a decision between
    `options` (the shown order), and how their scores combine. Prompts that share a prefix are adjacent,
    so that a server caching the last prompt evaluates it once."""
    k = len(options)
    if scoring == "loglik":
        base = prefix_first(system, decision, options)
        return Plan((base,) * k, tuple(range(k)), (1.0,) * k, base)
    if scoring == "cloze":
        base = prefix_first(system, decision, None)
        return Plan((base,) * k, tuple(range(k)), (1.0,) * k, base)
    if scoring == "permuted":
        prompts, option_of = [], []
        for order in rotations(options):
            base = prefix_first(system, decision, order)
            for text in order:
                prompts.append(base)
                option_of.append(options.index(text))
        return Plan(tuple(prompts), tuple(option_of), (1.0 / k,) * len(prompts), prompts[0])
    if scoring == "calibrated":
        with_memory = prefix_first(system, decision, options)
        if not decision.memory:  # both prompts are the same: every option scores 0, nothing to ask
            return Plan((), (), (), with_memory)
        without = prefix_first(system, decision, options, memory=False)
        return Plan(
            (with_memory,) * k + (without,) * k, tuple(range(k)) * 2, (1.0,) * k + (-1.0,) * k, with_memory
        )
    raise ValueError(f"scoring={scoring!r}: does not score option texts")


def tie_order(seed: int, prompt: str, n: int) -> list[int]:
    """A deterministic pseudo-random preference among `n` options (stream seed and prompt), for ties: a
    calibrated decision without memory scores every option 0, and breaking that tie by position would
    put the bias back."""

    def digest(i: int) -> bytes:
        return hashlib.sha256(f"{seed}\n{i}\n{prompt}".encode()).digest()

    return sorted(range(n), key=digest)


def as_completion_prompt(messages: Sequence[dict[str, str]]) -> tuple[str, Decision] | None:
    """(system text, the decision) when `messages` are a rendered system + user multiple-choice prompt;
    None otherwise."""
    if len(messages) != 2 or messages[0].get("role") != "system" or messages[1].get("role") != "user":
        return None
    decision = split_decision(messages[1]["content"])
    return None if decision is None else (messages[0]["content"], decision)
