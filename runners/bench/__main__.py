"""`python -m runners.bench --out results/bench.json`."""

import argparse
import sys
from pathlib import Path

from analysis.streamlog.atomic import refuse_special
from runners.bench.suite import main


def refuse_special_outputs(argv: list[str]) -> str | None:
    """One line when `--out` or `--markdown` names an existing path that is not a regular file (a
    folder, a device, a FIFO), which the bench would otherwise write into or replace; else None."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--out")
    parser.add_argument("--markdown")
    parser.add_argument("--only")
    named, _ = parser.parse_known_args(argv)
    out = named.out or (None if named.only else "results/bench.json")
    markdown = named.markdown or (str(Path(out).with_name("bench.md")) if out else None)
    for option, value in (("--out", out), ("--markdown", markdown)):
        if value is not None:
            try:
                refuse_special(Path(value), option)
            except ValueError as error:
                return f"runners.bench: {error}"
    return None


if __name__ == "__main__":
    problem = refuse_special_outputs(sys.argv[1:])
    if problem:
        print(problem, file=sys.stderr)
        raise SystemExit(2)
    raise SystemExit(main())
