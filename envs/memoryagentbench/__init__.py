"""MemoryAgentBench FactConsolidation: the environment (`env`), its data (`data`, `download`),
the source format (`parse`) and the benchmark's metric (`metric`).

`MemoryAgentBench` is imported on first use, so that running a submodule
(`python -m envs.memoryagentbench.<module>`) does not import the environment first.
"""

from tepa.lazy import lazy_exports

__all__ = ["MemoryAgentBench"]

__getattr__ = lazy_exports(__name__, {"MemoryAgentBench": "envs.memoryagentbench.env"})
