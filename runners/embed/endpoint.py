"""Embeddings from any OpenAI-compatible `/v1/embeddings` endpoint (OpenAI, vLLM, llama.cpp, Ollama).

The key is read from the environment variable named by `api_key_env` (a loopback endpoint without one
gets a dummy key), as for the model backend. The client retries transient errors itself; an endpoint
that answers without embeddings (a 404 or 405, a body without `data`) is reported in one line naming
`retrieval.base_url`, before any episode, by `probe`.
"""

from __future__ import annotations

import os

import numpy as np
import openai

from runners.embed import EmbeddingError
from runners.llm.openai_backend import _is_loopback, _public_url


class EndpointError(EmbeddingError):
    """The endpoint cannot embed (one line naming the key and the endpoint)."""


class EndpointEmbedder:
    def __init__(self, base_url: str, model: str, api_key_env: str, timeout: float, batch_size: int) -> None:
        key = os.environ.get(api_key_env)
        if not key and not _is_loopback(base_url):
            raise EndpointError(
                f"retrieval.api_key_env: environment variable {api_key_env} is not set "
                f"(needed for {_public_url(base_url)})"
            )
        self.url = _public_url(base_url)
        self.model = model
        self.batch_size = batch_size
        self._client = openai.OpenAI(base_url=base_url, api_key=key or "none", timeout=timeout, max_retries=3)

    def probe(self) -> None:
        """One embedding call, so that an endpoint without embeddings stops the run before it starts."""
        self(["probe"])

    def __call__(self, texts: list[str]) -> np.ndarray:
        """Unit-norm float32 rows, one per text, in the order asked."""
        rows = []
        for i in range(0, len(texts), self.batch_size):
            rows.extend(self._batch(texts[i : i + self.batch_size]))
        vectors = np.asarray(rows, dtype=np.float32)
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True).clip(1e-12)

    def _batch(self, texts: list[str]) -> list[list[float]]:
        where = f"retrieval.base_url={self.url}"
        try:
            reply = self._client.embeddings.create(model=self.model, input=texts, encoding_format="float")
        except openai.NotFoundError:
            raise EndpointError(f"{where}: the endpoint has no /v1/embeddings (404)") from None
        except openai.APIStatusError as exc:
            raise EndpointError(f"{where}: embeddings failed with HTTP {exc.status_code}") from None
        except openai.APIError as exc:
            raise EndpointError(f"{where}: embeddings failed ({type(exc).__name__})") from None
        data = sorted(getattr(reply, "data", None) or [], key=lambda d: d.index)
        if len(data) != len(texts) or not all(getattr(d, "embedding", None) for d in data):
            raise EndpointError(f"{where}: the reply holds {len(data)} embedding(s) for {len(texts)} text(s)")
        return [d.embedding for d in data]
