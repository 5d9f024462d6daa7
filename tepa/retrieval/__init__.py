"""Retrieval every memory shares: the ranking step and its modes (`rank`: keyed, BM25, cosine similarity
of embeddings), the local embedding model (`local`) and the on-disk cache in front of any embedder
(`cache`). Memory methods and adapters use them without the runner; the runner's `runners.embed` builds
a mode from the config and adds the embedding endpoint."""

from hydra.errors import CompactHydraException


class EmbeddingError(CompactHydraException):
    """Embeddings cannot be had (a missing extra, an endpoint that cannot embed): one line naming the
    key or the install command, which the command line prints without a traceback."""
