"""What a credential looks like, in one place: the config checks refuse such a value before Hydra copies
it, and the openai backend redacts it from what an endpoint sends back before anything is logged or
cached.

A token counts only when it stands alone (not the tail of a longer word) and has a provider key's
shape: `sk-` and at least 16 more characters with a digit among them (OpenAI and most compatible
servers), GitHub, Hugging Face, AWS, Google and Slack tokens. Ordinary words that contain `sk-`
(`task-force`, `desk-lamp`) are never touched: a reply that names such an option must still parse.
"""

from __future__ import annotations

import re

_TOKEN_CHAR = r"A-Za-z0-9_\-"
KEY_SHAPED = re.compile(
    rf"(?<![{_TOKEN_CHAR}])(?:sk-(?=[{_TOKEN_CHAR}]*[0-9])[{_TOKEN_CHAR}]{{16,}}"
    r"|gh[pousr]_[A-Za-z0-9]{20,}|hf_[A-Za-z0-9]{20,}|AKIA[0-9A-Z]{16}|AIza[0-9A-Za-z_\-]{30,}"
    r"|xox[abprs]-[A-Za-z0-9\-]{8,})"
)
REDACTED = "[redacted]"


def scrub(text: str, key: str | None) -> str:
    """`text` with the key's value (wherever it stands alone) and every key-shaped token redacted."""
    if key:
        text = re.sub(rf"(?<![{_TOKEN_CHAR}]){re.escape(key)}(?![{_TOKEN_CHAR}])", REDACTED, text)
    return KEY_SHAPED.sub(REDACTED, text)
