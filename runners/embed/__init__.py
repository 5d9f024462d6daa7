"""Text embeddings for the `dense` retrieval mode: a local ONNX model (`local`), any OpenAI-compatible
`/v1/embeddings` endpoint (`endpoint`), and the on-disk cache in front of either (`cache`)."""
