"""A deterministic stand-in for an embedding endpoint's model, for the loopback stub server: each text
becomes a hashed bag of its words, so texts that share words are close (as with a real model), and
the vectors are the same in every process."""

from __future__ import annotations

import hashlib
import math

from tepa.retrieval.rank import tokenize

DIMS = 64


def vector(text: str) -> list[float]:
    out = [0.0] * DIMS
    for word in tokenize(text):
        out[int(hashlib.sha256(word.encode()).hexdigest(), 16) % DIMS] += 1.0
    norm = math.sqrt(sum(x * x for x in out)) or 1.0
    return [x / norm for x in out]


def embeddings_body(request: dict) -> dict:
    """The body an OpenAI-compatible /v1/embeddings endpoint returns for `request`."""
    texts = request["input"] if isinstance(request["input"], list) else [request["input"]]
    data = [{"object": "embedding", "index": i, "embedding": vector(t)} for i, t in enumerate(texts)]
    return {
        "object": "list",
        "model": request.get("model", "stub"),
        "data": data,
        "usage": {"prompt_tokens": 1, "total_tokens": 1},
    }
