"""The wall time of `make test`: the suite as the Makefile runs it (no real model, two workers)."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from runners.bench.clock import children_cpu

#: pytest-xdist workers, as `make test` runs the suite: one per core of the 2-core target machine.
WORKERS = 2
#: The budget of `make test` on a quiet 2-core machine, in seconds.
TEST_BUDGET_S = 300
_SUMMARY = re.compile(r"^=*\s*(\d+ (?:passed|failed|error).*?) in [\d.]+s", re.MULTILINE)


def command(workers: int = WORKERS, paths: tuple[str, ...] = ()) -> list[str]:
    """`make test`'s pytest command with this interpreter (`paths`: a part of the suite, for a test)."""
    flags = ["-m", "not llm", "-n", str(workers), "-p", "no:cacheprovider"]
    return [sys.executable, "-m", "pytest", *flags, *paths]


def time_tests(root: Path, workers: int = WORKERS, paths: tuple[str, ...] = ()) -> dict[str, Any]:
    """Run the suite in `root` once and report its wall and CPU seconds (this process' children: the
    pytest process and its workers), its exit code and pytest's summary line ("1526 passed, ...")."""
    start, cpu = time.perf_counter(), children_cpu()
    done = subprocess.run(command(workers, paths), cwd=root, capture_output=True, text=True)
    wall = round(time.perf_counter() - start, 1)
    found = _SUMMARY.findall(done.stdout)
    return {
        "workers": workers,
        "wall_s": wall,
        "cpu_s": round(children_cpu() - cpu, 1),
        "exit_code": done.returncode,
        "summary": found[-1] if found else " ".join((done.stdout or done.stderr).strip().splitlines()[-1:]),
    }
