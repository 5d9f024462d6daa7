"""Fixtures shared by the test modules (pytest finds them here; helpers are in tests/helpers/).

- `compose("memory=lww", ...)`: the validated RunSpec those overrides compose to (`runners.compose`).
- `tiny_run("experiment=paper_controlled", "memory=lww", ...)`: runs that config tiny (`max_episodes`,
  one seed) through the runner into `tmp_path`, returning the results folder.
- `generated_mab_data`: a generated MemoryAgentBench data folder (the real one's layout, invented facts); the
  tests of the real data call `tests.helpers.shared_data.require_data()`, which skips them without it.
- `stub_server`: a scripted loopback OpenAI-compatible endpoint; `llm_server` / `gemma_server`: real
  local models (the `llm` tests; skipped without the local-llm extra).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from runners.compose import compose_spec
from runners.config import RunSpec
from runners.llm.local.serve import LocalLLMUnavailable, local_llm_server, require_local_llm
from tests.helpers.mab_fixture import write_mab_data
from tests.helpers.runner import run_overrides
from tests.helpers.shared_data import DATA_DIR
from tests.helpers.stub_server import StubServer

# The loaders go online (the Hugging Face Hub, GitHub) when TEPA_DATA_DIR is unset or empty (as `make`
# exports it): the tests never do. They read DATA_DIR, which is missing on a fresh clone (the loaders then
# raise DataNotFoundError and the runner reports MemoryAgentBench as unavailable, offline). The tests of
# the download path unset it themselves and serve the files from a loopback stub.
if not os.environ.get("TEPA_DATA_DIR"):
    os.environ["TEPA_DATA_DIR"] = str(DATA_DIR)

TINY_EPISODES = 8  # episodes per stream in a tiny run: every environment reaches a decision by then


@pytest.fixture
def compose() -> Callable[..., RunSpec]:
    """`compose(*overrides)`: the validated RunSpec of `python -m runners.run OVERRIDES`."""

    def spec(*overrides: str) -> RunSpec:
        return compose_spec(overrides)

    return spec


@pytest.fixture
def tiny_run(tmp_path: Path) -> Callable[..., Path]:
    """`tiny_run(*overrides, episodes=TINY_EPISODES)`: run the config of `overrides` with seed 0 only and
    every stream stopped after `episodes` episodes, into `tmp_path / "results"`; returns that folder."""

    def run(*overrides: str, episodes: int = TINY_EPISODES) -> Path:
        results = tmp_path / "results"
        run_overrides(
            *overrides, f"results_dir={results}", f"max_episodes={episodes}", "seeds=[0]", "progress=false"
        )
        return results

    return run


@pytest.fixture
def generated_mab_data(tmp_path: Path) -> Path:
    """A generated MemoryAgentBench data folder in `tmp_path` (tests/helpers/mab_fixture.py): the real
    layout with invented facts, for the tests that must run without the real data."""
    return write_mab_data(tmp_path / "mab-data")


@pytest.fixture
def stub_server() -> Iterator[StubServer]:
    server = StubServer().start()
    yield server
    server.stop()


def _serve(model: str, n_ctx: int, completions_only: bool = False) -> Iterator[str]:
    try:
        require_local_llm(model)
    except LocalLLMUnavailable as exc:
        pytest.skip(f"local-llm extra not installed ({exc})")
    with local_llm_server(n_ctx=n_ctx, model=model, completions_only=completions_only) as base_url:
        yield base_url


@pytest.fixture(scope="session")
def llm_server() -> Iterator[str]:
    """The base_url of a real SmolLM2 llama.cpp server, started once per test session."""
    yield from _serve("smollm2", 4096)


@pytest.fixture(scope="session")
def smollm2_completions_server() -> Iterator[str]:
    """SmolLM2 behind `runners.llm.local.llama_server`, as `make reproduce-llm` serves it; one per session."""
    yield from _serve("smollm2", 2048, completions_only=True)


@pytest.fixture(scope="session")
def gemma_server() -> Iterator[str]:
    """The base_url of a real Gemma 3 270M server (`runners.llm.local.llama_server`), one per session."""
    yield from _serve("gemma3", 2048)
