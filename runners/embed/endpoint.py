"""Embeddings from any OpenAI-compatible `/v1/embeddings` endpoint (OpenAI, vLLM, llama.cpp, Ollama).

The key is read from the environment variable named by `api_key_env` (a loopback endpoint without one
gets a dummy key), as for the model backend. An endpoint that answers without embeddings (a 404 or 405,
a body without `data`) is reported in one line naming `retrieval.base_url`, before any episode, by `probe`.

The endpoint is not trusted, as the model backend's is not (`runners.llm.openai_backend`):
- one request (a batch of texts, its retries included) ends within `timeout` seconds as a whole (the
  HTTP client's own timeout is per read, which a body trickled a byte at a time never trips); transient
  failures (HTTP 408/409/429/5xx, a lost connection) are retried while time remains;
- a body is read up to `runners.llm.capped_transport.MAX_BODY_BYTES`, uncompressed (the same transport);
- every vector is checked before anything is returned (so before anything is cached): a list of numbers,
  finite, not all zero, one per text, all of one length, and that length the same for the whole run
  (`dims`, learned from the probe). Anything else stops the run with one line naming the endpoint.

The client is asynchronous (the capped transport is) and runs on an event loop of its own, on a daemon
thread; `__call__` blocks until its request is answered, as a synchronous client would.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import threading
import time
import weakref
from typing import Any

import numpy as np
import openai

from runners.llm.endpoint_url import is_loopback, public_url
from tepa.retrieval import EmbeddingError

RETRIES = 3  # transient failures retried per request, while its deadline allows
_TRANSIENT = frozenset({408, 409, 429})


class EndpointError(EmbeddingError):
    """The endpoint cannot embed (one line naming the key and the endpoint)."""


class EndpointEmbedder:
    def __init__(self, base_url: str, model: str, api_key_env: str, timeout: float, batch_size: int) -> None:
        key = os.environ.get(api_key_env)
        if not key and not is_loopback(base_url):
            raise EndpointError(
                f"retrieval.api_key_env: environment variable {api_key_env} is not set "
                f"(needed for {public_url(base_url)})"
            )
        self.url = public_url(base_url)
        self.model = model
        self.batch_size = batch_size
        self.timeout = float(timeout)
        self.dims: int | None = None  # the vectors' length, from the first reply (the probe's)
        self._base_url, self._key_env = base_url, api_key_env
        # The client and its loop's thread, made on first use in each process (a forked child has no
        # thread of its parent's) and closed when the embedder is, is collected, or at exit.
        self._client: openai.AsyncOpenAI | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pid = 0
        self._finalizer: weakref.finalize | None = None
        self._closed = False
        self._started = threading.Lock()

    def probe(self) -> int:
        """One embedding call, so that an endpoint without embeddings stops the run before it starts;
        returns the vectors' length."""
        self(["probe"])
        assert self.dims is not None
        return self.dims

    def __call__(self, texts: list[str]) -> np.ndarray:
        """Unit-norm float32 rows, one per text, in the order asked (EndpointError: nothing is returned)."""
        rows = []
        for i in range(0, len(texts), self.batch_size):
            rows.extend(self._run(self._batch(texts[i : i + self.batch_size])))
        vectors = np.asarray(rows, dtype=np.float32)
        if len(texts) == 0:
            return vectors.reshape(0, self.dims or 0)
        with np.errstate(over="ignore"):
            norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        if not np.isfinite(norms).all():  # finite components whose squares overflow float32
            raise EndpointError(f"{self._where}: an embedding's length overflows float32")
        return vectors / norms.clip(1e-12)

    def close(self) -> None:
        """Close the HTTP connections and stop the client's event loop."""
        self._closed = True
        if self._finalizer is not None:
            self._finalizer()

    @property
    def _where(self) -> str:
        return f"retrieval.base_url={self.url}"

    def _run(self, coro: Any) -> Any:
        with self._started:
            if self._closed:
                coro.close()
                raise EndpointError(f"{self._where}: the embedder is closed")
            if self._loop is None or self._pid != os.getpid():
                self._start()
            loop = self._loop
        return asyncio.run_coroutine_threadsafe(coro, loop).result()

    def _start(self) -> None:
        from runners.llm.capped_transport import CappedTransport

        if self._finalizer is not None:
            self._finalizer.detach()  # the parent's, in a forked child: nothing of it runs here
        self._client = openai.AsyncOpenAI(
            base_url=self._base_url,
            api_key=os.environ.get(self._key_env) or "none",
            timeout=self.timeout,
            max_retries=0,  # retried here, within the request's deadline
            default_headers={"Accept-Encoding": "identity"},
            http_client=openai.DefaultAsyncHttpxClient(transport=CappedTransport(), timeout=self.timeout),
        )
        loop = asyncio.new_event_loop()
        threading.Thread(target=loop.run_forever, name="embeddings-client", daemon=True).start()
        self._pid = os.getpid()
        self._finalizer = weakref.finalize(self, _shutdown, loop, self._client, self._pid)
        self._loop = loop

    async def _batch(self, texts: list[str]) -> list[list[float]]:
        """The checked vectors of one batch, asked within `timeout` seconds in all."""
        from runners.llm.capped_transport import Oversized

        where = self._where
        deadline = time.monotonic() + self.timeout
        problem = ""
        for attempt in range(RETRIES + 1):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                async with asyncio.timeout(left):
                    assert self._client is not None
                    raw = await self._client.embeddings.with_raw_response.create(
                        model=self.model, input=texts, encoding_format="float"
                    )
                    body = raw.http_response.content
                return self._checked(body, texts)
            except openai.NotFoundError:
                raise EndpointError(f"{where}: the endpoint has no /v1/embeddings (404)") from None
            except openai.APIStatusError as exc:
                if not (exc.status_code in _TRANSIENT or exc.status_code >= 500):
                    raise EndpointError(f"{where}: embeddings failed with HTTP {exc.status_code}") from None
                problem = f"embeddings failed with HTTP {exc.status_code}"
            except (openai.APITimeoutError, TimeoutError):
                problem = ""
                break  # the deadline is spent
            except Oversized as exc:
                raise EndpointError(f"{where}: {exc}") from None
            except openai.APIConnectionError as exc:
                if isinstance(exc.__cause__, Oversized):
                    raise EndpointError(f"{where}: {exc.__cause__}") from None
                problem = f"embeddings failed ({type(exc).__name__})"
            except openai.APIError as exc:
                raise EndpointError(f"{where}: embeddings failed ({type(exc).__name__})") from None
            if attempt < RETRIES:
                await asyncio.sleep(min(0.5 * 2**attempt, max(0.0, deadline - time.monotonic())))
        if problem:
            raise EndpointError(f"{where}: {problem} (after {attempt + 1} attempts)")
        raise EndpointError(
            f"{where}: no complete reply within retrieval.timeout={self.timeout:g} s "
            f"(for {len(texts)} text(s))"
        )

    def _checked(self, body: bytes, texts: list[str]) -> list[list[float]]:
        """The reply's vectors in the order asked, or EndpointError saying what is wrong with them."""
        where = self._where
        try:
            reply = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            raise EndpointError(f"{where}: the reply is not JSON") from None
        data = reply.get("data") if isinstance(reply, dict) else None
        if not isinstance(data, list) or not all(isinstance(d, dict) for d in data):
            data = []
        if len(data) != len(texts):
            raise EndpointError(f"{where}: the reply holds {len(data)} embedding(s) for {len(texts)} text(s)")
        indices = [d.get("index") for d in data]
        if not all(type(i) is int for i in indices) or sorted(indices) != list(range(len(texts))):
            raise EndpointError(f"{where}: the reply's embeddings are not indexed 0..{len(texts) - 1}")
        rows = [d.get("embedding") for d in sorted(data, key=lambda d: d["index"])]
        for i, row in enumerate(rows):
            text = " ".join(texts[i].split())[:40]
            if not isinstance(row, list) or not row or not all(type(x) in (float, int) for x in row):
                raise EndpointError(f"{where}: the embedding of text {i} ({text!r}) is not a list of numbers")
            if not all(map(math.isfinite, row)):
                bad = next(x for x in row if not math.isfinite(x))
                raise EndpointError(
                    f"{where}: the embedding of text {i} ({text!r}) holds a non-finite component ({bad})"
                )
            if not any(row):
                raise EndpointError(f"{where}: the embedding of text {i} ({text!r}) is all zeros")
            expected = self.dims if self.dims is not None else len(rows[0])
            if len(row) != expected:
                earlier = "earlier ones" if self.dims is not None else "text 0's"
                raise EndpointError(
                    f"{where}: the embedding of text {i} ({text!r}) has {len(row)} components, "
                    f"{earlier} {expected}"
                )
        self.dims = len(rows[0])
        return rows


def _shutdown(loop: asyncio.AbstractEventLoop, client: openai.AsyncOpenAI, pid: int) -> None:
    """Close the client's connections on its loop, then stop the loop (its thread then ends)."""
    if os.getpid() != pid or not loop.is_running():
        return
    try:
        asyncio.run_coroutine_threadsafe(client.close(), loop).result(timeout=5)
    except Exception:  # noqa: BLE001, S110 (closing is best effort: the process may be ending)
        pass
    loop.call_soon_threadsafe(loop.stop)
