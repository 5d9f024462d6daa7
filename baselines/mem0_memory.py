"""mem0 (the `mem0ai` package's open-source `Memory`) as a memory method: a production memory library
under the harness's drift.

Every observation is handed to `Memory.add` as its text, with the observation's fields as metadata;
`retrieve` asks `Memory.search` with the query text (top_k by mem0's own vector search) and turns each
hit back into evidence from the metadata stored with it, so the reader sees ordinary memory lines. A
query with a key (the `keyed` retrieval mode) reads the key's memories through `Memory.get_all` with a
metadata filter, as every method's keyed retrieval does.

Offline by construction: mem0's in-process vector store (Qdrant in memory, one collection per
instance), its history in an in-memory SQLite database, the harness's local embedding model as its
embedder (`tepa.retrieval.local`, vectors cached per text), telemetry off, and mem0's home folder (where
it keeps a config.json) in a temporary folder removed when the process ends. With `infer=False` (the
default) mem0 stores each observation as it is; with `infer=True` its own LLM extraction decides what
to store, from an OpenAI-compatible endpoint (`llm_base_url`, `llm_model`). mem0's feedback and phase
hooks do not exist: outcomes reach it only as observations.

The endpoint is not trusted, as the openai backend's is not: every attempt of mem0's LLM calls waits at
most `llm_timeout` seconds for any read and is given up once its answer is not complete `llm_timeout`
seconds after it was sent (checked as the body arrives: an endpoint that trickles its answer is cut off
within one more read; the client's own default allows 10 minutes per read, ~30 minutes per call with its
retries), and reads at most `tepa.body_limit.MAX_BODY_BYTES`, with `llm_max_retries` retries
on timeouts, 408/409/429 and 5xx; then the stream stops with one line and a rerun resumes it. The key
(read from `llm_api_key_env`) is redacted from that line and from the memories handed back, and registered
with the log filter that redacts it from mem0's own log records under a run (`tepa.redact`).
"""

from __future__ import annotations

import atexit
import functools
import itertools
import logging
import os
import shutil
import tempfile
import time
import warnings
from collections.abc import Hashable
from typing import Any

import numpy as np
from hydra.errors import CompactHydraException

from tepa.body_limit import MAX_BODY_BYTES, Oversized
from tepa.evidence import Evidence, Observation, Query, check_observation
from tepa.redact import register, scrub
from tepa.retrieval.rank import DEFAULT_TOP_K
from tepa.validation import check_int

INSTALL = "pip install 'tepa-harness[adapters]'"
_USER = "agent"  # every memory of a stream belongs to one agent: mem0 scopes memories by an id
_DIMS = 384  # the local embedding model's


class Mem0Error(CompactHydraException):
    """mem0 raised during a stream: one line naming the call and the step; the episodes before it are
    logged, so rerunning the same command resumes the stream."""


@functools.cache
def _mem0() -> Any:
    """The mem0 package, imported with telemetry off and its home folder in a temporary folder."""
    os.environ["MEM0_TELEMETRY"] = "False"
    if "MEM0_DIR" not in os.environ:
        home = tempfile.mkdtemp(prefix="tepa-mem0-")
        atexit.register(shutil.rmtree, home, True)
        os.environ["MEM0_DIR"] = home
    # Its notes on optional packages it can do without (spaCy, fastembed) and on local Qdrant's payload
    # indexes are not the run's concern.
    logging.getLogger("mem0").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", message="Payload indexes have no effect", category=UserWarning)
    try:
        import mem0
        from qdrant_client import QdrantClient
    except ImportError:
        raise Mem0Error(f"memory=mem0 needs the adapters extra: {INSTALL}") from None
    return mem0, QdrantClient(":memory:")


@functools.cache
def _embedder() -> Any:
    """The harness's local embedding model, cached per text, as mem0's embedder (one per process)."""
    from tepa.retrieval.cache import CachedEmbedder
    from tepa.retrieval.local import LocalEmbedder, fingerprint

    return CachedEmbedder(LocalEmbedder(), str(fingerprint()), None)


