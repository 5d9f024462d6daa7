"""The run's retrieval mode: the `retrieval` config node (`conf/retrieval/`), checked, and its ranker.

`keyed` (the default) retrieves a task's items by its key and leaves a run's identity as it was; `bm25`
and `dense` rank every retrievable item of the method by similarity to the query text
(`tepa.retrieval`). The dense mode embeds with the local model (`tepa.retrieval.local`, the `embed`
extra) or, with `base_url`, any OpenAI-compatible `/v1/embeddings` endpoint; vectors are checked (finite,
one length) and cached on disk (`cache_path`, keyed by model and dimension). The mode, the model's name
and its files' sha256 (or the endpoint and its model) are part of each stream's identity; the cache,
batch size, timeout and key variable are not.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from typing import Any

from tepa.evidence import Ranker
from tepa.retrieval import local
from tepa.retrieval.rank import MODES, BM25Ranker, DenseRanker

#: Keys of each mode's node, with their defaults (conf/retrieval/ sets them for the command line).
KEYS: dict[str, dict[str, Any]] = {
    "keyed": {},
    "bm25": {},
    "dense": {
        "model": local.MODEL,
        "base_url": None,
        "api_key_env": "OPENAI_API_KEY",
        "cache_path": None,
        "batch_size": 64,
        "timeout": 60.0,
    },
}
#: Keys that change how embeddings are obtained, not which: never part of a stream's identity.
OPERATIONAL = frozenset({"api_key_env", "cache_path", "batch_size", "timeout"})


@dataclass(frozen=True)
class RetrievalSpec:
    """A checked retrieval node: the mode and its parameters (defaults filled in)."""

    mode: str = "keyed"
    params: dict[str, Any] = field(default_factory=dict)

    def identity(self) -> dict[str, Any] | None:
        """What the mode adds to a stream's identity (None for `keyed`: identities stay as they were)."""
        if self.mode == "keyed":
            return None
        kept = {k: v for k, v in self.params.items() if k not in OPERATIONAL and v is not None}
        if self.mode == "dense" and self.params.get("base_url") is None:
            kept.update(local.fingerprint())
        return {"mode": self.mode, **kept}

    def ranker(self) -> Ranker | None:
        """The ranker the agent loop queries with (None: by key); built once per process and mode."""
        return _ranker(self.mode, json.dumps(self.params, sort_keys=True))


def check_retrieval(node: Any) -> RetrievalSpec:
    """The RetrievalSpec of a `retrieval` node (None or absent: keyed), or ValueError naming the key,
    e.g. "retrieval.mode='cosine': must be one of keyed, bm25, dense"."""
    if node is None:
        return RetrievalSpec()
    if isinstance(node, str):
        node = {"mode": node}
    if not isinstance(node, dict):
        raise ValueError(f"retrieval={node!r}: must be one of {', '.join(MODES)} (retrieval=bm25)")
    mode = node.get("mode", "keyed")
    if mode not in MODES:
        raise ValueError(f"retrieval.mode={mode!r}: must be one of {', '.join(MODES)}")
    known = KEYS[mode]
    for key in node:
        if key != "mode" and key not in known:
            takes = ", ".join(known) or "none"
            raise ValueError(f"retrieval.{key}: not a key of retrieval mode {mode} (its keys: {takes})")
    params = {**known, **{k: v for k, v in node.items() if k != "mode"}}
    if mode == "dense":
        _check_dense(params)
    return RetrievalSpec(mode, params)


def _check_dense(params: dict[str, Any]) -> None:
    for key, kind in (("batch_size", int), ("timeout", (int, float))):
        value = params[key]
        if isinstance(value, bool) or not isinstance(value, kind) or value <= 0:
            raise ValueError(f"retrieval.{key}={value!r}: must be a number > 0")
    if not isinstance(params["model"], str) or not params["model"]:
        raise ValueError(f"retrieval.model={params['model']!r}: must name an embedding model")
    if params["base_url"] is None:
        if params["model"] != local.MODEL:
            raise ValueError(
                f"retrieval.model={params['model']!r}: the local model is {local.MODEL!r} "
                "(set retrieval.base_url for an endpoint's model)"
            )
        missing = local.missing_packages()
        if missing:
            raise ValueError(
                f"retrieval=dense needs the embedding extra ({', '.join(missing)}): {local.INSTALL}"
            )
    elif not isinstance(params["base_url"], str) or not params["base_url"].startswith(
        ("http://", "https://")
    ):
        raise ValueError(f"retrieval.base_url={params['base_url']!r}: must be an http(s) URL ending in /v1")


@functools.cache
def _ranker(mode: str, params_json: str) -> Ranker | None:
    if mode == "keyed":
        return None
    if mode == "bm25":
        return BM25Ranker()
    from tepa.retrieval.cache import CachedEmbedder

    params = json.loads(params_json)
    if params["base_url"] is None:
        embed: Any = local.LocalEmbedder(params["batch_size"], local.default_threads())
        model_id = json.dumps(local.fingerprint(), sort_keys=True)
        where = f"the local model {local.MODEL}"
    else:
        from runners.embed.endpoint import EndpointEmbedder

        embed = EndpointEmbedder(
            params["base_url"],
            params["model"],
            params["api_key_env"],
            params["timeout"],
            params["batch_size"],
        )
        embed.probe()  # also learns the vectors' length, part of the cache's key
        model_id = json.dumps({"base_url": embed.url, "model": params["model"]}, sort_keys=True)
        where = f"retrieval.base_url={embed.url}"
    return DenseRanker(CachedEmbedder(embed, model_id, params["cache_path"], dims=embed.dims, where=where))
