"""A sweep's jobs composed once, not twice, where the launcher runs them in its own process.

Before launching a batch, the sweeper composes every job (`Sweeper.validate_batch_is_legal`), so that
a config that cannot compose stops the sweep before any job runs; a launcher that runs the jobs in its
own process (joblib with `n_jobs=1`, Hydra's basic launcher) then composes each one again, from the same
master config and overrides, to the same config. Here the launcher is handed the sweeper's compositions:
each job takes its own once, and everything else goes to Hydra's config loader as before. A launcher
that runs the jobs in other processes (joblib's workers, SLURM) pickles the plain loader, and its jobs
compose as they always did.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from hydra.core.config_loader import ConfigLoader
from hydra.plugins.sweeper import Sweeper
from omegaconf import DictConfig

# Hydra's own check, for a sweeper whose compositions cannot be handed on (no context or launcher).
_HYDRAS_CHECK = Sweeper.validate_batch_is_legal


class ValidatedJobs(ConfigLoader):
    """Hydra's config loader `loader`, but a job of the batch the sweeper composed from `master` gets
    that composition (once; nobody else holds it) instead of a new one."""

    def __init__(
        self, loader: ConfigLoader, master: DictConfig, composed: dict[tuple[str, ...], DictConfig]
    ) -> None:
        self.loader = loader
        self.master = master
        self.composed = composed

    def load_sweep_config(self, master_config: DictConfig, sweep_overrides: list[str]) -> DictConfig:
        if master_config is self.master:
            config = self.composed.pop(tuple(sweep_overrides), None)
            if config is not None:
                return config
        return self.loader.load_sweep_config(master_config, sweep_overrides)

    def load_configuration(self, *args: Any, **kwargs: Any) -> DictConfig:
        return self.loader.load_configuration(*args, **kwargs)

    def get_search_path(self) -> Any:
        return self.loader.get_search_path()

    def get_sources(self) -> Any:
        return self.loader.get_sources()

    def list_groups(self, parent_name: str) -> Any:
        return self.loader.list_groups(parent_name)

    def get_group_options(self, *args: Any, **kwargs: Any) -> Any:
        return self.loader.get_group_options(*args, **kwargs)

    def compute_defaults_list(self, *args: Any, **kwargs: Any) -> Any:
        return self.loader.compute_defaults_list(*args, **kwargs)

    def __reduce__(self) -> tuple[Any, tuple[ConfigLoader]]:
        # A job in another process composes its own config: it is sent the plain loader, not the batch.
        return _plain, (self.loader,)


def _plain(loader: ConfigLoader) -> ConfigLoader:
    return loader


def install() -> None:
    """Make every sweeper hand its launcher the jobs it composed; idempotent.

    This wraps a Hydra method rather than configuring a sweeper of the project's own because Hydra
    instantiates sweepers only from an installed `hydra_plugins` package, and the check is the one
    place that sees both the compositions and the launcher that composes them again."""
    if getattr(Sweeper.validate_batch_is_legal, "_tepa", False):
        return
    Sweeper.validate_batch_is_legal = _validate_batch_is_legal  # type: ignore[method-assign]


def _validate_batch_is_legal(self: Sweeper, batch: Sequence[Sequence[str]]) -> None:
    """Hydra's check (compose every job of the batch: the first that cannot raises), keeping the
    compositions for the launcher. A sweeper without Hydra's context or a launcher is checked as before."""
    context = getattr(self, "hydra_context", None)
    launcher = getattr(self, "launcher", None)
    config = getattr(self, "config", None)
    if context is None or launcher is None or config is None:
        return _HYDRAS_CHECK(self, batch)
    loader = context.config_loader
    composed = {
        tuple(overrides): loader.load_sweep_config(master_config=config, sweep_overrides=list(overrides))
        for overrides in batch
    }
    jobs = ValidatedJobs(loader, config, composed)
    launcher.hydra_context = dataclasses.replace(context, config_loader=jobs)


_validate_batch_is_legal._tepa = True  # type: ignore[attr-defined]
