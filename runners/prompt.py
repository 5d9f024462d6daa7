"""Render a task and its retrieved evidence into the chat prompt every backend reads.

The format is plain enough for a real model and regular enough that the simulated backend reads the
*same text* back (it never sees hidden state): evidence lines match `EVIDENCE_LINE`, options match
`OPTION_LINE`, an in-session statement starts with `HINT_PREFIX`.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Sequence
from string import ascii_uppercase

from envs.base import Task
from tepa.evidence import Evidence

SYSTEM_PROMPT = (
    "You are an agent working in a world that can change. Your memory lists past experience, oldest "
    "first; it may be stale or contradictory, so weigh it against what the current session says. "
    "Pick the option most likely to succeed now."
)
HINT_PREFIX = "The session says: "
NO_MEMORY = "Memory: (empty)"
LABELS = ascii_uppercase

EVIDENCE_LINE = re.compile(
    r'^- \[step (?P<t>-?\d+)\] (?P<verdict>VALID|FAILED) (?P<value>"(?:[^"\\]|\\.)*")'
    r"(?: \(support (?P<s>\d+), conflicts (?P<f>\d+)\))?:",
    re.MULTILINE,
)
OPTION_LINE = re.compile(r"^(?P<label>[A-Z])\) (?P<text>.*)$", re.MULTILINE)
STEP_LINE = re.compile(r"^Step (?P<t>-?\d+)\.", re.MULTILINE)


@functools.lru_cache(maxsize=1 << 16)
def evidence_line(e: Evidence) -> str:
    """One memory line: step, verdict, the value (JSON-quoted), counts where the method keeps them.
    Cached: memories hand back the same evidence episode after episode."""
    counts = "" if e.support is None else f" (support {e.support}, conflicts {e.conflict or 0})"
    verdict = "VALID" if e.holds else "FAILED"
    text = e.text.replace("\n", " ")
    return f"- [step {e.t}] {verdict} {json.dumps(e.value)}{counts}: {text}"


def render(task: Task, evidence: Sequence[Evidence]) -> tuple[dict[str, str], ...]:
    """The system and user messages for one decision."""
    lines = [f"Step {task.t}. {task.text}"]
    if task.hint:
        lines.append(HINT_PREFIX + task.hint)
    if evidence:
        lines.append(f"Memory ({len(evidence)} entries, oldest first):")
        lines.extend(map(evidence_line, evidence))
    else:
        lines.append(NO_MEMORY)
    if task.options:
        lines.append("Options:")
        lines.extend(f"{LABELS[i]}) {opt}" for i, opt in enumerate(task.options))
        lines.append('Reply with the letter of one option, as "Answer: X".')
    else:
        lines.append('Reply as "Answer: <answer>" with a very concise answer and nothing else.')
    system = task.meta.get("instructions", SYSTEM_PROMPT)
    return ({"role": "system", "content": system}, {"role": "user", "content": "\n".join(lines)})


def labels_for(task: Task) -> tuple[str, ...]:
    """The option letters shown for `task` (used for logprob scoring)."""
    return tuple(LABELS[: len(task.options)])


def estimate_tokens(messages: Sequence[dict[str, str]]) -> int:
    """Prompt-size estimate for backends that report no usage: about four characters per token
    (the usual rule of thumb for English BPE vocabularies), plus four tokens per message header."""
    return sum(len(m["content"]) // 4 + 4 for m in messages)
