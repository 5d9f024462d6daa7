"""Render a task and its retrieved evidence into the chat prompt every backend reads.

The format is plain enough for a real model and regular enough that the simulated backend reads the
*same text* back (it never sees hidden state): evidence lines match `EVIDENCE_LINE`, options match
`OPTION_LINE`, an in-session statement starts with `HINT_PREFIX`.
"""

from __future__ import annotations

import functools
import json
import operator
import re
from collections.abc import Callable, Sequence
from string import ascii_uppercase

from envs.base import Task
from tepa.evidence import Evidence

SYSTEM_PROMPT = (
    "You are an agent working in a world that can change. Your memory lists past experience, oldest "
    "first; it may be stale or contradictory, so weigh it against what the current session says. "
    "Pick the option most likely to succeed now."
)
HINT_PREFIX = "The session says: "
LETTER_INSTRUCTION = 'Reply with the letter of one option, as "Answer: X".'
# A completion-style prompt (a base model, or scoring options by their text) asks for the option itself.
NAME_INSTRUCTION = "Reply with one option, as it is written."
ANSWER_CUE = "Answer:"
NO_MEMORY = "Memory: (empty)"
LABELS = ascii_uppercase
# Every character that can end a line for some reader (str.splitlines, Unicode: \r \v \f \x1c-\x1e
# \x85 \u2028 \u2029) or is a control character (C0, DEL, C1) becomes a space.
_ONE_LINE = str.maketrans(dict.fromkeys([*range(0x20), *range(0x7F, 0xA0), 0x2028, 0x2029], " "))

EVIDENCE_LINE = re.compile(
    r'^- \[step (?P<t>-?\d+)\] (?P<verdict>VALID|FAILED) (?P<value>"(?:[^"\\]|\\.)*")'
    r"(?: \(support (?P<s>\d+), conflicts (?P<f>\d+)\))?:",
    re.MULTILINE,
)
OPTION_LINE = re.compile(r"^(?P<label>[A-Z])\) (?P<text>.*)$", re.MULTILINE)
STEP_LINE = re.compile(r"^Step (?P<t>-?\d+)\.", re.MULTILINE)


# JSON leaves these raw when it keeps non-ASCII text as it is; they could end a line, so they stay escaped.
_ESCAPE_IN_VALUE = {c: f"\\u{c:04x}" for c in (*range(0x7F, 0xA0), 0x2028, 0x2029)}


def quoted(value: str) -> str:
    """`value` as a JSON string literal showing its text as it is (`"pesäpallo"`, not `"pes\\u00e4pallo"`), so
    that the memory line and the options spell a value alike; a character that could end a line stays
    escaped (the reader's json.loads restores it). The viewer's page quotes by the same rule."""
    return json.dumps(value, ensure_ascii=False).translate(_ESCAPE_IN_VALUE)


@functools.lru_cache(maxsize=1 << 16)
def evidence_line(e: Evidence) -> str:
    """One memory line: step, verdict, the value (quoted), counts where the method keeps them.
    Cached: memories hand back the same evidence episode after episode."""
    counts = "" if e.support is None else f" (support {e.support}, conflicts {e.conflict or 0})"
    verdict = "VALID" if e.holds else "FAILED"
    return f"- [step {e.t}] {verdict} {quoted(e.value)}{counts}: {one_line(e.text)}"


def one_line(text: str) -> str:
    """`text` as one prompt line: data, tool output and memory text must not forge lines of their own
    (a `\r` or `\u2028` followed by `- [step 9] VALID "x"` would show a model an extra memory entry)."""
    return text if text.isprintable() else text.translate(_ONE_LINE)


def memory_lines(evidence: Sequence[Evidence]) -> str:
    """The memory lines of `evidence`, one per item, in order."""
    return "\n".join(map(evidence_line, evidence))


