"""What a credential looks like, in one place: the config checks refuse such a value before Hydra copies
it, and the openai backend redacts it from what an endpoint sends back before anything is logged or
cached; under a run, the log handlers' filter (`scrub_logs`) redacts the same, and every key a component
registered, from every library's log records.

A token counts only when it stands alone (not the tail of a longer word) and has a provider key's
shape: `sk-` and at least 16 more characters with a digit among them (OpenAI and most compatible
servers), GitHub, Hugging Face, AWS, Google and Slack tokens. Ordinary words that contain `sk-`
(`task-force`, `desk-lamp`) are never touched: a reply that names such an option must still parse.
"""

from __future__ import annotations

import logging
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


#: The values of the keys this process sends (a component registers the one it reads from the
#: environment): the log filter redacts them wherever they stand alone, key-shaped or not.
_KNOWN: set[str] = set()


def register(key: str | None) -> None:
    """Have `ScrubbingFilter` redact `key` (a key's value, read from the environment) from log records."""
    if key:
        _KNOWN.add(key)


def scrub_known(text: str) -> str:
    """`text` with every registered key and every key-shaped token redacted."""
    for key in sorted(_KNOWN, key=len, reverse=True):
        text = scrub(text, key)
    return KEY_SHAPED.sub(REDACTED, text)


class ScrubbingFilter(logging.Filter):
    """A handler's filter that redacts keys from every record it passes, whichever library logged it
    (mem0 logs its LLM endpoint's error bodies, which can echo the key): the message with its arguments
    merged in, and the traceback's text."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a malformed record: left to the handler to report as it would
            return True
        scrubbed = scrub_known(message)
        if scrubbed != message or record.args:
            record.msg, record.args = scrubbed, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = scrub_known(record.exc_text)
        if record.stack_info:
            record.stack_info = scrub_known(record.stack_info)
        return True


SCRUBBING_FILTER = ScrubbingFilter()


def scrub_logs(logger: logging.Logger | None = None) -> None:
    """Install SCRUBBING_FILTER on every handler of `logger` (the root logger: Hydra's console and
    run-log handlers), where records of every logger that propagates pass. Installing it twice is a no-op."""
    for handler in (logger or logging.getLogger()).handlers:
        handler.addFilter(SCRUBBING_FILTER)
