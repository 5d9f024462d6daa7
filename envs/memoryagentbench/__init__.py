"""MemoryAgentBench FactConsolidation: the environment (`env`), its data (`data`, `download`),
the source format (`parse`) and the benchmark's metric (`metric`).

`MemoryAgentBench` is imported on first use, so that running a submodule
(`python -m envs.memoryagentbench.<module>`) does not import the environment first.
"""

from typing import Any

__all__ = ["MemoryAgentBench"]


def __getattr__(name: str) -> Any:
    if name == "MemoryAgentBench":
        from envs.memoryagentbench.env import MemoryAgentBench

        return MemoryAgentBench
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
