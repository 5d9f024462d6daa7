"""The runner in process, as `python -m runners.run` runs a config once Hydra has composed it."""

from __future__ import annotations

from runners.compose import compose_config
from runners.run import RunSummary, execute


def run_overrides(*overrides: str) -> RunSummary:
    """Compose `overrides` from the project's config, validate them and run every stream (Hydra's own
    output folder aside: nothing is written outside `results_dir`)."""
    cfg = compose_config(overrides)
    return execute(cfg, cfg.hydra.runtime.choices)
