"""The logged-sample columns of an episode (`options`, `evidence`, `truth`, `prompt`), decoded and checked.

Each is a JSON text in episodes.parquet (see README "Analysis"): `options` the option texts in prompt
order; `evidence` per hop the retrieved lines `[t, verdict, value, support, conflict]`; `truth` per hop
the value the world holds now (null when the environment cannot tell; the empty string when it reports
no truth at all); `prompt` per hop the chat messages as sent ("" unless the run logged prompts). Logs are
not trusted: a value that is not in this format decodes to None and is shown as not logged.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from analysis.streamlog.record import SAMPLE
from analysis.streamlog.staleness import is_stale

SAMPLE_COLUMNS = SAMPLE  # the columns and their order: analysis.record
VERDICTS = ("VALID", "FAILED")


def _is_message(message: object) -> bool:
    return (
        isinstance(message, dict)
        and isinstance(message.get("role"), str)
        and isinstance(message.get("content"), str)
    )


def _is_hop(hop: object) -> bool:
    """A list of lines `[t, verdict, value, support, conflict]` (an int, VALID or FAILED, a string, and
    two ints or nulls), checked in one loop: an Append-Only prompt's evidence holds thousands of lines
    per episode, and a call per value cost the viewer most of its time. Decoded JSON holds exact ints,
    so `type(x) is int` also refuses a bool."""
    if not isinstance(hop, list):
        return False
    for line in hop:
        if type(line) is not list or len(line) != 5:
            return False
        t, verdict, value, s, f = line
        if type(t) is not int or verdict not in VERDICTS or type(value) is not str:
            return False
        if (s is not None and type(s) is not int) or (f is not None and type(f) is not int):
            return False
    return True


_VALID = {
    "options": lambda v: all(isinstance(o, str) for o in v),
    "evidence": lambda v: all(map(_is_hop, v)),
    "truth": lambda v: all(x is None or isinstance(x, str) for x in v),
    "prompt": lambda v: all(isinstance(hop, list) and all(map(_is_message, hop)) for hop in v),
}


def decode(column: str, text: object) -> tuple[list[Any] | None, bool]:
    """(the decoded value, whether it was malformed). None for a value not logged: a missing column,
    a `prompt` of "" (prompts not logged) or a `truth` of "" (the environment reports none)."""
    if not isinstance(text, str) or (text == "" and column in ("prompt", "truth")):
        return None, False
    try:
        value = json.loads(text)
    except ValueError:
        return None, True
    if not isinstance(value, list) or not _VALID[column](value):
        return None, True
    return value, False


def stale_lines(evidence: list[list[list[Any]]], truth: list[str | None]) -> list[list[bool | None]]:
    """Per hop and line: True when the line is stale, False when current, None when the hop's truth is
    unknown (null, or no entry). A line is current when its verdict agrees with the truth of its hop
    (`analysis.staleness.is_stale`)."""
    flags: list[list[bool | None]] = []
    for i, hop in enumerate(evidence):
        now = truth[i] if i < len(truth) else None
        flags.append([None if now is None else is_stale(line[1], line[2], now) for line in hop])
    return flags


# The `evidence` column as the runner writes it (`runners.agent.sample`): compact JSON, here only with
# ASCII text and no escapes. Such a text decodes to valid evidence whose lines' values are the text
# between their quotes, so its page encoding's length and its lines' stale flags can be counted on the
# text itself, with no decoding: an Append-Only stream logs hundreds of megabytes of it.
_INT = r"(?:0|-?[1-9][0-9]{0,17})"  # no -0 and no long numbers: each is written back as it stands
_LINE = rf'\[{_INT},"(?:VALID|FAILED)","[^"\\\x00-\x1f]*",(?:null|{_INT}),(?:null|{_INT})\]'
_HOP = rf"\[(?:{_LINE}(?:,{_LINE})*)?\]"
_ONE_HOP = re.compile(rf"\[{_HOP}\]")
_HOPS = re.compile(rf"\[(?:{_HOP}(?:,{_HOP})*)?\]")
_HOP_AT = re.compile(_HOP)


@dataclass(frozen=True)
class CompactEvidence:
    """An `evidence` text in the compact form: the length of its page encoding (`<` and DEL are the
    only characters that `encode` writes longer) and each hop's text."""

    size: int
    hops: list[str]

    def flagged(self, truth: list[str | None]) -> tuple[int, int]:
        """(stale lines, the length of the encoding with each line's flag appended) against the truth
        of each hop (`stale_lines`): a line grows by `,null`, `,true` or `,false`."""
        stale, size = 0, self.size
        for i, hop in enumerate(self.hops):
            now = truth[i] if i < len(truth) else None
            lines, hop_stale = flag_counts(hop, now)
            stale += hop_stale
            size += 5 * lines if now is None else 6 * lines - hop_stale
        return stale, size


def compact_evidence(text: object) -> CompactEvidence | None:
    """`text` as CompactEvidence when it is in the compact form, else None (decode it instead)."""
    if not isinstance(text, str) or not text.isascii():
        return None
    if _ONE_HOP.fullmatch(text):
        hops = [text]
    elif _HOPS.fullmatch(text):
        hops, at = [], 1
        while at < len(text) - 1:
            hop = _HOP_AT.match(text, at)
            hops.append(hop.group())  # type: ignore[union-attr]  # the whole text matched
            at = hop.end() + 1  # type: ignore[union-attr]
    else:
        return None
    return CompactEvidence(len(text) + 5 * (text.count("<") + text.count("\x7f")), hops)


def flag_counts(hop: str, truth: str | None) -> tuple[int, int]:
    """(lines, stale lines) of a compact hop's text against its truth (`stale_lines`; none stale when
    the truth is unknown). Every `"` of the text opens or closes a verdict or a value, so `"VALID","`
    starts exactly the VALID lines and `"VALID","<truth>",` those whose value is the truth (a truth
    with a `"` is no line's value)."""
    valid, failed = hop.count('"VALID","'), hop.count('"FAILED","')
    if truth is None:
        return valid + failed, 0
    if '"' in truth:
        return valid + failed, valid
    valid_true, failed_true = hop.count(f'"VALID","{truth}",'), hop.count(f'"FAILED","{truth}",')
    return valid + failed, valid - valid_true + failed_true
