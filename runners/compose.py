"""Compose the project's Hydra config from overrides, as `python -m runners.run` does, without running it.

Benchmarks, calibration, the run identity and the tests build their components from exactly what a run
would compose: `compose_spec(["env=preference_stream", "memory=lww"])` is the validated RunSpec of
`python -m runners.run env=preference_stream memory=lww`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.errors import HydraException
from omegaconf import DictConfig

from runners.config import ConfigError, RunSpec, validate

PROJECT_ROOT = Path(__file__).resolve().parent.parent
CONF_DIR = PROJECT_ROOT / "conf"  # absolute, so that it resolves the same from `-m`, the script and workers


def compose_config(overrides: Sequence[str] = (), conf_dir: str | Path = CONF_DIR) -> DictConfig:
    """The config `overrides` compose to, with Hydra's own node (`hydra.runtime.choices` names the
    selected group options). Inside a running Hydra app it composes from that app's config search path
    (which includes a `--config-dir`), else from `conf_dir`. Hydra's own errors pass through."""
    if GlobalHydra.instance().is_initialized():
        return compose("config", overrides=list(overrides), return_hydra_config=True)
    with initialize_config_dir(config_dir=str(conf_dir), version_base="1.3"):
        return compose("config", overrides=list(overrides), return_hydra_config=True)


def compose_spec(overrides: Sequence[str] = (), conf_dir: str | Path = CONF_DIR) -> RunSpec:
    """The validated RunSpec of `python -m runners.run OVERRIDES`; a ConfigError (one line) for an
    override Hydra cannot apply or a config that cannot run."""
    try:
        cfg = compose_config(overrides, conf_dir)
    except HydraException as exc:
        raise ConfigError(_one_line(str(exc))) from None
    return validate(cfg, cfg.hydra.runtime.choices)


def _one_line(message: str) -> str:
    """Hydra's message on one line, without the config search path it appends to a missing option."""
    message = message.split("\nConfig search path:", 1)[0]
    return " ".join(part.strip() for part in message.splitlines() if part.strip())
