"""The `dense` retrieval mode as the runner builds it from the config (`retrieval`), with any
OpenAI-compatible `/v1/embeddings` endpoint (`endpoint`) beside the local model of `tepa.retrieval`."""
