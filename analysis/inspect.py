"""`python -m analysis.inspect RUN_DIR --t 412 [--key K] [--timeline]`: why did the agent fail at t?

For one stream (a `results/runs/<experiment>/<env>/<memory>/seed=<n>/` directory) it prints the prompt
the model saw at episode t, its reply, the outcome, and every precedent of the key (the episode's, or
`--key`) with its state, counts and lifecycle history up to t. `--timeline` draws that key's precedents
over the whole stream, coloured by state, with phase boundaries, re-promotions and t marked (`--out`,
default `RUN_DIR/timeline_key=<key>.png`).

The stream's files are verified against meta.json's checksums first. What the model saw comes from the
log (`prompt`, with `log_prompts=true`; else the memory lines and options of `evidence` / `options`).
The inspector reads logs only: for a run that logged neither it names the harness command that rebuilds
the prompt by replaying the stream (`python -m runners.agent.replay RUN_DIR --t T`). Precedents come from
`archive.jsonl`, for any memory that logs lifecycle events (`analysis.streamlog.events`). Everything
shown from a log or a reply goes through `visible`: terminal control characters are printed escaped,
never sent to the terminal.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import string
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from matplotlib.figure import Figure

from analysis.data.load import read_events
from analysis.data.validate import check_episodes, unwritable
from analysis.report.figures import save_figure
from analysis.report.timeline import busiest_key, draw_timeline, legend_handles, read_lifecycle, read_phases
from analysis.streamlog.atomic import refuse_special
from analysis.streamlog.stream import ARCHIVE, EPISODES, read_meta, verify

# C0 and C1 controls but newline and tab, DEL, the Unicode line separators and the bidirectional overrides.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_FILE_CHARS = re.compile(r"[^A-Za-z0-9_.=+-]+")
_LETTERS = string.ascii_uppercase


class InspectError(ValueError):
    """A stream the inspector cannot read as asked; one line naming the file or option."""


def visible(text: object) -> str:
    """`text` safe to print: control characters shown as escapes (ESC as `\\x1b`), lines kept."""
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), str(text))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m analysis.inspect", description=__doc__.split("\n")[0])
    parser.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="one stream's log directory")
    parser.add_argument("--t", type=int, default=None, help="the episode (stream step) to inspect")
    parser.add_argument("--key", default=None, help="whose precedents to show (default: episode t's key)")
    parser.add_argument("--timeline", action="store_true", help="draw the key's precedents over time")
    parser.add_argument(
        "--out", type=Path, default=None, help="where --timeline writes (default: RUN_DIR/timeline_key=K.png)"
    )
    args = parser.parse_args(argv)
    if args.t is None and not args.timeline:
        parser.error("give --t STEP (the episode to inspect), --timeline, or both")
    if not (args.run_dir / EPISODES).is_file():
        parser.error(f"RUN_DIR {visible(args.run_dir)}: no {EPISODES} (not a stream's log directory)")
    return args


# --- reading ---------------------------------------------------------------------------------------


def read_stream(run_dir: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """meta.json and the episode records of a stream whose files verify against meta.json."""
    meta = read_meta(run_dir)
    if meta is None:
        raise InspectError(f"{run_dir / 'meta.json'}: missing or unreadable (not a complete stream)")
    problem = verify(run_dir, meta)
    if problem:
        raise InspectError(f"{problem}; rerun the experiment to redo the stream")
    try:
        table = pq.read_table(run_dir / EPISODES)
    except (OSError, pa.ArrowException) as exc:
        raise InspectError(f"{run_dir / EPISODES}: unreadable ({exc})") from None
    try:
        check_episodes(table, run_dir / EPISODES)  # as the analysis does: types, steps in range
    except ValueError as exc:
        raise InspectError(str(exc)) from None
    return meta, table.to_pylist()


def record_at(records: list[dict[str, Any]], t: int, run_dir: Path) -> dict[str, Any]:
    found = next((r for r in records if r["t"] == t), None)
    if found is None:
        steps = f"{records[0]['t']}..{records[-1]['t']}" if records else "none"
        raise InspectError(f"--t {t}: no episode at this step in {run_dir} (steps {steps})")
    return found


def _logged(record: dict[str, Any], column: str) -> Any:
    """A sample column's JSON value; None when the run did not log it (an older log, or "")."""
    raw = record.get(column)
    if not isinstance(raw, str) or not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        raise InspectError(f"{EPISODES}: column {column!r} at t={record['t']} is not JSON") from None


