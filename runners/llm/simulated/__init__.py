"""The offline simulated reader (`reader`: a documented behaviour model of how an LLM reads its prompt)
and its calibration (`calibrate`, `python -m runners.llm.simulated.calibrate`).

`SimulatedBackend` is imported on first use, so that running the calibration as a module does not import
the reader first.
"""

from tepa.lazy import lazy_exports

__all__ = ["SimulatedBackend"]

__getattr__ = lazy_exports(__name__, {"SimulatedBackend": "runners.llm.simulated.reader"})
