"""The logged sample of a decision: what its prompt held, as the episode log's `options`, `evidence`,
`truth` and `prompt` columns keep it (`analysis.streamlog.record.EpisodeRecord` defines the format).

Compact JSON text, built from cached pieces: memories hand back the same evidence episode after episode,
and Append-Only's prompts hold every observation of a key, so encoding each line once keeps logging
cheap next to the episode itself.
"""

from __future__ import annotations

import functools
import json
import operator
from collections.abc import Sequence
from json.encoder import c_encode_basestring  # type: ignore[attr-defined]
from typing import NamedTuple

from analysis.streamlog.staleness import Counts, hop_counts, quality
from tepa.evidence import Evidence

_encode = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


@functools.lru_cache(maxsize=1 << 16)
def evidence_entry(e: Evidence) -> str:
    """One retrieved line as logged, `[t, verdict, value, support, conflict]`: the fields the prompt's
    memory line shows (`runners.agent.prompt.evidence_line`), counts null where the method keeps none."""
    verdict = '"VALID"' if e.holds else '"FAILED"'
    counts = "null,null" if e.support is None else f"{int(e.support)},{int(e.conflict or 0)}"
    value = c_encode_basestring(e.value) if type(e.value) is str else _encode(e.value)  # the encoder's text
    return f"[{int(e.t)},{verdict},{value},{counts}]"


def evidence_json(hops: Sequence[Sequence[Evidence]]) -> str:
    """The `evidence` column: one list per hop of its retrieved lines, in prompt order."""
    return "[" + ",".join("[" + ",".join(map(evidence_entry, hop)) + "]" for hop in hops) + "]"


class _Hop(NamedTuple):
    """A hop the sampler has done: its items, their entries joined, the truth and its counts."""

    items: list[Evidence]
    body: str
    truth: str | None
    counts: Counts | None


class Sampler:
    """The `evidence` column and the QUALITY fields of each decision of one stream (`sample`): the same
    as `evidence_json` and `analysis.streamlog.staleness.episode_quality`, computed incrementally.

    A memory that keeps every observation of a key (Append-Only, Reactive Forgetting, Oracle Reset)
    hands that key's items again at its next decision with the new ones appended, and encoding and
    counting those hundreds of lines anew at every decision was most of what logging samples cost. So
    the sampler remembers the last long hop that began with each item; when a hop starts with all of
    that hop's items (the same objects, in order), only the items after them are encoded and counted.
    Any other hop is done whole. Each remembered hop holds its items, so a live item's id is its own.
    """

    SHORT = 16  # hops up to this long are done whole: remembering them would cost more than it saves
    _SIZE = 4096  # remembered hops; emptied when full

    def __init__(self) -> None:
        self._last: dict[int, _Hop] = {}

    def sample(
        self, hops: Sequence[Sequence[Evidence]], truths: Sequence[str | None] | None
    ) -> tuple[str, dict[str, object]]:
        """The decision's `evidence` column and QUALITY fields (`truths` None: the environment reports
        none). The fields' dict may be shared with other decisions: copy it, never modify it."""
        if len(hops) == 1:  # most decisions: one hop, and its QUALITY fields one of a few
            hop, truth = hops[0], None if truths is None else truths[0]
            body, one = self._hop(hop, truth) if len(hop) > self.SHORT else self._whole(hop, truth)
            return "[[" + body + "]]", _quality_of(one)
        parts, counts = [], []
        for hop, truth in zip(hops, truths if truths is not None else [None] * len(hops), strict=True):
            body, hop_count = self._hop(hop, truth) if len(hop) > self.SHORT else self._whole(hop, truth)
            parts.append("[" + body + "]")
            counts.append(hop_count)
        return "[" + ",".join(parts) + "]", quality(counts)

    @staticmethod
    def _whole(hop: Sequence[Evidence], truth: str | None) -> tuple[str, Counts | None]:
        return ",".join(map(evidence_entry, hop)), None if truth is None else hop_counts(hop, truth)

    def _hop(self, hop: Sequence[Evidence], truth: str | None) -> tuple[str, Counts | None]:
        last = self._last.get(id(hop[0]))
        done = 0
        if last is not None and len(last.items) <= len(hop) and all(map(operator.is_, last.items, hop)):
            done = len(last.items)
        if not done:
            body, counts = self._whole(hop, truth)
        else:
            new = hop[done:]
            body = ",".join([last.body, *map(evidence_entry, new)]) if new else last.body
            if truth is None:
                counts = None
            elif last.truth == truth and last.counts is not None:
                counts = tuple(map(operator.add, last.counts, hop_counts(new, truth)))  # type: ignore[assignment]
            else:
                counts = hop_counts(hop, truth)
        if len(self._last) >= self._SIZE:
            self._last.clear()
        self._last[id(hop[0])] = _Hop(list(hop), body, truth, counts)
        return body, counts


@functools.lru_cache(maxsize=1 << 12)
def _quality_of(counts: Counts | None) -> dict[str, object]:
    """`quality` of one hop's counts, cached (callers copy it): counts of a stream repeat."""
    return quality([counts])


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
