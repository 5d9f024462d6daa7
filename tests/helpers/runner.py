"""The runner in process (as `python -m runners.run` runs a config once Hydra has composed it) and from
the command line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from runners.compose import PROJECT_ROOT, compose_config
from runners.run import RunSummary, execute


def run_overrides(*overrides: str) -> RunSummary:
    """Compose `overrides` from the project's config, validate them and run every stream (Hydra's own
    output folder aside: nothing is written outside `results_dir`)."""
    cfg = compose_config(overrides)
    return execute(cfg, cfg.hydra.runtime.choices)


def cli(
    cwd: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess:
    """`python -m runners.run ARGS` in `cwd`, as a user types it."""
    return subprocess.run(
        [sys.executable, "-m", "runners.run", *args], capture_output=True, text=True, cwd=cwd,
        timeout=timeout, env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT), **(env or {})},
    )  # fmt: skip
