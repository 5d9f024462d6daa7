"""Loading the local embedding model writes nothing under the home folder (ONNX Runtime's telemetry
would leave a device id and an event database in ~/.cache/Microsoft/DeveloperTools/.onnxruntime/)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tepa.retrieval import local

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(
    bool(local.missing_packages()), reason="the local embedding model's packages are not installed"
)

_EMBED = "from tepa.retrieval.local import LocalEmbedder; print(LocalEmbedder()(['a memory text']).shape)"


def test_loading_the_local_model_and_embedding_a_text_leaves_an_empty_home_folder_empty(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("XDG_CACHE_HOME", "ORT_DISABLE_TELEMETRY")}
    env.update(HOME=str(home), PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, "-c", _EMBED], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert "(1, 384)" in done.stdout
    assert sorted(str(p.relative_to(home)) for p in home.rglob("*")) == []
