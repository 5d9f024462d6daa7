"""File-backed executable drift: the environment (`env`), its tools (`tools`), the tool worker
process that runs them (`worker`) and the sandbox (`sandbox`).

`ExecutableDrift` is imported on first use, so that running a submodule
(`python -m envs.executable_drift.<module>`) does not import the environment first.
"""

from typing import Any

__all__ = ["ExecutableDrift"]


def __getattr__(name: str) -> Any:
    if name == "ExecutableDrift":
        from envs.executable_drift.env import ExecutableDrift

        return ExecutableDrift
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