def _bounded_client(api_key: str, base_url: str | None, timeout: float, max_retries: int) -> Any:
    """An OpenAI client for mem0's LLM whose every attempt ends within `timeout` seconds (each read, and
    the whole body as it arrives) and reads at most MAX_BODY_BYTES, with `max_retries` retries."""
    import httpx2
    import openai

    class Body(httpx2.SyncByteStream):
        def __init__(self, stream: httpx2.SyncByteStream, deadline: float) -> None:
            self._stream, self._deadline = stream, deadline

        def __iter__(self):  # noqa: ANN204 (a generator)
            seen = 0
            for chunk in self._stream:
                seen += len(chunk)
                if seen > MAX_BODY_BYTES:
                    raise Oversized(f"response body longer than {MAX_BODY_BYTES} bytes")
                if time.monotonic() > self._deadline:
                    raise httpx2.ReadTimeout(f"no complete answer within {timeout:g} s")
                yield chunk

        def close(self) -> None:
            self._stream.close()

    class Transport(httpx2.HTTPTransport):
        def handle_request(self, request: httpx2.Request) -> httpx2.Response:
            deadline = time.monotonic() + timeout
            response = super().handle_request(request)
            if time.monotonic() > deadline:  # the headers took the whole wait (a slow connect and read)
                response.close()
                raise httpx2.ReadTimeout(f"no complete answer within {timeout:g} s")
            response.stream = Body(response.stream, deadline)
            return response

    http = openai.DefaultHttpxClient(transport=Transport(), timeout=timeout)
    return openai.OpenAI(
        api_key=api_key, base_url=base_url, timeout=timeout, max_retries=max_retries, http_client=http
    )


class _Embedder:
    """mem0's embedder interface over `_embedder()`."""

    def embed(self, text: str, memory_action: str | None = None) -> list[float]:
        return _embedder()([text])[0].tolist()

    def embed_batch(self, texts: list[str], memory_action: str = "add") -> list[list[float]]:
        return np.asarray(_embedder()(list(texts))).tolist()


_COLLECTIONS = itertools.count()


