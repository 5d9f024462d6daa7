"""Where the tests find the MemoryAgentBench and MQuAKE data: TEPA_DATA_DIR, else `shared/data` beside
the project (never inside it). The data is not part of the project: a test that needs it calls
`require_data()`, which skips it (with the reason) when the folder is absent or incomplete, so that
`make test` passes on a fresh clone with no data and no network (`make test-nodata` checks that). The
loader, parser, environment and metric are also covered on generated data (`tests/helpers/mab_fixture.py`).
"""

import os
from pathlib import Path

import pytest

DATA_DIR = Path(os.environ.get("TEPA_DATA_DIR") or Path(__file__).resolve().parents[3] / "shared" / "data")
#: The files a test of the real data reads (relative to DATA_DIR).
DATA_FILES = (
    Path("memoryagentbench") / "Conflict_Resolution.json",
    Path("mquake") / "cloze_templates.json",
    Path("mquake") / "question_templates.json",
)


def missing_data() -> str | None:
    """Why the real data cannot be used (the first missing file), or None when it is all there."""
    missing = next((name for name in DATA_FILES if not (DATA_DIR / name).is_file()), None)
    if missing is None:
        return None
    return f"no MemoryAgentBench data: {DATA_DIR / missing} is missing (set TEPA_DATA_DIR to the data folder)"


def require_data() -> Path:
    """DATA_DIR, or skip the calling test (with the reason) when it lacks the MemoryAgentBench data."""
    reason = missing_data()
    if reason:
        pytest.skip(reason)
    return DATA_DIR
