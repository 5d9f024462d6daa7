"""The folder layout shows the architecture: the runner's top-level modules stay small (the rest lives in
subpackages by concern), and the log format has one home that the runner and the analysis both import."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: The most lines the top-level modules of runners/ may hold together.
RUNNERS_TOP_LEVEL_LINES = 1600
#: What the log format is: defined in analysis/data/logformat.py and nowhere else.
FORMAT = ("parquet_bytes", "jsonl_bytes", "episodes_table", "verify", "read_meta", "file_record", "dumps")


def _defined(path: Path) -> set[str]:
    return {n.name for n in ast.parse(path.read_text()).body if isinstance(n, ast.FunctionDef)}


def test_the_runners_top_level_modules_stay_within_their_line_budget():
    lines = sum(len(p.read_text().splitlines()) for p in (ROOT / "runners").glob("*.py"))
    assert lines <= RUNNERS_TOP_LEVEL_LINES, f"runners/*.py: {lines} lines; move a concern to a subpackage"


def test_the_log_format_is_defined_once_and_the_runner_imports_it():
    home = ROOT / "analysis" / "data" / "logformat.py"
    assert set(FORMAT) <= _defined(home)
    for path in [*ROOT.joinpath("runners").rglob("*.py"), *ROOT.joinpath("analysis").rglob("*.py")]:
        if path != home:
            assert not set(FORMAT) & _defined(path), f"{path.relative_to(ROOT)} defines log-format names"
    assert "from analysis.data.logformat import" in (ROOT / "runners" / "store" / "runlog.py").read_text()
