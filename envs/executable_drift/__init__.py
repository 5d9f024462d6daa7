"""File-backed executable drift: the environment (`env`), its tools (`tools`), the tool worker
process that runs them (`worker`) and the sandbox (`sandbox`).

`ExecutableDrift` is imported on first use, so that running a submodule
(`python -m envs.executable_drift.<module>`) does not import the environment first.
"""

from tepa.lazy import lazy_exports

__all__ = ["ExecutableDrift"]

__getattr__ = lazy_exports(__name__, {"ExecutableDrift": "envs.executable_drift.env"})
