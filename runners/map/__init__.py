"""The robustness map's declaration and its jobs (`python -m runners.map` runs them).

A map is an experiment whose sweep (`hydra.sweeper.params`) crosses environment keys (the grid: outcome
noise x reversal rate) with memory methods, plus a declaration in `conf/map/` naming the tuning seeds and
each method's own tuning grid. Every job is one run of `python -m runners.run` (one config, several
seeds); the driver writes each job as a config of its own (`map_job/<name>.yaml`) and launches a stage
as one Hydra multirun over them, so resume, identity and the launchers (joblib, SLURM) are the runner's.

Everything is checked before any episode runs; a problem is one `ConfigError` line naming the key.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Glob
from hydra.errors import HydraException
from omegaconf import OmegaConf

from analysis.map.runs import grid_cells, grid_points
from runners.compose import CONF_DIR, compose_config
from runners.config import ConfigError
from runners.registry import (
    HARNESS_KEYS,
    MEMORY_DIR,
    build_memory,
    import_target,
    memory_entry,
    memory_names,
)

MAP_DIR = CONF_DIR / "map"
JOB_GROUP = "map_job"
_DECLARATION_KEYS = frozenset({"experiment", "tuning_seeds", "tune", "evidence_budget"})


@dataclass(frozen=True)
class MapSpec:
    """A checked map: the grid's axes (env key -> values), methods, seeds, tuning grids, and where its
    runs go. `env` and `memory_defaults` are the resolved configs every cell and grid point start from."""

    declaration: str
    experiment: str
    name: str
    results_dir: str
    axes: dict[str, tuple[float, ...]]
    methods: tuple[str, ...]
    eval_seeds: tuple[int, ...]
    tuning_seeds: tuple[int, ...]
    tune: dict[str, dict[str, tuple[Any, ...]]]
    env: dict[str, Any]
    memory_defaults: dict[str, dict[str, Any]]
    max_episodes: int | None
    forward: tuple[str, ...] = ()  # command-line overrides every job gets (not the grid's, not seeds)
    evidence_budget: int | None = None  # `max_evidence` of the equal-budget evaluation (None: none)

    def cells(self) -> list[dict[str, float]]:
        """Every grid cell, as env key -> value, in grid order (the analysis' order)."""
        return grid_cells({k: list(v) for k, v in self.axes.items()})

    def points(self, method: str) -> list[dict[str, Any]]:
        """A method's tuning grid points (param -> value), in grid order; none when it is not tuned."""
        grid = self.tune.get(method)
        return grid_points({k: list(v) for k, v in grid.items()} if grid else None)

    def to_json(self) -> dict[str, Any]:
        """What the analysis needs to read the map's runs (it never imports the harness)."""
        return {
            "declaration": self.declaration,
            "experiment": self.experiment,
            "name": self.name,
            "axes": {k: list(v) for k, v in self.axes.items()},
            "methods": list(self.methods),
            "eval_seeds": list(self.eval_seeds),
            "tuning_seeds": list(self.tuning_seeds),
            "tune": {m: {k: list(v) for k, v in grid.items()} for m, grid in self.tune.items()},
            "env": self.env,
            "memory_defaults": self.memory_defaults,
            "max_episodes": self.max_episodes,
            "evidence_budget": self.evidence_budget,
        }


@dataclass(frozen=True)
class Job:
    """One run of a stage: a method, a cell, the method's parameters that differ from its entry, seeds."""

    name: str
    method: str
    cell: dict[str, float]
    params: dict[str, Any]
    seeds: tuple[int, ...]
    max_evidence: int | None = None

    def config(self) -> str:
        """The job as a config of the `map_job` group (package _global_, applied after the experiment)."""
        env = {key.removeprefix("env."): value for key, value in self.cell.items()}
        body = {
            "defaults": [{"override /memory": self.method}],
            "env": env,
            "seeds": list(self.seeds),
        }
        if self.max_evidence is not None:
            body["max_evidence"] = self.max_evidence
        if self.params:
            body["memory"] = dict(self.params)
        return "# @package _global_\n" + OmegaConf.to_yaml(OmegaConf.create(body))


def load_map(declaration: str | Path = "robustness_map", overrides: Sequence[str] = ()) -> MapSpec:
    """Read and check a map declaration (a name in conf/map/ or a path) with command-line overrides:
    an override of a grid axis (`env.noise=0,0.2`) or of `memory` replaces that sweep; any other
    (`seeds=[...]`, `max_episodes=50`, `env.phase_length=30`) applies to every job."""
    path = (
        Path(declaration) if str(declaration).endswith((".yaml", ".yml")) else MAP_DIR / f"{declaration}.yaml"
    )
    if not path.is_file():
        raise ConfigError(f"map={declaration}: no such map declaration ({path})")
    raw = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
    if not isinstance(raw, dict):
        raise ConfigError(f"{path.name}: must be a mapping with keys {', '.join(sorted(_DECLARATION_KEYS))}")
    unknown = sorted(set(raw) - _DECLARATION_KEYS)
    if unknown:
        raise ConfigError(f"{unknown[0]}: not a map key (the keys: {', '.join(sorted(_DECLARATION_KEYS))})")
    experiment = raw.get("experiment")
    if not isinstance(experiment, str) or not (CONF_DIR / "experiment" / f"{experiment}.yaml").is_file():
        raise ConfigError(f"experiment={experiment!r}: must name a config in conf/experiment/")
    sweep_keys = set(OmegaConf.load(CONF_DIR / "experiment" / f"{experiment}.yaml").hydra.sweeper.params)
    swept, fixed, forward = _split_overrides(overrides, sweep_keys)
    try:
        cfg = compose_config([f"experiment={experiment}", *fixed])
    except HydraException as exc:
        raise ConfigError(str(exc).splitlines()[0]) from None
    sweep = {**_sweep_params(cfg.hydra.sweeper.params or {}), **swept}
    methods = tuple(sweep.pop("memory", ()))
    if not methods:
        raise ConfigError(f"experiment={experiment}: hydra.sweeper.params.memory: the map needs its methods")
    unknown_methods = [m for m in methods if m not in memory_names()]
    if unknown_methods:
        raise ConfigError(f"memory={unknown_methods[0]}: not a memory method ({', '.join(memory_names())})")
    axes = {key: tuple(_number(key, v) for v in values) for key, values in sweep.items()}
    if not axes or not all(key.startswith("env.") for key in axes):
        raise ConfigError(f"experiment={experiment}: the grid must sweep env keys only, got {sorted(axes)}")
    eval_seeds = tuple(cfg.seeds or (cfg.seed,))
    tune = _tune(raw.get("tune") or {}, methods)
    tuning_seeds = _seeds("tuning_seeds", raw.get("tuning_seeds"))
    shared = sorted(set(tuning_seeds) & set(eval_seeds))
    if shared:
        raise ConfigError(
            f"tuning_seeds: seed {shared[0]} is also an evaluation seed (seeds); they must be disjoint"
        )
    env = OmegaConf.to_container(cfg.env, resolve=True)
    assert isinstance(env, dict)
    missing = [key for key in axes if key.removeprefix("env.") not in env]
    if missing:
        raise ConfigError(
            f"{missing[0]}: not set by experiment={experiment} (set it there, e.g. to its default)"
        )
    spec = MapSpec(
        declaration=path.stem,
        experiment=experiment,
        name=str(cfg.name),
        results_dir=str(cfg.results_dir),
        axes=axes,
        methods=methods,
        eval_seeds=eval_seeds,
        tuning_seeds=tuning_seeds,
        tune=tune,
        env={k: v for k, v in env.items() if k != "_target_"},
        memory_defaults={m: _defaults(m) for m in methods},
        max_episodes=cfg.max_episodes,
        forward=tuple(forward),
        evidence_budget=_budget(raw.get("evidence_budget")),
    )
    _check_cells(spec, str(env["_target_"]))
    return spec


def tuning_jobs(spec: MapSpec) -> list[Job]:
    """Stage 1: every grid point of every tuned method in every cell, on the tuning seeds, and every
    method's defaults unless they are one of its grid points: the analysis picks each cell's best simple
    baseline (tuned, and at defaults) by these runs, never by an evaluation seed."""
    jobs = []
    for c, cell in enumerate(spec.cells()):
        for method in spec.methods:
            points = spec.points(method)
            defaults = spec.memory_defaults[method]
            for p, params in enumerate(points):
                jobs.append(Job(f"tune-c{c}-{method}-p{p}", method, cell, params, spec.tuning_seeds))
            if not any(all(defaults.get(k) == v for k, v in point.items()) for point in points):
                jobs.append(Job(f"tune-c{c}-{method}-defaults", method, cell, {}, spec.tuning_seeds))
    return jobs


def evaluation_jobs(spec: MapSpec, chosen: Mapping[tuple[int, str], Mapping[str, Any]]) -> list[Job]:
    """Stage 2: every method in every cell at its defaults (the defaults-only map) and, for a tuned
    method, at the point chosen for that cell (`chosen[(cell index, method)]`), on the evaluation seeds.
    A chosen point equal to the defaults is one job. With an evidence budget, every method also runs at
    its chosen point with `max_evidence` set to it (the same budget for every method), on the tuning seeds
    too: the best simple baseline under the budget is picked by those."""
    jobs = []
    for c, cell in enumerate(spec.cells()):
        for method in spec.methods:
            jobs.append(Job(f"eval-c{c}-{method}-defaults", method, cell, {}, spec.eval_seeds))
            params = dict(chosen.get((c, method), {}))
            defaults = spec.memory_defaults[method]
            if any(defaults.get(k) != v for k, v in params.items()):
                jobs.append(Job(f"eval-c{c}-{method}-tuned", method, cell, params, spec.eval_seeds))
            if spec.evidence_budget is not None:
                changed = {k: v for k, v in params.items() if defaults.get(k) != v}
                name = f"eval-c{c}-{method}-budget"
                seeds = spec.tuning_seeds + spec.eval_seeds
                jobs.append(Job(name, method, cell, changed, seeds, spec.evidence_budget))
    return jobs


def write_jobs(jobs: Iterable[Job], root: Path) -> list[str]:
    """Write each job as `root/map_job/<name>.yaml` (the folder is emptied first) and return the names."""
    folder = root / JOB_GROUP
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.yaml"):
        old.unlink()
    names = []
    for job in jobs:
        (folder / f"{job.name}.yaml").write_text(job.config(), encoding="utf-8")
        names.append(job.name)
    return names


def write_spec(
    spec: MapSpec, path: Path, chosen: Mapping[tuple[int, str], Mapping[str, Any]] | None = None
) -> None:
    """The map as the analysis reads it (`map.json`), with the chosen points once stage 1 has run."""
    data = spec.to_json()
    if chosen is not None:
        data["chosen"] = [{"cell": c, "method": m, "params": dict(p)} for (c, m), p in sorted(chosen.items())]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")


# ----------------------------------------------------------------------------------------- internals


def _split_overrides(
    overrides: Sequence[str], sweep_keys: set[str]
) -> tuple[dict[str, list[str]], list[str], list[str]]:
    """The overrides that replace a sweep of the experiment (its keys, `memory`, or any comma list),
    those composed into the map (the rest but Hydra's own), and those every job gets (the composed ones
    but the seeds, which the jobs set, and Hydra's own)."""
    parser = OverridesParser.create()
    swept: dict[str, list[str]] = {}
    fixed, forward = [], []
    for text in overrides:
        try:
            override = parser.parse_override(text)
        except HydraException as exc:
            raise ConfigError(f"{text}: {str(exc).splitlines()[0]}") from None
        key = override.key_or_group
        if override.is_sweep_override() or key in sweep_keys or key == "memory":
            swept[key] = (
                list(override.sweep_string_iterator())
                if override.is_sweep_override()
                else [override.get_value_element_as_str()]
            )
        elif key.startswith("hydra"):
            forward.append(text)
        else:
            fixed.append(text)
            if key not in ("seed", "seeds"):
                forward.append(text)
    return swept, fixed, forward


def _sweep_params(params: Mapping[str, Any]) -> dict[str, list[str]]:
    """The experiment's sweep, expanded as Hydra's basic sweeper expands it (`glob(...)` included)."""
    if not params:
        return {}
    parser = OverridesParser.create()
    swept = {}
    for key, value in params.items():
        override = parser.parse_override(f"{key}={value}")
        if key == "memory" and isinstance(override.value(), Glob):  # as runners.registry expands it
            swept[key] = override.value().filter(sorted(p.stem for p in MEMORY_DIR.glob("*.yaml")))
        else:
            swept[key] = list(override.sweep_string_iterator())
    return swept


def _number(key: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(f"{key}={text}: a grid value must be a number") from None
    return value


def _budget(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"evidence_budget={value!r}: must be an int >= 1 (items per prompt) or null")
    return value


def _seeds(key: str, value: Any) -> tuple[int, ...]:
    if not isinstance(value, list) or not value:
        raise ConfigError(f"{key}={value!r}: must be a non-empty list of seeds")
    if not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in value):
        raise ConfigError(f"{key}={value!r}: seeds must be non-negative ints")
    if len(set(value)) != len(value):
        raise ConfigError(f"{key}={value!r}: must not repeat a seed")
    return tuple(value)


def _defaults(method: str) -> dict[str, Any]:
    return {k: v for k, v in memory_entry(method).items() if k != "_target_" and k not in HARNESS_KEYS}


def _tune(tune: Any, methods: Sequence[str]) -> dict[str, dict[str, tuple[Any, ...]]]:
    """Each method's grid, checked: a method of the map, parameters it takes, non-empty value lists,
    and every point accepted by the class's own range checks."""
    if not isinstance(tune, dict):
        raise ConfigError(f"tune={tune!r}: must map methods to their grids")
    grids: dict[str, dict[str, tuple[Any, ...]]] = {}
    for method, grid in tune.items():
        key = f"tune.{method}"
        if method not in methods:
            raise ConfigError(f"{key}: not a method of the map ({', '.join(methods)})")
        if not isinstance(grid, dict) or not grid:
            raise ConfigError(
                f"{key}: empty grid (name at least one parameter and its values, or leave the method out)"
            )
        takes = _defaults(method)
        for param, values in grid.items():
            if param not in takes:
                raise ConfigError(
                    f"{key}.{param}: not a parameter of {method} (it takes: {', '.join(takes)})"
                )
            if not isinstance(values, list) or not values:
                raise ConfigError(f"{key}.{param}={values!r}: empty grid (give a non-empty list of values)")
        grids[method] = {param: tuple(values) for param, values in grid.items()}
        for point in grid_points(grid):
            try:
                build_memory(method, **point)
            except (TypeError, ValueError) as exc:
                raise ConfigError(f"{key}: {exc} (at {point})") from None
    return grids


def _check_cells(spec: MapSpec, env_target: str) -> None:
    """Every cell's environment is built once, so that a grid value out of range is refused (naming the
    key, as a run would) before any episode runs."""
    cls = import_target(env_target)
    for cell in spec.cells():
        params = {**spec.env, **{k.removeprefix("env."): v for k, v in cell.items()}}
        try:
            cls(**params).close()
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"env.{exc}") from None
