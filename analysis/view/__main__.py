"""`python -m analysis.view RUNS_OR_RUN_DIR --out view.html`: one HTML file to read runs' transcripts."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from analysis.data.validate import unwritable
from analysis.streamlog.atomic import SHARED, atomic_write_bytes, refuse_special
from analysis.view.page import render

#: The default size limit of the page: one paper experiment (200 streams of 1600 episodes) fits in it.
DEFAULT_MAX_MB = 20.0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m analysis.view", description=__doc__)
    parser.add_argument("root", type=Path, metavar="RUNS_OR_RUN_DIR", help="a runs folder, or one stream's")
    parser.add_argument("--out", type=Path, default=Path("view.html"), help="the HTML file to write")
    parser.add_argument(
        "--max-mb",
        type=float,
        default=DEFAULT_MAX_MB,
        help=f"size limit of the file in MB (default {DEFAULT_MAX_MB:g}); long streams are sampled to fit",
    )
    return parser.parse_args(argv)


def write(root: Path, out: Path, max_mb: float) -> str:
    """Write the page of the streams under `root` to `out` (atomically); returns a one-line summary."""
    if not (math.isfinite(max_mb) and max_mb > 0):
        raise ValueError(f"--max-mb {max_mb}: must be a finite number > 0")
    refuse_special(out, "--out")
    problem = unwritable(out.parent)
    if problem:
        raise ValueError(f"--out {out}: {out.parent} is {problem}")
    page, shown, skipped = render(root, f"Runs under {root}", int(max_mb * 1e6))
    html = page.encode("ascii")
    refuse_special(out, "--out")  # again: it may have appeared while the page was rendered
    try:
        atomic_write_bytes(out, html, mode=SHARED)  # a page to open and share, not a private file
    except OSError as exc:
        raise ValueError(f"--out {out}: cannot write ({exc.strerror or exc})") from None
    return f"wrote {out}: {shown} stream(s), {skipped} not shown, {len(html) / 1e6:.2f} MB"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        print(write(args.root, args.out, args.max_mb))
    except ValueError as error:
        print(f"analysis.view: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
