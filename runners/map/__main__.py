"""`python -m runners.map [--map NAME] [OVERRIDES...]`: run a robustness map (what `make map` runs).

Stage 1 runs every tuned method's grid points in every cell on the tuning seeds (and every method's
defaults, by which the analysis picks each cell's best simple baseline); the point with the highest mean
success over them is chosen per cell (`analysis.map.runs.choose`, which reads only runs on tuning
seeds). Stage 2 runs every method in every cell on the evaluation seeds at its defaults (the
defaults-only map) and at its chosen point, and under the evidence budget on both seed sets. Each
stage is one multirun of `python -m runners.run` over the stage's jobs, so a rerun skips what is
complete and resumes what is not, and any Hydra launcher runs it (`hydra/launcher=submitit_slurm
hydra.launcher.partition=...`; default: joblib). The map's description for the analysis goes to
`<results_dir>/map.json`, with the chosen points once stage 1 is done. OVERRIDES as for
`runners.map.load_map` (e.g. `env.noise=0,0.2 max_episodes=100`); `hydra...` overrides go to the
launcher only.

SIGTERM is passed on to the running stage's multirun, which stops its workers resumably; SIGINT (Ctrl-C
reaches the multirun too) is passed on only if the multirun still runs 5 s later. The driver exits (128 +
the signal's number) once the multirun has, and starts no further stage: rerun the same command to
resume (`runners.launch.jobs.Relay`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from analysis.map.runs import choose, summarise
from runners.config import ConfigError
from runners.launch import jobs
from runners.map import MapSpec, evaluation_jobs, load_map, tuning_jobs, write_jobs, write_spec

STAGES = ("tune", "evaluate")


def launch(spec: MapSpec, names: Sequence[str], root: Path, relay: jobs.Relay) -> int:
    """One multirun of the runner over the jobs written under `root`, run by `relay`; its exit code."""
    if not names:
        return 0
    forward = spec.forward
    launcher = [] if any(o.startswith("hydra/launcher=") for o in forward) else ["hydra/launcher=joblib"]
    command = [
        sys.executable,
        "-m",
        "runners.run",
        "-m",
        f"experiment={spec.experiment}",
        f"hydra.searchpath=[file://{root.resolve()}]",
        "hydra.sweeper.params=null",
        f"+map_job={','.join(names)}",
        *launcher,
        *forward,
    ]
    code = relay.run(command)
    return 128 - code if code < 0 else code  # ended by a signal: the shell's 128 + its number


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m runners.map", description=__doc__.splitlines()[0])
    parser.add_argument("--map", default="robustness_map", help="a declaration in conf/map/ or a path")
    parser.add_argument("--stage", choices=("all", *STAGES), default="all", help="run one stage only")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides (see the module docstring)")
    args = parser.parse_args(argv)
    try:
        with jobs.Relay() as relay:
            return _run(args, relay)
    except jobs.Stopped as stop:
        print(f"map: {jobs.stopped_line(stop.signum)}", file=sys.stderr, flush=True)
        return 128 + stop.signum


def _run(args: argparse.Namespace, relay: jobs.Relay) -> int:
    try:
        spec = load_map(args.map, args.overrides)
    except ConfigError as exc:
        print(f"map: {exc}", file=sys.stderr)
        return 2
    out = Path(spec.results_dir)
    write_spec(spec, out / "map.json")
    if args.stage in ("all", "tune"):
        root = out / "jobs" / "tune"
        code = launch(spec, write_jobs(tuning_jobs(spec), root), root, relay)
        if code:
            return code
    if args.stage == "tune":
        return 0
    try:
        chosen = choose(summarise(out / "runs", spec.to_json()), spec.to_json()) if spec.tune else {}
    except ValueError as exc:
        print(f"map: {exc} (run the tuning stage first)", file=sys.stderr)
        return 2
    write_spec(spec, out / "map.json", chosen)
    root = out / "jobs" / "evaluate"
    return launch(spec, write_jobs(evaluation_jobs(spec, chosen), root), root, relay)


if __name__ == "__main__":
    sys.exit(main())
