"""`python -m analysis.inspect RUN_DIR --t 412 [--key K] [--timeline]`: why did the agent fail at t?

For one stream (a `results/runs/<experiment>/<env>/<memory>/seed=<n>/` directory) it prints the exact
prompt the model saw at episode t, its reply, the outcome, and every precedent of the key (the
episode's, or `--key`) with its state, counts and lifecycle history up to t. `--timeline` draws that
key's precedents over the whole stream, coloured by state, with phase boundaries, re-promotions and t
marked (`--out`, default timeline.png).

The prompt and the memory at t are rebuilt by replaying the logged stream through the harness
(`runners.agent.replay`: the logged replies are fed back, no model is called); the harness is imported only
for that, so the timeline, like the rest of `analysis`, reads logs alone.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from analysis.report.figures import save_figure
from analysis.report.timeline import busiest_key, draw_timeline, legend_handles, read_lifecycle, read_phases


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m analysis.inspect", description=__doc__.split("\n")[0])
    parser.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="one stream's log directory")
    parser.add_argument("--t", type=int, default=None, help="the episode (stream step) to inspect")
    parser.add_argument("--key", default=None, help="whose precedents to show (default: episode t's key)")
    parser.add_argument("--timeline", action="store_true", help="draw the key's precedents over time")
    parser.add_argument("--out", type=Path, default=Path("timeline.png"), help="where --timeline writes")
    args = parser.parse_args(argv)
    if args.t is None and not args.timeline:
        parser.error("give --t STEP (the episode to inspect), --timeline, or both")
    if not (args.run_dir / "episodes.parquet").is_file():
        parser.error(f"RUN_DIR {args.run_dir}: no episodes.parquet (not a stream's log directory)")
    return args


def describe(decision: Any, t: int) -> str:
    """The report of one replayed decision (`runners.agent.replay.Decision`) as text."""
    r = decision.record
    lines = [
        f"Episode t={t} of {r['experiment']} / {r['env']} / {r['memory']} / seed {r['seed']}: "
        f"phase {r['phase']}, key {r['key']}",
    ]
    for i, messages in enumerate(decision.prompts):
        hop = f" (hop {i + 1})" if len(decision.prompts) > 1 else ""
        for message in messages:
            lines += [f"--- prompt{hop}: {message['role']} ---", message["content"]]
    lines += ["--- reply ---", r["reply"] + (f"  [error: {r['error']}]" if r.get("error") else "")]
    verdict = "success" if r["success"] else "FAILURE"
    parsed = "" if r["parse_ok"] else " (the reply named no option)"
    lines += ["--- outcome ---", f"{verdict}: action {r['action']!r}{parsed}; correct {r['correct']!r}"]
    lines.append(f"--- precedents of key {decision.key} at t={t} ---")
    if decision.precedents is None:
        lines.append(f"{r['memory']} keeps no precedents; what it retrieved is the memory in the prompt.")
    elif not decision.precedents:
        lines.append("none yet")
    for p in decision.precedents or []:
        lines.append(
            f"#{p['id']} {p['value']!r}: {p['state']}, support {p['s']}, conflicts {p['f']} "
            f"(epoch {p['epoch']}: {p['s_epoch']} / {p['f_epoch']}), recent uses {p['recent']}"
        )
        lines += [f"    t={e['t']} {e['event']}: {e['reason']}" for e in p["history"]]
    return "\n".join(lines)


def timeline(run_dir: Path, key: str | None, t: int | None, out: Path) -> Path:
    """Draw `key`'s precedents over the stream (default: the busiest key) into `out`."""
    events = read_lifecycle(run_dir)
    key = key if key is not None else busiest_key(events)
    if key is None:
        raise ValueError(f"{run_dir}: no lifecycle events (this method keeps no precedents)")
    phases, end = read_phases(run_dir)
    figure = Figure(figsize=(10, 3.2), layout="constrained")
    ax = figure.add_subplot()
    if not draw_timeline(ax, events, key, phases, end):
        raise ValueError(f"--key {key}: no precedents of this key in {run_dir}")
    if t is not None:
        ax.axvline(t, color="#1f77b4", lw=1.2, ls="--")
    ax.set_xlabel("episode t (stream position)")
    figure.suptitle(f"{run_dir}: precedents of key {key} over time, by state", fontsize=10)
    figure.legend(handles=legend_handles(), loc="outside right upper", frameon=False, fontsize=9)
    out.parent.mkdir(parents=True, exist_ok=True)
    save_figure(figure, out)
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        if args.t is not None:
            from runners.agent.replay import replay_decision  # the harness, for the exact prompt only

            decision = replay_decision(args.run_dir, args.t, args.key)
            print(describe(decision, args.t))
        if args.timeline:
            key = args.key if args.key is not None or args.t is None else decision.key
            print(f"wrote {timeline(args.run_dir, key, args.t, args.out)}")
    except ValueError as error:
        print(f"analysis.inspect: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