# --- the report ------------------------------------------------------------------------------------


def describe(
    record: dict[str, Any],
    seen: list[str],
    events: Any,
    key: str,
    t: int,
) -> str:
    """The report of episode t: header, what the model saw (`seen`: lines already made), the reply, the
    outcome and the precedents of `key` up to t from the lifecycle `events`."""
    r = record
    lines = [
        visible(
            f"Episode t={t} of {r['experiment']} / {r['env']} / {r['memory']} / seed {r['seed']}: "
            f"phase {r['phase']}, key {r['key']}"
        ),
        *seen,
        "--- reply ---",
        visible(r["reply"] + (f"  [error: {r['error']}]" if r.get("error") else "")),
    ]
    verdict = "success" if r["success"] else "FAILURE"
    parsed = "" if r["parse_ok"] else " (the reply named no option)"
    lines += [
        "--- outcome ---",
        visible(f"{verdict}: action {r['action']!r}{parsed}; correct {r['correct']!r}"),
    ]
    lines.append(visible(f"--- precedents of key {key} up to t={t} (from {ARCHIVE}) ---"))
    lines += precedent_lines(events, key, t, r["memory"])
    return "\n".join(lines)


def prompt_lines(prompts: Sequence[Sequence[dict[str, str]]], source: str = "logged") -> list[str]:
    """The chat messages of every hop, as sent; `source` says where they come from (the log, or a
    replay of the stream)."""
    lines: list[str] = []
    for i, messages in enumerate(prompts):
        hop = f" (hop {i + 1})" if len(prompts) > 1 else ""
        for message in messages:
            lines += [
                visible(f"--- prompt{hop}: {message['role']} ({source}) ---"),
                visible(message["content"]),
            ]
    return lines


def logged_memory_lines(record: dict[str, Any]) -> list[str] | None:
    """The memory lines and options the prompt showed, from `evidence` / `options` (None when the run
    logged neither); the full prompt was not logged."""
    evidence, options = _logged(record, "evidence"), _logged(record, "options")
    if evidence is None and options is None:
        return None
    truth = _logged(record, "truth")
    lines = ["--- memory in the prompt (logged; the full prompt was not: log_prompts=true logs it) ---"]
    try:
        for i, hop in enumerate(evidence or []):
            if len(evidence) > 1:
                lines.append(f"hop {i + 1}:")
            for step, verdict, value, support, conflict in hop:
                counts = "" if support is None else f" (support {support}, conflicts {conflict})"
                lines.append(visible(f"- [step {step}] {verdict} {json.dumps(value)}{counts}"))
            if not hop:
                lines.append("(empty)")
            if isinstance(truth, list) and i < len(truth) and truth[i] is not None:
                lines.append(visible(f"  the world's value now: {json.dumps(truth[i])}"))
        if options:
            lines.append(
                "options: " + visible(", ".join(f"{_LETTERS[i]}) {o}" for i, o in enumerate(options)))
            )
    except (TypeError, ValueError, IndexError):
        raise InspectError(
            f"{EPISODES}: column 'evidence' or 'options' at t={record['t']} is malformed"
        ) from None
    return lines


def replay_hint(run_dir: Path, t: int) -> list[str]:
    """What to run to see the prompt of a run that logged no samples: the harness rebuilds it."""
    command = f"python -m runners.agent.replay {shlex.quote(str(run_dir))} --t {t}"
    return ["--- prompt: not logged ---", visible(f"(this run logged no samples; `{command}` rebuilds it)")]


