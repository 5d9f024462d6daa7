"""SLURM without a cluster: the sbatch job script a `hydra/launcher=submitit_slurm` multirun would submit
(`plan=true`), and the one-line refusal of a SLURM launch that cannot submit (`runners.preflight`): no
SLURM commands on PATH, a SLURM that does not answer (no configuration, no controller), or a partition
the cluster does not have. Otherwise submitit fails after Hydra has written its folders, with a traceback
ending in sbatch's error.

The script is submitit's own (`submitit.slurm.slurm._make_sbatch_string`), from the launcher's
parameters passed as the hydra submitit plugin passes them (`BaseSubmititLauncher.launch`): the
executor's init keys (`submitit_folder`, `max_num_timeout`), the shared keys as they are and the others
prefixed with `slurm_`. A sweep of N > 1 jobs is one array script (`--array=0-(N-1)%parallelism`), one
job a plain script, as `SlurmExecutor` submits them. Nothing is written and no SLURM command is run.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from typing import Any
from unittest import mock

from runners.config import ConfigError

#: The launcher choice that submits to SLURM, and the commands it needs there.
SLURM_LAUNCHER = "submitit_slurm"
SLURM_COMMANDS = ("sbatch", "srun", "sinfo")
#: Seconds `sinfo` may take to answer: it retries an unreachable controller for about 10 s.
SINFO_TIMEOUT_S = 60.0
_INIT_KEYS = {"max_num_timeout"}  # the plugin's `specific_init_keys`


def launcher_override(argv: Sequence[str]) -> str | None:
    """The `hydra/launcher=NAME` the command line chooses (the last one), if any."""
    return _last_value(argv, "hydra/launcher") or None


def check_slurm_available(argv: Sequence[str]) -> None:
    """Raise ConfigError (one line) when a multirun asks for the SLURM launcher and cannot submit: no
    SLURM commands here, a SLURM that does not answer, or a `hydra.launcher.partition` it lacks (submitit
    would fail later, after Hydra wrote its folders, with a traceback ending in sbatch's error)."""
    if not any(a in ("-m", "--multirun") for a in argv) or launcher_override(argv) != SLURM_LAUNCHER:
        return
    missing = [c for c in SLURM_COMMANDS if shutil.which(c) is None]
    if missing:
        raise ConfigError(
            f"hydra/launcher={SLURM_LAUNCHER}: no SLURM on this machine (no {' or '.join(missing)} on "
            f"PATH); nothing was submitted. Run the sweep here with hydra/launcher=submitit_local, or "
            f"add plan=true to print the sbatch script it would submit"
        )
    partitions = cluster_partitions()
    wanted = _last_value(argv, "hydra.launcher.partition")
    unknown = [p for p in (wanted or "").split(",") if p and p != "null" and p not in partitions]
    if unknown:
        raise ConfigError(
            f"hydra.launcher.partition={wanted}: this cluster has no partition {', '.join(unknown)} (sinfo "
            f"lists {', '.join(partitions) or 'none'}); nothing was submitted"
        )


def cluster_partitions() -> list[str]:
    """The partitions `sinfo` lists (the default one without its `*`); a ConfigError naming sinfo's own
    last line when SLURM does not answer (no slurm.conf, SLURM_CONF wrong, the controller down)."""
    command = ["sinfo", "--noheader", "--format=%P"]
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=SINFO_TIMEOUT_S)
        errors = proc.stderr.strip().splitlines()
        problem = "" if proc.returncode == 0 else errors[-1] if errors else f"status {proc.returncode}"
    except subprocess.TimeoutExpired:
        problem = f"no answer within {SINFO_TIMEOUT_S:.0f} s"
    except OSError as exc:
        problem = str(exc)
    if problem:
        raise ConfigError(
            f"hydra/launcher={SLURM_LAUNCHER}: SLURM does not answer here (sinfo: "
            f"{problem.strip().removeprefix('sinfo: ')}); nothing was "
            f"submitted. Check SLURM_CONF, or add plan=true to print the sbatch script it would submit"
        )
    return [p.rstrip("*") for p in proc.stdout.split()]


