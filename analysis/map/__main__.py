"""`python -m analysis.map --out results/map [--hypothesis DIR]`: the robustness map's tables, figures and
README.md from its runs (`<out>/runs`) and description (`<out>/map.json`, written by `python -m
runners.map`); the noise hypothesis from another map's folder when given (the paper's phase lengths).

A problem with the inputs (no map.json, a run that fails its checksums, a tuning stage that is not
complete) stops it with one line naming the file (exit code 2) before anything is written.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from analysis.map.runs import read_map, summarise
from analysis.report.map import analyse_map, figures, readme, summary, tables, with_hypothesis
from analysis.report.tables import write_tables

SUMMARY = "summary.md"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis.map", description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="results/map", help="the map's results folder")
    parser.add_argument(
        "--hypothesis",
        default=None,
        help="the results folder of a map that answers the noise hypothesis at the paper's phase lengths "
        "(default: the map's own cells)",
    )
    args = parser.parse_args(argv)
    out = Path(args.out)
    try:
        spec = read_map(out / "map.json")
        result = analyse_map(summarise(out / "runs", spec), spec)
        if args.hypothesis:
            other = Path(args.hypothesis)
            other_spec = read_map(other / "map.json")
            result = with_hypothesis(result, analyse_map(summarise(other / "runs", other_spec), other_spec))
    except ValueError as exc:
        print(f"analysis.map: {exc}", file=sys.stderr)
        return 2
    write_tables(tables(result), out / "tables")
    drawn = figures(result)
    (out / "figures").mkdir(parents=True, exist_ok=True)
    for name, png in drawn.items():
        (out / "figures" / name).write_bytes(png)
    (out / "README.md").write_text(readme(result, list(drawn)), encoding="utf-8")
    (out / SUMMARY).write_text("\n".join(summary(result)) + "\n", encoding="utf-8")
    print(f"analysis.map: wrote {out / 'README.md'}, {len(drawn)} figures, tables in {out / 'tables'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
