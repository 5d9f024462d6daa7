"""The offline simulated LLM: a deterministic stand-in *reader* of the rendered prompt.

It models how an LLM reads memory, not a real one; its numbers say what the memory methods would do
for a reader that behaves like this. It sees exactly the text a real model gets (the messages) and its
seed, never hidden state. The behaviour model, for a multiple-choice prompt with options o:

1. With probability `lapse` it answers a uniformly random option (attention slips).
2. Otherwise each option gets a score from the memory lines that name it (by the quoted value):
   a line with support s and conflicts f (raw observations: s=1 for VALID, f=1 for FAILED) adds
   `recency * (w_support * log1p(s) - w_failure * log1p(f))`, where
   `recency = 0.5 ** ((step - line_step) / half_life)`: counts saturate (a line saying "support 50"
   is not fifty times as convincing) and old lines fade but never vanish.
   An in-session statement (the hint line) naming an option adds `w_hint`.
3. It answers the best-scoring option; ties (e.g. no evidence at all) are broken by a uniformly random
   prior guess among the tied options.

For free-form questions (no options) the values named by memory lines play the options' part: with
probability `lapse` a uniformly random one, otherwise the best-scoring one (ties at random); "unknown"
without evidence.

Randomness comes from a splitmix64 generator seeded by blake2b(seed, prompt text), so the reply is a
function of the prompt and the seed alone. The parameters are global: calibrated once for all methods and
settings (`python -m runners.llm.simulated.calibrate`, see conf/llm/simulated.yaml), never per method.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import ClassVar

from runners.agent.prompt import EVIDENCE_LINE, HINT_PREFIX, LABELS, STEP_LINE, estimate_tokens
from runners.llm.backend import Reply, Request

#: The largest evidence weight. A score sums weight x log1p(count) (at most about 44 x weight) over a
#: prompt's lines: with weights near 1e308 it overflows, support and failure cancel to NaN and no option
#: is best. 1e6 keeps any prompt's sum finite; the reader's choices depend only on the weights' ratios.
MAX_WEIGHT = 1e6


@dataclass
class SimulatedBackend:
    lapse: float = 0.05
    w_support: float = 1.0
    w_failure: float = 1.0
    w_hint: float = 3.0
    half_life: float = 1000.0
    name: str = "simulated"
    operational: ClassVar[frozenset[str]] = frozenset()  # no calls, nothing to tune

    def __post_init__(self) -> None:
        if not 0.0 <= self.lapse <= 1.0:
            raise ValueError(f"lapse={self.lapse}: must be in [0, 1]")
        for field in ("w_support", "w_failure", "w_hint"):
            if not 0 <= getattr(self, field) <= MAX_WEIGHT:
                raise ValueError(f"{field}={getattr(self, field)}: must be in [0, {MAX_WEIGHT:g}]")
        if self.half_life <= 0:
            raise ValueError(f"half_life={self.half_life}: must be > 0")
        self._calls = 0
        self._lines: dict[str, tuple[str, int, float] | None] = {}
        self._blocks: dict[str, tuple[str, list[tuple[str, int, float]]]] = {}
        self._ages_decay: float | None = None
        self._ages: list[float] = []

    async def complete(self, request: Request) -> Reply:
        return self.answer(request)

    def answer(self, request: Request) -> Reply:
        """The synchronous core of `complete` (the simulated reader never waits)."""
        self._calls += 1
        prompt = request.messages[-1]["content"]
        rng = _SplitMix(hashlib.blake2b(f"{request.seed}\x00{prompt}".encode(), digest_size=8).digest())
        tail = prompt.rfind("\nOptions:\n")  # options come last; do not scan the memory lines for them
        options = _options(prompt[tail:]) if tail >= 0 else ()
        scores = self._scores(prompt)
        if options:
            answer = LABELS[self._choose(options, scores, prompt, rng)]
        else:
            answer = self._free_answer(scores, rng)
        return _reply(answer, estimate_tokens(request.messages))

    def _scores(self, prompt: str) -> dict[str, float]:
        step_m = STEP_LINE.search(prompt)
        now = int(step_m.group("t")) if step_m else 0
        lines = self._read_block(_evidence_block(prompt))
        decay = math.log(2.0) / self.half_life
        if len(lines) >= _TABLE_LINES:
            try:
                return _sum_scores(lines, now, self._recency(decay, now))
            except IndexError:  # a line older than the table goes (a negative step, or `now` past _MAX_AGE)
                pass
        return _sum_scores(lines, now, {now - t: math.exp((t - now) * decay) for _, t, _ in lines if t < now})

    def _recency(self, decay: float, now: int) -> list[float]:
        """The recency of a line by its age `now - step`, `exp(-age * decay)`, for every age up to `now`
        (none past _MAX_AGE), computed once per age: an exp per line was most of reading a long prompt
        (one of at least _TABLE_LINES lines; a shorter one computes its lines' own)."""
        if self._ages_decay != decay:
            self._ages_decay, self._ages = decay, []
        ages = self._ages
        if len(ages) <= now < _MAX_AGE:
            ages.extend(math.exp(-age * decay) for age in range(len(ages), now + 1))
        return ages

    def _read_block(self, block: str) -> list[tuple[str, int, float]]:
        """(value, step, weight) of each memory line of `block`, in order. A memory that keeps every
        observation of a key (Append-Only) shows that key's lines again at its next decision with new
        ones appended: a long block that extends the last one beginning with the same line reads only
        the lines after it. Any other block is read whole."""
        if len(block) < _SHORT_BLOCK:
            return self._read_lines(block)
        cut = block.find("\n")
        first = block if cut < 0 else block[:cut]
        last = self._blocks.get(first)
        done = len(last[0]) if last is not None else 0
        if last is not None and block.startswith(last[0]) and block[done : done + 1] in ("", "\n"):
            read = last[1] + self._read_lines(block[done + 1 :]) if len(block) > done else last[1]
        else:
            read = self._read_lines(block)
        if len(self._blocks) >= _BLOCKS:
            self._blocks.clear()
        self._blocks[first] = (block, read)
        return read

    def _read_lines(self, text: str) -> list[tuple[str, int, float]]:
        """`_read_line` of each memory line of `text`, those that are not None, cached per line: long
        prompts repeat the same lines episode after episode."""
        cache = self._lines
        if len(cache) > _LINE_CACHE:
            cache.clear()
        read = []
        for line in _evidence_lines(text):
            info = cache.get(line, _UNREAD)
            if info is _UNREAD:
                info = cache[line] = self._read_line(line)
            if info is not None:
                read.append(info)
        return read

    def _read_line(self, line: str) -> tuple[str, int, float] | None:
        """(value, step, weight before recency) of one memory line; None if it is not one."""
        m = EVIDENCE_LINE.match(line)
        if m is None:
            return None
        raw = m.group("value")
        value = json.loads(raw) if "\\" in raw else raw[1:-1]
        if m.group("s") is not None:
            s, f = int(m.group("s")), int(m.group("f"))
        else:
            s, f = (1, 0) if m.group("verdict") == "VALID" else (0, 1)
        return value, int(m.group("t")), self.w_support * math.log1p(s) - self.w_failure * math.log1p(f)

    def _free_answer(self, scores: dict[str, float], rng: _SplitMix) -> str:
        if not scores:
            return "unknown"
        values = sorted(scores)
        if rng.random() < self.lapse:
            return values[rng.randrange(len(values))]
        best = max(scores.values())
        tied = [v for v in values if scores[v] >= best - 1e-12]
        return tied[rng.randrange(len(tied))]

    def _choose(self, options: Sequence[str], scores: dict[str, float], prompt: str, rng: _SplitMix) -> int:
        if rng.random() < self.lapse:
            return rng.randrange(len(options))
        at = prompt.find(_HINT_LINE)
        if at < 0:  # no statement: the scores alone (adding 0.0 would change no comparison below)
            totals = list(map(scores.get, options, repeat(0.0)))
        else:
            hint = prompt[at + 1 : prompt.find("\n", at + 1)]
            totals = [scores.get(o, 0.0) + (self.w_hint if o and f'"{o}"' in hint else 0.0) for o in options]
        best = max(totals)
        tied = [i for i, v in enumerate(totals) if v >= best - 1e-12]
        return tied[rng.randrange(len(tied))]

    def stats(self) -> dict:
        return {"calls": self._calls}

    async def aclose(self) -> None:
        """Nothing to release."""


_LINE_START = "- [step "
_NEXT_LINE = "\n" + _LINE_START


def _sum_scores(
    lines: list[tuple[str, int, float]], now: int, recency: Sequence[float] | Mapping[int, float]
) -> dict[str, float]:
    """Each value's score: the sum, in line order, of its lines' weights times their recency by age (the
    hot loop of long prompts). A line at or after `now` adds its weight (1.0 * weight is weight)."""
    scores: dict[str, float] = {}
    get = scores.get
    for value, t, weight in lines:
        scores[value] = get(value, 0.0) + (recency[now - t] * weight if t < now else weight)
    return scores


def _evidence_block(prompt: str) -> str:
    """`prompt` from its first line that starts like a memory line to the end of the last ("" if none):
    memory lines come in one block, found without scanning the rest of the prompt."""
    if prompt.startswith(_LINE_START):
        start = 0
    elif not (start := prompt.find(_NEXT_LINE) + 1):
        return ""
    end = prompt.find("\n", prompt.rfind(_NEXT_LINE) + 1)
    return prompt[start:] if end < 0 else prompt[start:end]


def _evidence_lines(text: str) -> list[str]:
    """The lines of `text` that start like a memory line; of a block (`_evidence_block`), what a multiline
    `^- \\[step .*$` finds in its prompt. Checked with one count when every line is one."""
    lines = text.split("\n")
    if text.startswith(_LINE_START) and text.count(_NEXT_LINE) == len(lines) - 1:
        return lines
    return [line for line in lines if line.startswith(_LINE_START)]


def _option_texts(text: str) -> list[str]:
    """The text of every option line of `text`: what `runners.agent.prompt.OPTION_LINE` finds, split."""
    return [line[3:] for line in text.split("\n") if line[1:3] == ") " and "A" <= line[:1] <= "Z"]


@functools.lru_cache(maxsize=1 << 12)
def _options(tail: str) -> tuple[str, ...]:
    """`_option_texts` of a prompt's tail from its options line, remembered: a stream shows the same
    few option lists, with the same instruction after them, again and again."""
    return tuple(_option_texts(tail))


@functools.lru_cache(maxsize=1 << 12)
def _reply(answer: str, prompt_tokens: int) -> Reply:
    """The reply that gives `answer`, remembered (a Reply is immutable): building a frozen dataclass
    cost about as much as reading a short prompt, and a stream's replies repeat (a few letters, prompts
    of a few lengths)."""
    return Reply(text="Answer: " + answer, prompt_tokens=prompt_tokens, completion_tokens=3)


_HINT_LINE = "\n" + HINT_PREFIX
_LINE_CACHE = 200_000
_TABLE_LINES = 32  # memory lines from which a prompt reads its recency from the table by age
_MAX_AGE = 1 << 20  # the recency table's last age: older lines (or a later `now`) compute theirs per prompt
#: Characters: shorter memory blocks are read whole (remembering them would cost more than it saves).
_SHORT_BLOCK = 2048
_BLOCKS = 4096  # remembered blocks; emptied when full
_UNREAD = ("", 0, 0.0)  # a line not read yet (`_read_line` caches None for a line that is not evidence)


class _SplitMix:
    """A tiny, fast deterministic generator (splitmix64): seeding `random.Random` costs more than the
    whole decision."""

    _MASK = (1 << 64) - 1

    def __init__(self, seed: bytes) -> None:
        self._state = int.from_bytes(seed, "little")

    def _next(self) -> int:
        self._state = (self._state + 0x9E3779B97F4A7C15) & self._MASK
        z = self._state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & self._MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & self._MASK
        return z ^ (z >> 31)

    def random(self) -> float:
        return (self._next() >> 11) / float(1 << 53)

    def randrange(self, n: int) -> int:
        return self._next() % n
