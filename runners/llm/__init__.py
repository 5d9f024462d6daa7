"""Model backends: the protocol, the offline simulated reader and its calibration, the openai-compatible
client with its response cache and log-likelihood scoring, and the local llama.cpp servers."""
