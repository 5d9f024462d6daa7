"""The logged sample of a decision: what its prompt held, as the episode log's `options`, `evidence`,
`truth` and `prompt` columns keep it (`analysis.record.EpisodeRecord` defines the format).

Compact JSON text, built from cached pieces: memories hand back the same evidence episode after episode,
and Append-Only's prompts hold every observation of a key, so encoding each line once keeps logging
cheap next to the episode itself.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence

from tepa.evidence import Evidence

_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


@functools.lru_cache(maxsize=1 << 16)
def evidence_entry(e: Evidence) -> str:
    """One retrieved line as logged, `[t, verdict, value, support, conflict]`: the fields the prompt's
    memory line shows (`runners.agent.prompt.evidence_line`), counts null where the method keeps none."""
    verdict = '"VALID"' if e.holds else '"FAILED"'
    counts = "null,null" if e.support is None else f"{int(e.support)},{int(e.conflict or 0)}"
    return f"[{int(e.t)},{verdict},{_encode(e.value)},{counts}]"


def evidence_json(hops: Sequence[Sequence[Evidence]]) -> str:
    """The `evidence` column: one list per hop of its retrieved lines, in prompt order."""
    return "[" + ",".join("[" + ",".join(map(evidence_entry, hop)) + "]" for hop in hops) + "]"


@functools.lru_cache(maxsize=1 << 12)
def options_json(options: tuple[str, ...]) -> str:
    """The `options` column: the option texts in the order shown (`[]` when free-form)."""
    return _encode(list(options))


def truth_json(truths: Sequence[str | None] | None) -> str:
    """The `truth` column: one value (or null) per hop; "" when the environment reports no truth."""
    return "" if truths is None else _truths_json(tuple(truths))


@functools.lru_cache(maxsize=1 << 12)
def _truths_json(truths: tuple[str | None, ...]) -> str:
    """Cached: a stream asks for the same few truths again and again."""
    return _encode(list(truths))


def prompt_json(prompts: Sequence[Sequence[dict[str, str]]]) -> str:
    """The `prompt` column of a run that logs prompts: the chat messages of every hop, as sent."""
    return _encode([list(messages) for messages in prompts])
