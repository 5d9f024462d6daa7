"""The key scrubber lives in `tepa.redact`; this name stays only for the openai backend's import of
`scrub` until that module imports `tepa.redact` itself (then delete this file)."""

from tepa.redact import scrub

__all__ = ["scrub"]
