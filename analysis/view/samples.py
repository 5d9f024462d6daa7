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
_MORE_LINES = re.compile(rf"{_LINE}(?:,{_LINE})*\]\]")  # the lines an extending one-hop text adds


class CompactEvidence:
    """An `evidence` text in the compact form: the length of its page encoding (`<` and DEL are the
    only characters that `encode` writes longer), each hop's text, and its lines' stale flags counted
    against a truth (`flagged`). A one-hop text that extends an earlier one (`compact_evidence`) counts
    only its new lines against a truth the earlier one was counted against."""

    def __init__(self, text: str, hops: list[str], size: int, start: int = 0, earlier: dict | None = None):
        self.text, self.hops, self.size = text, hops, size
        self._start, self._earlier = start, earlier or {}
        self._counts: dict[str | None, tuple[int, int]] = {}  # a one-hop text's flag_counts by truth

    def flagged(self, truth: list[str | None]) -> tuple[int, int]:
        """(stale lines, the length of the encoding with each line's flag appended) against the truth
        of each hop (`stale_lines`): a line grows by `,null`, `,true` or `,false`."""
        stale, size = 0, self.size
        for i, hop in enumerate(self.hops):
            now = truth[i] if i < len(truth) else None
            lines, hop_stale = flag_counts(hop, now) if len(self.hops) > 1 else self._one_hop(now)
            stale += hop_stale
            size += 5 * lines if now is None else 6 * lines - hop_stale
        return stale, size

    def written(self, truth: list[str | None] | None) -> str:
        """The text as `encode` writes its value (`<` and DEL are the only characters it writes
        otherwise), with each line's stale flag appended against the truth of its hop (`stale_lines`)
        unless the truth is None."""
        if truth is None:
            text = self.text
        elif len(self.hops) == 1:
            text = _append_flags(self.text, truth[0] if truth else None)
        else:
            nows = [truth[i] if i < len(truth) else None for i in range(len(self.hops))]
            text = "[" + ",".join(map(_append_flags, self.hops, nows)) + "]"
        return text.replace("\x7f", "\\u007f").replace("<", "\\u003c")

    def _one_hop(self, truth: str | None) -> tuple[int, int]:
        counts = self._counts.get(truth)
        if counts is None:
            earlier = self._earlier.get(truth)
            if earlier is None:
                counts = flag_counts(self.text, truth)
            else:
                lines, stale = flag_counts(self.text, truth, self._start)
                counts = (earlier[0] + lines, earlier[1] + stale)
            self._counts[truth] = counts
        return counts

    def extended(self, text: str) -> CompactEvidence | None:
        """`text` as CompactEvidence when it is this one-hop text with more lines after its own, checked
        and counted from there; else None."""
        start = len(self.text) - 1  # after "[[<lines>," where this text has "[[<lines>]]"
        if len(self.hops) != 1 or self.text == "[[]]" or not text.startswith(self.text[:-2]):
            return None
        if text[start - 1 : start] != "," or not _MORE_LINES.fullmatch(text, start):
            return None
        size = self.size - 1 + len(text) - start + 5 * (text.count("<", start) + text.count("\x7f", start))
        return CompactEvidence(text, [text], size, start, self._counts)


def _append_flags(hop: str, truth: str | None) -> str:
    """A compact hop's text with each line's stale flag appended. Split at its quotes, each line is a
    verdict, a comma, a value and what follows the value: its counts and the first `]` after them."""
    parts = hop.split('"')
    for i in range(4, len(parts), 4):
        verdict, value = parts[i - 3], parts[i - 1]
        flag = "null" if truth is None else "true" if is_stale(verdict, value, truth) else "false"
        parts[i] = parts[i].replace("]", f",{flag}]", 1)
    return '"'.join(parts)


def compact_evidence(text: object, last: CompactEvidence | None = None) -> CompactEvidence | None:
    """`text` as CompactEvidence when it is in the compact form, else None (decode it instead). An
    Append-Only prompt holds every line of the last one for its key and the new ones: given that
    one (`last`), only the new lines are checked."""
    if not isinstance(text, str) or not text.isascii():
        return None
    extended = last.extended(text) if last is not None else None
    if extended is not None:
        return extended
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
    return CompactEvidence(text, hops, len(text) + 5 * (text.count("<") + text.count("\x7f")))


def flag_counts(hop: str, truth: str | None, start: int = 0) -> tuple[int, int]:
    """(lines, stale lines) of a compact hop's text (its lines from `start`) against its truth
    (`stale_lines`; none stale when the truth is unknown). Every `"` of the text opens or closes a
    verdict or a value, so `"VALID","` starts exactly the VALID lines and `"VALID","<truth>",` those
    whose value is the truth (a truth with a `"` is no line's value)."""
    valid, failed = hop.count('"VALID","', start), hop.count('"FAILED","', start)
    if truth is None:
        return valid + failed, 0
    if '"' in truth:
        return valid + failed, valid
    valid_true = hop.count(f'"VALID","{truth}",', start)
    failed_true = hop.count(f'"FAILED","{truth}",', start)
    return valid + failed, valid - valid_true + failed_true
