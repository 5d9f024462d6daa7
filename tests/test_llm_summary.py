"""The generated results block of results/llm/README.md (runners.llm.summary), on runs of the real-model
experiment with the simulated reader, analysed as `make reproduce-llm` analyses a model's runs."""

from __future__ import annotations

import json

import pytest

from analysis.__main__ import main as analyse
from runners.llm import summary
from runners.llm.targets import main as targets
from tests.helpers.runner import run_overrides

METHODS = ("no_memory", "append_only", "lww", "tepa_rev")


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory):
    """A model's folder as `make reproduce-llm` leaves it: runs, the analysis' report and the targets."""
    root = tmp_path_factory.mktemp("llm")
    folder = root / "tiny"
    for memory in METHODS:
        run_overrides(
            "experiment=llm_drift", "llm=simulated", f"memory={memory}", "env.phase_length=8", "seeds=[0,1]",
            f"results_dir={folder}", "progress=false",
        )  # fmt: skip
    assert analyse(["--runs", str(folder / "runs"), "--out", str(folder), "--quiet"]) == 0
    assert targets(["--runs", str(folder / "runs"), "--out", str(folder)]) == 0
    return folder


def test_the_block_holds_each_models_tables_and_run_size_and_leaves_the_prose_alone(model_folder):
    readme = model_folder.parent / "README.md"
    readme.write_text(f"# Prose\n\nbefore\n\n{summary.BEGIN}\nold numbers\n{summary.END}\n\nafter\n")
    assert summary.main(["--readme", str(readme), "tiny=Tiny Model"]) == 0
    text = readme.read_text()
    assert text.startswith("# Prose\n\nbefore\n\n") and text.endswith("\n\nafter\n")
    assert "old numbers" not in text and "### Tiny Model" in text
    success = (model_folder / "tables" / "success_llm_drift.md").read_text()
    assert success.splitlines()[2] in text  # the table as the analysis wrote it, not a copy by hand
    memory_rows = (model_folder / "tables" / "memory_llm_drift.md").read_text().splitlines()
    assert any("| overall |" in row for row in memory_rows)
    assert all(
        row in text for row in memory_rows if row.startswith("| controlled") and "| overall |" not in row
    )
    assert not any("| overall |" in row for row in text.split("Reader-free")[1].splitlines())
    assert "| 2: below 0, CI excluding 0 |" in text
    decisions = len(METHODS) * 2 * 3 * 8  # methods x seeds x phases x episodes
    assert f"{len(METHODS) * 2} streams (seeds 0-1), {decisions:,} decisions, 0 requests" in text
    assert summary.main(["--readme", str(readme), "tiny=Tiny Model"]) == 0
    assert readme.read_text() == text  # idempotent: the block is replaced, not appended


def test_the_run_size_takes_each_methods_last_counts_and_sums_them_over_methods(tmp_path):
    # lww's two seeds share one backend: the second to end carries the counts of both
    rows = [("lww", 3, 100, 80, 40), ("lww", 5, 150, 120, 60), ("tepa_rev", 2, 50, 50, 10)]
    for seed, (memory, calls, sent, counted, cached) in enumerate(rows):
        d = tmp_path / f"seed={seed}"
        d.mkdir()
        stats = {"calls": calls, "requests": 2 * calls, "prompt_tokens": sent,
                 "server_counted_prompt_tokens": counted, "server_cached_tokens": cached}  # fmt: skip
        meta = {"complete": True, "memory": memory, "seed": seed, "n_episodes": 10, "backend_stats": stats,
                "files": {},
                "started_at": f"2026-12-01T10:0{seed}:00+00:00",
                "finished_at": f"2026-12-01T10:1{seed}:00+00:00"}  # fmt: skip
        (d / "meta.json").write_text(json.dumps(meta))
        (d / "episodes.parquet").write_bytes(b"")
        (d / "archive.jsonl").write_bytes(b"")
    size = summary.run_size(tmp_path)
    assert size["decisions"] == 30 and size["requests"] == 14 and size["prompt_tokens"] == 200
    assert size["evaluated_share"] == pytest.approx(1 - 70 / 170) and size["minutes"] == pytest.approx(12)


def test_the_run_size_adds_the_counts_of_invocations_that_ran_a_methods_seeds_one_after_another(tmp_path):
    # lww's seeds 0-1 ran in one invocation, seeds 2-3 in the next: its backend counted from 0 again
    rows = [("lww", 3), ("lww", 5), ("lww", 2), ("lww", 4), ("tepa_rev", 6)]
    for seed, (memory, calls) in enumerate(rows):
        d = tmp_path / f"seed={seed}"
        d.mkdir()
        stats = {"calls": calls, "requests": 2 * calls, "prompt_tokens": 10 * calls}
        meta = {"complete": True, "memory": memory, "seed": seed, "n_episodes": 10, "backend_stats": stats,
                "files": {},
                "started_at": f"2026-12-01T10:0{seed}:00+00:00",
                "finished_at": f"2026-12-01T10:1{seed}:00+00:00"}  # fmt: skip
        (d / "meta.json").write_text(json.dumps(meta))
        (d / "episodes.parquet").write_bytes(b"")
        (d / "archive.jsonl").write_bytes(b"")
    size = summary.run_size(tmp_path)
    assert size["requests"] == 2 * (5 + 4 + 6) and size["prompt_tokens"] == 10 * (5 + 4 + 6)


@pytest.mark.parametrize(
    ("seeds", "shown"), [([3, 0, 1, 2, 1], "0-3"), ([0, 1, 2, 7, 12, 13], "0-2, 7, 12-13"), ([5], "5")]
)
def test_the_seeds_are_named_as_runs_of_consecutive_seeds(seeds, shown):
    assert summary.seed_ranges(seeds) == shown


@pytest.mark.parametrize("text", ["no markers", f"{summary.END}\n{summary.BEGIN}\n"])
def test_a_readme_without_one_block_is_refused_in_one_line_and_left_as_it_was(tmp_path, capsys, text):
    readme = tmp_path / "README.md"
    readme.write_text(text)
    assert summary.main(["--readme", str(readme), "tiny=Tiny"]) == 2
    assert "needs one" in capsys.readouterr().err and readme.read_text() == text


def test_a_model_argument_without_a_label_names_itself(capsys):
    with pytest.raises(SystemExit):
        summary.main(["--readme", "x.md", "gemma3"])
    assert "'gemma3': expected FOLDER=Label" in capsys.readouterr().err