def _last_value(argv: Sequence[str], key: str) -> str | None:
    """The value the command line's last `key=VALUE` gives, if any."""
    found = None
    for arg in argv:
        name, sep, value = arg.partition("=")
        if sep and name.lstrip("+~") == key:
            found = value
    return found


def sbatch_script(launcher: Mapping[str, Any], n_jobs: int) -> str:
    """The sbatch script submitit writes for `n_jobs` jobs with the launcher config `launcher` (the
    resolved `hydra.launcher` node). A parameter submitit refuses is a ConfigError naming it."""
    import submitit
    from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
    from omegaconf import OmegaConf
    from submitit.slurm import slurm

    params = {k: v for k, v in launcher.items() if k != "_target_"}
    init_params = {"folder": params["submitit_folder"]}
    init_params.update({f"slurm_{k}": v for k, v in params.items() if k in _INIT_KEYS})
    baseparams = set(OmegaConf.structured(BaseQueueConf).keys())
    queue = {
        k if k in baseparams else f"slurm_{k}": v
        for k, v in params.items()
        if k not in _INIT_KEYS | {"submitit_folder"}
    }
    try:
        # submitit refuses to build a SLURM executor where srun is missing: the script needs no SLURM.
        with mock.patch.object(slurm.SlurmExecutor, "affinity", classmethod(lambda cls: 2)):
            executor = submitit.AutoExecutor(cluster="slurm", **init_params)
        executor.update_parameters(**queue)
    except (AssertionError, NameError, TypeError, ValueError) as exc:
        problem = " ".join(str(exc).split())
        raise ConfigError(f"hydra.launcher: submitit refuses the parameters: {problem}") from None
    ex = executor._executor
    parameters = dict(ex.parameters)
    if n_jobs > 1:  # SlurmExecutor submits a map of several jobs as one array
        parameters["map_count"] = n_jobs
    return slurm._make_sbatch_string(command=ex._submitit_command_str, folder=ex.folder, **parameters)


def describe(launcher: Mapping[str, Any], jobs: Sequence[Sequence[str]]) -> str:
    """The script for `jobs` with a header, then which job each array task runs."""
    from hydra.core.utils import filter_overrides

    script = sbatch_script(launcher, len(jobs))
    kind = f"one array of {len(jobs)} tasks" if len(jobs) > 1 else "one job"
    lines = [f"sbatch script that hydra/launcher={SLURM_LAUNCHER} would submit ({kind}; not submitted):"]
    lines += [script.rstrip("\n"), ""]
    for i, job in enumerate(jobs):
        lines.append(f"task {i}: {' '.join(filter_overrides(job))}")
    return "\n".join(lines)


def for_plan(cfg: Any, jobs: Sequence[Sequence[str]], plan_on: re.Pattern[str]) -> str:
    """For `plan=true` (`runners.plan`): under `hydra/launcher=submitit_slurm`, the script the launch of
    `jobs` would submit, from the composed `cfg` (its `plan=true` overrides, matched by `plan_on`, left
    out of the task lines); under any other launcher nothing."""
    from omegaconf import OmegaConf, open_dict

    if cfg.hydra.runtime.choices.get("hydra/launcher") != SLURM_LAUNCHER:
        return ""
    cfg = cfg.copy()
    with open_dict(cfg):  # Hydra names the job after the task's module (runners/run.py), not compose's `app`
        cfg.hydra.job.name = "run"
    launcher = OmegaConf.to_container(cfg.hydra.launcher, resolve=True)
    shown = [[o for o in job if not plan_on.fullmatch(o)] for job in jobs]
    return describe(launcher, shown)  # type: ignore[arg-type]
