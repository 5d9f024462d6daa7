"""Where the tests find the MemoryAgentBench and MQuAKE data: TEPA_DATA_DIR, else `shared/data` beside
the project (never inside it)."""

import os
from pathlib import Path

import pytest

DATA_DIR = Path(os.environ.get("TEPA_DATA_DIR") or Path(__file__).resolve().parents[3] / "shared" / "data")


def require_data() -> Path:
    """DATA_DIR, or skip the calling test (with the reason) when it holds no MemoryAgentBench data."""
    if not (DATA_DIR / "memoryagentbench").is_dir() or not (DATA_DIR / "mquake").is_dir():
        pytest.skip(f"no MemoryAgentBench data in {DATA_DIR} (set TEPA_DATA_DIR)")
    return DATA_DIR