class Mem0Memory:
    """mem0's `Memory` behind the harness's protocol (see the module docstring)."""

    name = "mem0"
    #: How long mem0's LLM calls may wait changes how a stream runs, not its episodes (not in its identity).
    operational = frozenset({"llm_timeout", "llm_max_retries"})

    def __init__(
        self,
        top_k: int = DEFAULT_TOP_K,
        infer: bool = False,
        llm_base_url: str | None = None,
        llm_model: str = "gpt-4o-mini",
        llm_api_key_env: str = "OPENAI_API_KEY",
        threshold: float = 0.0,
        llm_timeout: float = 60.0,
        llm_max_retries: int = 2,
    ) -> None:
        self.top_k = check_int("top_k", top_k, 1)
        if type(infer) is not bool:
            raise ValueError(f"infer={infer!r}: must be true or false")
        if infer and not llm_base_url:
            raise ValueError("llm_base_url: infer=true needs an OpenAI-compatible endpoint for mem0's LLM")
        if type(llm_timeout) not in (int, float) or not 0 < llm_timeout < float("inf"):
            raise ValueError(f"llm_timeout={llm_timeout!r}: must be a number of seconds > 0")
        self.llm_max_retries = check_int("llm_max_retries", llm_max_retries, 0)
        self.infer = infer
        self.threshold = float(threshold)
        self.llm_timeout = float(llm_timeout)
        mem0, client = _mem0()
        self._key = os.environ.get(llm_api_key_env) or None
        register(self._key)  # redacted from every log record under a run
        api_key = self._key or "none"
        llm: dict[str, Any] = {"api_key": api_key, "model": llm_model, "temperature": 0.0}
        if llm_base_url:
            llm["openai_base_url"] = llm_base_url
        config = {
            "vector_store": {
                "provider": "qdrant",
                "config": {
                    "client": client,
                    "path": ":memory:",
                    "collection_name": f"tepa_{next(_COLLECTIONS)}",
                    "embedding_model_dims": _DIMS,
                },
            },
            "embedder": {"provider": "openai", "config": {"api_key": "none", "embedding_dims": _DIMS}},
            "llm": {"provider": "openai", "config": llm},
            "history_db_path": ":memory:",
        }
        try:
            self._memory = mem0.Memory.from_config(config)
        except Exception as exc:
            raise Mem0Error(
                self._scrub(f"memory=mem0: mem0 could not start: {type(exc).__name__}: {exc}")
            ) from None
        self._memory.embedding_model = _Embedder()
        if infer:  # mem0's own client waits up to 10 minutes per read, three times
            self._memory.llm.client = _bounded_client(
                api_key, llm_base_url, self.llm_timeout, self.llm_max_retries
            )
        self._keys: list[Hashable] = []  # by ref: the observation's key (mem0 stores its repr)
        self._stored = 0

    def observe(self, obs: Observation) -> None:
        check_observation(obs)
        ref = len(self._keys)
        self._keys.append(obs.key)
        metadata = {"key": repr(obs.key), "value": obs.value, "holds": obs.holds, "t": obs.t, "ref": ref}
        metadata["source"] = obs.source
        text = obs.text or obs.value
        result = self._call("add", obs.t, text, user_id=_USER, metadata=metadata, infer=self.infer)
        self._stored += len(result.get("results", ())) if isinstance(result, dict) else 0

    def retrieve(self, query: Query) -> list[Evidence]:
        if query.key is not None:
            filters = {"user_id": _USER, "key": repr(query.key)}
            found = self._call("get_all", query.t, filters=filters, top_k=max(self._stored, 1))
        else:
            filters = {"user_id": _USER}
            found = self._call(
                "search", query.t, query.text, filters=filters, top_k=self.top_k, threshold=self.threshold
            )
        hits = found.get("results", []) if isinstance(found, dict) else found
        evidence = [self._evidence(hit) for hit in hits]
        return sorted((e for e in evidence if e is not None), key=lambda e: (e.t, e.ref))

    def _evidence(self, hit: dict[str, Any]) -> Evidence | None:
        meta = hit.get("metadata") or {}
        ref = meta.get("ref")
        if type(ref) is not int or not 0 <= ref < len(self._keys):
            return None
        text = self._scrub(str(hit.get("memory") or ""))
        return Evidence(self._keys[ref], str(meta.get("value", "")), bool(meta.get("holds", True)),
                        int(meta.get("t", 0)), text, str(meta.get("source", "")), ref)  # fmt: skip

    def _call(self, method: str, t: int, *args: Any, **kwargs: Any) -> Any:
        try:
            return getattr(self._memory, method)(*args, **kwargs)
        except Exception as exc:
            raise Mem0Error(
                self._scrub(f"memory=mem0: mem0's {method} failed at step t={t}: {self._why(exc)}")[:800]
                + "; rerun the same command to resume"
            ) from None

    def _why(self, exc: BaseException) -> str:
        """The failure in a line: a timeout of mem0's LLM call says how long it waited."""
        import openai

        cause: BaseException | None = exc
        attempts = self.llm_max_retries + 1
        while cause is not None:
            if isinstance(cause, openai.APITimeoutError):
                return (
                    f"{type(exc).__name__}: mem0's LLM endpoint gave no complete answer within "
                    f"{self.llm_timeout:g} s, {attempts} attempt{'s' if attempts > 1 else ''} "
                    "(memory.llm_timeout)"
                )
            cause = cause.__cause__ or cause.__context__
        text = str(exc).strip()
        return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"

    def _scrub(self, text: str) -> str:
        return scrub(text, self._key)

    def feedback(self, used: list[Evidence], success: bool, t: int) -> None:
        """mem0 has no feedback hook: outcomes reach it as observations."""

    def on_phase_boundary(self, phase: str, t: int) -> None:
        """mem0 is not told about phases."""

    def snapshot(self) -> dict:
        return {"hypothesis": 0, "active": self._stored, "revoked": 0}
