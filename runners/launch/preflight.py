"""Checks that must run before Hydra does: Hydra copies the command line and the composed config into
`<results_dir>/hydra/.../.hydra/*.yaml` (and a multirun's `multirun.yaml`) before the run's own
validation sees them, and it reports a YAML syntax error or an unwritable output folder as a traceback.

So `python -m runners.run` first refuses, with one line naming the override or the file and line:
a credential-like value or a secret-named key on the command line, a `name` (or any name of a sweep
over names, `choice(...)` included) that is not a plain directory name, a `results_dir` (or its
`hydra` folder) that cannot be written, a config file that is not valid YAML, and a SLURM multirun on a
SLURM that cannot take it (no SLURM commands, no answer from `sinfo`, an unknown partition;
`runners.launch.slurm_script`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import yaml
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException

from analysis.data.validate import unwritable
from runners.config import ConfigError, RunConfig, check_dir_name, check_results_dir, secret_problem
from runners.launch.slurm_script import check_slurm_available

_DIR_OPTIONS = ("--config-dir", "-cd", "--config-path", "-cp")
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when present: about 10x faster
_PARSER = OverridesParser.create()


def check_command_line(argv: Sequence[str], conf_dir: Path, *, writes: bool = True) -> None:
    """Raise ConfigError for the first override (or config file) that must not reach Hydra; the
    config folders are `conf_dir` and any given with --config-dir or --config-path. `writes=False` (a
    plan) leaves `results_dir` alone: checking it creates it."""
    if writes:  # before `results_dir` is created; a plan prints the script instead of submitting it
        check_slurm_available(argv)
    dirs = [conf_dir]
    results_dir = RunConfig.results_dir
    for i, arg in enumerate(argv):
        if arg in _DIR_OPTIONS and i + 1 < len(argv):
            dirs.append(Path(argv[i + 1]))
        elif arg.startswith("--config-dir="):
            dirs.append(Path(arg.split("=", 1)[1]))
        if arg.startswith("-") or "=" not in arg:
            continue
        key, value = arg.split("=", 1)
        key = key.lstrip("+~")
        problem = secret_problem(key, value)
        if problem:
            raise ConfigError(f"{key}{problem}")
        if key == "name":
            for name in _values(arg):  # a sweep over names (a, b or choice(a, b), range...): each one
                check_dir_name("name", name)
        elif key == "results_dir" and writes:
            check_results_dir(value)
            results_dir = value
    _check_hydra_folder(Path(results_dir) / "hydra")
    check_yaml_files(dirs)


def _check_hydra_folder(folder: Path) -> None:
    """Hydra writes each run's config into `<results_dir>/hydra/` (conf/config.yaml) before anything
    else: one there that cannot be written (a file in its place, a read-only folder) is one line."""
    if folder.exists() or folder.is_symlink():
        problem = unwritable(folder)
        if problem:
            raise ConfigError(f"{folder}: {problem}; Hydra writes each run's config there")


def _values(override: str) -> list[str]:
    """The values an override takes, as Hydra reads it: each value of a sweep (`a,b`, `choice(a,b)`,
    `range(3)`), or the one value; none when Hydra cannot list them (its own error then says why)."""
    try:
        parsed = _PARSER.parse_override(override)
        if parsed.is_sweep_override():
            return list(parsed.sweep_string_iterator())
        return [str(parsed.value())]
    except HydraException:  # a syntax error, or a sweep Hydra enumerates only later (glob, interval)
        return []


def check_yaml_files(dirs: Iterable[Path]) -> None:
    """Parse every config file under `dirs`: a syntax error becomes one line with file and line, and a
    credential-like value in a file is refused before Hydra copies it into the results tree."""
    for folder in dirs:
        for path in sorted(Path(folder).rglob("*.yaml")):
            try:
                data = yaml.load(path.read_text(encoding="utf-8"), Loader=_LOADER)
            except yaml.MarkedYAMLError as exc:
                mark = exc.problem_mark or exc.context_mark
                line = f", line {mark.line + 1}" if mark is not None else ""
                raise ConfigError(f"{_shown(path)}{line}: not valid YAML: {exc.problem or exc}") from None
            except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
                raise ConfigError(f"{_shown(path)}: unreadable config file: {exc}") from None
            _check_values(path, data, "")


def _check_values(path: Path, data: object, prefix: str) -> None:
    if isinstance(data, dict):
        for key, value in data.items():
            name = f"{prefix}{key}"
            if isinstance(value, dict | list):
                _check_values(path, value, f"{name}.")
                continue
            problem = secret_problem(str(name), value)
            if problem and value not in (None, "???"):
                raise ConfigError(f"{_shown(path)}: {name}{problem}")
    elif isinstance(data, list):
        for item in data:
            if isinstance(item, dict | list):
                _check_values(path, item, prefix)
            elif secret_problem(prefix.rstrip(".") or "item", item):
                raise ConfigError(f"{_shown(path)}: {prefix.rstrip('.')}{secret_problem(prefix, item)}")


def _shown(path: Path) -> str:
    """The file's path relative to the working directory when it is below it."""
    relative = os.path.relpath(path)
    return str(path) if relative.startswith("..") else relative
