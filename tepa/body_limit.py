"""How much of an untrusted endpoint's response body the harness reads: one limit for every client that
calls one (the openai backend's transport, and a memory's own LLM client such as mem0's), so that an
endpoint flooding its answer costs the process at most this much."""

from __future__ import annotations

#: A response body (reply or error) longer than this is not read on: an echoed prompt's log-probabilities
#: take well under 1 MB, and a 300 MB reply once took the process to 1 GB.
MAX_BODY_BYTES = 16 << 20


class Oversized(Exception):
    """A response body longer than MAX_BODY_BYTES, or compressed although the request asked for none."""
