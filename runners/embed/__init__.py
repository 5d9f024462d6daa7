"""Text embeddings for the `dense` retrieval mode: a local ONNX model (`local`), any OpenAI-compatible
`/v1/embeddings` endpoint (`endpoint`), and the on-disk cache in front of either (`cache`)."""

from hydra.errors import CompactHydraException


class EmbeddingError(CompactHydraException):
    """Embeddings cannot be had (a missing extra, an endpoint that cannot embed): one line naming the
    key or the install command, which the command line prints without a traceback."""
