"""Real local models behind OpenAI-compatible endpoints (the `local-llm` extra): `serve` starts SmolLM2
or Gemma 3 (`python -m runners.llm.local.serve --model gemma3`), `llama_server` is the completions
server over llama.cpp that Gemma needs."""
