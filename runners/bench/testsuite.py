"""The wall time of `make test`: the suite as the Makefile runs it (its recipe, read by `make -n`)."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from runners.bench.clock import children_cpu

#: The budget of `make test` on a quiet 2-core machine, in seconds.
TEST_BUDGET_S = 300
_SUMMARY = re.compile(r"^=*\s*(\d+ (?:passed|failed|error).*?) in [\d.]+s", re.MULTILINE)


def command(root: Path, paths: tuple[str, ...] = ()) -> list[str]:
    """`make test`'s pytest command in `root`, with this interpreter and no cache folder (`paths`: a part
    of the suite, for a test). Read from the Makefile (`make -n`), so the bench times what users run."""
    shown = subprocess.run(["make", "-n", "-s", "test"], cwd=root, capture_output=True, text=True, check=True)
    lines = [shlex.split(line) for line in shown.stdout.splitlines() if " -m pytest" in line]
    if not lines:
        raise RuntimeError(f"make -n test in {root} shows no pytest command")
    argv = lines[-1]
    return [sys.executable, *argv[argv.index("-m") :], "-p", "no:cacheprovider", *paths]


def workers(argv: list[str]) -> int:
    """The pytest-xdist workers of a pytest command (1 without `-n`)."""
    return int(argv[argv.index("-n") + 1]) if "-n" in argv else 1


def time_tests(root: Path, paths: tuple[str, ...] = ()) -> dict[str, Any]:
    """Run the suite in `root` once and report its wall and CPU seconds (this process' children: the
    pytest process and its workers), its exit code and pytest's summary line ("1526 passed, ...")."""
    argv = command(root, paths)
    start, cpu = time.perf_counter(), children_cpu()
    done = subprocess.run(argv, cwd=root, capture_output=True, text=True)
    wall = round(time.perf_counter() - start, 1)
    found = _SUMMARY.findall(done.stdout)
    return {
        "workers": workers(argv),
        "wall_s": wall,
        "cpu_s": round(children_cpu() - cpu, 1),
        "exit_code": done.returncode,
        "summary": found[-1] if found else " ".join((done.stdout or done.stderr).strip().splitlines()[-1:]),
    }
