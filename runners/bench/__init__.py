"""Benchmarks: memory-operation throughput, the agent end to end, and the timing of `make reproduce`
(`python -m runners.bench`)."""