class MemoryLines:
    """`memory_lines` for the prompts of one stream, remembering long ones.

    A memory that keeps every observation of a key (Append-Only, Reactive Forgetting, Oracle Reset)
    hands that key's items again at its next decision with the new ones appended; looking each of
    hundreds of items up in `evidence_line`'s cache at every decision was most of rendering such a
    prompt. So the text of the last long list that began with each item is kept; a list that starts
    with all of that list's items (the same objects, in order) renders only the items after them. Each
    kept list holds its items, so a live item's id is its own.
    """

    SHORT = 16  # lists up to this long are rendered whole: remembering them would cost more than it saves
    _SIZE = 4096  # remembered lists; emptied when full

    def __init__(self) -> None:
        self._last: dict[int, tuple[list[Evidence], str]] = {}

    def __call__(self, evidence: Sequence[Evidence]) -> str:
        if len(evidence) <= self.SHORT:
            return memory_lines(evidence)
        last = self._last.get(id(evidence[0]))
        if last is not None and len(last[0]) <= len(evidence) and all(map(operator.is_, last[0], evidence)):
            new = evidence[len(last[0]) :]
            text = "\n".join([last[1], *map(evidence_line, new)]) if new else last[1]
        else:
            text = memory_lines(evidence)
        if len(self._last) >= self._SIZE:
            self._last.clear()
        self._last[id(evidence[0])] = (list(evidence), text)
        return text


def render(
    task: Task, evidence: Sequence[Evidence], lines: Callable[[Sequence[Evidence]], str] = memory_lines
) -> tuple[dict[str, str], ...]:
    """The system and user messages for one decision (`lines`: how the memory lines are joined, the
    same text either way; a stream renders through its `MemoryLines`)."""
    parts = [f"Step {task.t}. {one_line(task.text)}"]
    if task.hint:
        parts.append(HINT_PREFIX + one_line(task.hint))
    if evidence:
        parts.append(f"Memory ({len(evidence)} entries, oldest first):")
        parts.append(lines(evidence))
    else:
        parts.append(NO_MEMORY)
    if task.options:
        parts.append(_options_block(tuple(task.options)))
    else:
        parts.append('Reply as "Answer: <answer>" with a very concise answer and nothing else.')
    system = SYSTEM_PROMPT if task.instructions is None else task.instructions
    return ({"role": "system", "content": system}, {"role": "user", "content": "\n".join(parts)})


@functools.lru_cache(maxsize=1 << 12)
def _options_block(options: tuple[str, ...]) -> str:
    """The option lines and the instruction to answer with a letter. Cached: a stream shows the same
    few option lists again and again."""
    return "\n".join(
        ["Options:", *(f"{LABELS[i]}) {one_line(opt)}" for i, opt in enumerate(options)), LETTER_INSTRUCTION]
    )


def labels_for(task: Task) -> tuple[str, ...]:
    """The option letters shown for `task` (used for logprob scoring)."""
    return _labels(len(task.options))


@functools.lru_cache(maxsize=64)
def _labels(n: int) -> tuple[str, ...]:
    return tuple(LABELS[:n])


def completion_prompt(messages: Sequence[dict[str, str]]) -> str:
    """The chat messages as one completion-style text, for base models and option log-likelihood scoring:
    the contents in order, separated by blank lines, asking for the option as written instead of its
    letter, ending with the answer cue. An option is then scored as the continuation `" " + option`."""
    text = "\n\n".join(m["content"] for m in messages)
    return f"{text.replace(LETTER_INSTRUCTION, NAME_INSTRUCTION)}\n{ANSWER_CUE}"


def estimate_tokens(messages: Sequence[dict[str, str]]) -> int:
    """The simulated reader's prompt size: about four characters per token (the usual rule of thumb
    for English BPE vocabularies), plus four tokens per message header. Kept as it is so that simulated
    logs stay comparable; `count_tokens` is closer for real tokenizers."""
    return sum(len(m["content"]) // 4 + 4 for m in messages)


# A word with its leading space, a digit, another symbol with its leading space, a whitespace character.
_TOKEN = re.compile(r" ?[A-Za-z]+|\d| ?[^\sA-Za-z\d]|\s")


def count_tokens(text: str) -> int:
    """Tokens of `text` without a tokenizer: pieces split as BPE and SentencePiece vocabularies split
    English prompts like these (common words whole, digits one by one, quotes and brackets apart). On
    the harness's prompts it is within 3% of SmolLM2's and Gemma 3's tokenizers, where four characters
    per token is 5% to 30% off (memory lines are dense in digits and symbols). Counted line by line (a
    newline is a piece of its own, so the sum is exact), each line once: memory lines recur in prompt
    after prompt, and a plan counts every prompt of a stream."""
    lines = text.split("\n")
    return sum(map(_line_tokens, lines)) + len(lines) - 1


@functools.lru_cache(maxsize=1 << 16)
def _line_tokens(line: str) -> int:
    return len(_TOKEN.findall(line))


def count_message_tokens(messages: Sequence[dict[str, str]]) -> int:
    """`count_tokens` over chat messages, plus four tokens per message header."""
    return sum(count_tokens(m["content"]) + 4 for m in messages)
