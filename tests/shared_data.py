"""Where the tests find the MemoryAgentBench and MQuAKE data: TEPA_DATA_DIR, else `shared/data` beside
the project (never inside it)."""

import os
from pathlib import Path

DATA_DIR = Path(os.environ.get("TEPA_DATA_DIR") or Path(__file__).resolve().parents[2] / "shared" / "data")
