"""Turn a model's free-text reply into an action. A reply that names no option is not an error: it is
logged as unparseable and scored as a failure (the action becomes "")."""

from __future__ import annotations

import re
from collections.abc import Sequence

from runners.agent.prompt import LABELS

_ANSWER = re.compile(r"answer\s*(?:is)?\s*[:\-]?\s*(.+)", re.IGNORECASE | re.DOTALL)
_LEADING_LABEL = re.compile(r"^\(?([A-Z])\)?(?:[\s.):,]|$)")
_CUE = "Answer: "


def parse_choice(reply: str, options: Sequence[str]) -> int | None:
    """Index of the option the reply names: a label ("B", "(B)", "B) ..."), "Answer: B", or the option's
    text; None when it names none (or is ambiguous)."""
    text = reply.strip()
    if len(text) == len(_CUE) + 1 and text.startswith(_CUE):  # "Answer: B": the rules below give its label
        idx = LABELS.find(text[-1])
        if 0 <= idx < len(options):
            return idx
    m = _ANSWER.search(text)
    candidates = [m.group(1).strip(), text] if m else [text]
    for cand in candidates:
        lab = _LEADING_LABEL.match(cand)
        if lab and LABELS.index(lab.group(1)) < len(options):
            return LABELS.index(lab.group(1))
        low = cand.lower().strip(" .\"'`")
        exact = [i for i, o in enumerate(options) if o.lower() == low]
        if len(exact) == 1:
            return exact[0]
        named = [i for i, o in enumerate(options) if o and o.lower() in cand.lower()]
        if len(named) == 1:
            return named[0]
    return None


def parse_free(reply: str) -> str:
    """A free-form answer: the text after the last "Answer:" if there is one, else the whole reply."""
    parts = re.split(r"answer\s*:", reply, flags=re.IGNORECASE)
    return parts[-1].strip() if len(parts) > 1 else reply.strip()