def precedent_lines(events: Any, key: str, t: int, memory: str) -> list[str]:
    """Each precedent of `key` with an event up to t: its state before t (and its counts at its last
    event: events are logged when the lifecycle moves, not at every count), then its history (events at
    t itself are this episode's: its observations and its outcome)."""
    if events.empty:
        return [
            visible(f"{memory} logged no lifecycle events; what it retrieved is the memory in the prompt.")
        ]
    mine = events[(events["key"] == key) & (events["t"] <= t)]
    if mine.empty:
        return ["none yet"]
    lines = []
    for pid, history in mine.groupby("id", sort=False):
        before = history[history["t"] < t]
        if before.empty:
            head = "new in this episode"
        else:
            last = before.iloc[-1]
            counts = f"support {_count(last['s'])}, conflicts {_count(last['f'])}"
            head = f"{last['state']} before t (since t={last['t']}, when it had {counts})"
        lines.append(visible(f"#{pid} {history['value'].iloc[0]!r}: {head}"))
        for row in history.itertuples():
            now = "  (this episode)" if row.t == t else ""
            lines.append(visible(f"    t={row.t} {row.event}: {row.reason} -> {row.state}{now}"))
    return lines


def _count(value: Any) -> str:
    """A logged count as an int (a column with gaps reads as floats); "?" when missing."""
    return "?" if value is None or value != value else str(int(value))


# --- the timeline ----------------------------------------------------------------------------------


def timeline_title(meta: dict[str, Any], key: str) -> str:
    """The stream's labels and the key (not its directory: an absolute path says little and runs long)."""
    labels = " / ".join(str(meta.get(name)) for name in ("experiment", "env", "memory"))
    return visible(f"{labels} / seed {meta.get('seed')}: precedents of key {key}, by state")


def timeline(
    run_dir: Path, meta: dict[str, Any], events: Any, key: str | None, t: int | None, out: Path | None
) -> Path:
    """Draw `key`'s precedents over the stream (default: the busiest key) into `out` (default: beside
    the logs, named by the key)."""
    key = key if key is not None else busiest_key(events)
    if key is None:
        raise InspectError(f"{run_dir}: no lifecycle events in {ARCHIVE} (this method logs none)")
    out = out if out is not None else run_dir / f"timeline_key={_FILE_CHARS.sub('_', key)[:60]}.png"
    try:
        refuse_special(out, "--out")
    except ValueError as error:
        raise InspectError(str(error)) from None
    problem = unwritable(out.parent)
    if problem:
        raise InspectError(f"--out {out}: {problem}")
    phases, end = read_phases(run_dir)
    figure = Figure(figsize=(10, 3.6), layout="constrained")
    ax = figure.add_subplot()
    if not draw_timeline(ax, events, key, phases, end):
        raise InspectError(visible(f"--key {key}: no precedents of this key in {run_dir}"))
    if t is not None:
        ax.axvline(t, color="#1f77b4", lw=1.2, ls="--")
    ax.set_xlabel("episode t (stream position)")
    figure.suptitle(timeline_title(meta, key), fontsize=10)
    figure.legend(handles=legend_handles(), loc="outside lower center", ncols=4, frameon=False, fontsize=9)
    try:
        save_figure(figure, out)
    except OSError as exc:
        raise InspectError(f"--out {out}: cannot write ({exc.strerror or exc})") from None
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        meta, records = read_stream(args.run_dir)
        try:
            read_events(args.run_dir)  # as the analysis checks it: JSON objects, `t` and `id` in range
        except ValueError as exc:
            raise InspectError(str(exc)) from None
        try:
            events = read_lifecycle(args.run_dir)
        except RecursionError:
            raise InspectError(f"{args.run_dir / ARCHIVE}: unreadable (JSON nested too deep)") from None
        except ValueError as exc:
            raise InspectError(f"{args.run_dir / ARCHIVE}: unreadable ({exc})") from None
        key = args.key
        if args.t is not None:
            record = record_at(records, args.t, args.run_dir)
            key = key if key is not None else record["key"]
            prompts = _logged(record, "prompt")
            seen = prompt_lines(prompts) if prompts else logged_memory_lines(record)
            if seen is None:
                seen = replay_hint(args.run_dir, args.t)
            print(describe(record, seen, events, key, args.t))
        if args.timeline:
            print(f"wrote {visible(timeline(args.run_dir, meta, events, key, args.t, args.out))}")
    except InspectError as error:
        print(f"analysis.inspect: {visible(error)}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
