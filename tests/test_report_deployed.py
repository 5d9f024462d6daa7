"""The "Retrieval as deployed" section of results/README.md: built from results/deployed/'s tables."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from analysis.report.deployed import deployed_section
from analysis.report.readme import _companions

COLUMNS = ["experiment", "env", "memory", "phase", "mean", "low", "high", "n"]


def write_success(folder: Path, experiment: str, env: str, means: dict[str, float], phase: str = "overall"):
    folder.mkdir(parents=True, exist_ok=True)
    rows = [[experiment, env, m, phase, v, v - 0.01, v + 0.01, 10] for m, v in means.items()]
    pd.DataFrame(rows, columns=COLUMNS).to_csv(folder / f"success_{experiment}.csv", index=False)


def results_root(tmp_path: Path, dense_append_only: float) -> Path:
    """A results/ folder with the keyed preference table and the deployed bm25 and dense ones."""
    root = tmp_path / "results"
    env = "preference_stream"
    methods = {"no_memory": 0.84, "append_only": 0.71, "lww": 0.90, "tepa_rev": 0.887, "tepa_full": 0.889}
    write_success(root / "tables", "paper_preference", env, methods)
    write_success(
        root / "deployed" / "tables", "deployed_preference_bm25", env, {**methods, "append_only": 0.895}
    )
    dense = {**methods, "append_only": dense_append_only, "lww": 0.744, "tepa_rev": 0.596, "tepa_full": 0.5}
    write_success(root / "deployed" / "tables", "deployed_preference_dense", env, dense)
    (root / "deployed" / "README.md").write_text("# Results\n", encoding="utf-8")
    return root


def test_no_section_without_a_deployed_report(tmp_path):
    assert deployed_section(tmp_path) == []
    assert not any("Retrieval as deployed" in part for part in _companions(tmp_path))


def test_the_section_puts_each_mode_beside_keyed_retrieval_from_the_tables(tmp_path):
    root = results_root(tmp_path, dense_append_only=0.674)
    parts = deployed_section(root)
    assert parts[0].startswith("## Retrieval as deployed") and "deployed/README.md" in parts[1]
    table = parts[2]
    assert "| Setting | Method | keyed | bm25 | dense | Paper |" in table
    assert "| preference stream | No Memory | 0.840 [0.830, 0.850] |" in table
    assert (
        "| Append-Only | 0.710 [0.700, 0.720] | 0.895 [0.885, 0.905] | 0.674 [0.664, 0.684] | 0.138 |"
        in table
    )
    paragraph = parts[3]
    assert "Keyed, Append-Only scores 0.710 overall" in paragraph
    assert "bm25 moves it 0.185 away from it (0.895)" in paragraph
    assert "dense moves it 0.036 toward it (0.674)" in paragraph
    assert "still 0.536 above the paper's number (No Memory: 0.840)" in paragraph
    assert (
        "TEPA-Full 0.889 keyed, 0.889 under bm25, 0.500 under dense (below No Memory under dense)"
        in paragraph
    )
    assert "LWW 0.900 keyed, 0.900 under bm25, 0.744 under dense (below No Memory under dense)" in paragraph
    assert any(p.startswith("## Retrieval as deployed") for p in _companions(root))  # in results/README.md


def test_the_paragraph_follows_the_numbers(tmp_path):
    paragraph = deployed_section(results_root(tmp_path, dense_append_only=0.2))[3]
    assert "dense moves it 0.510 toward it (0.200)" in paragraph
    assert "The nearest it comes is 0.200, still 0.062 above" in paragraph


def test_mem0_and_the_memory_metrics_appear_when_their_tables_exist(tmp_path):
    root = results_root(tmp_path, dense_append_only=0.674)
    tables = root / "deployed" / "tables"
    frames = [
        pd.DataFrame(
            [["deployed_mem0_preference", "preference_stream", m, p, v, v - 0.01, v + 0.01, 10]
             for m, v in (("append_only", 0.7), ("mem0", 0.71))],
            columns=COLUMNS,
        )
        for p in ("stable", "drift", "overall")
    ]  # fmt: skip
    pd.concat(frames).to_csv(tables / "success_deployed_mem0_preference.csv", index=False)
    memory = pd.DataFrame(
        [
            ["deployed_mem0_preference", "preference_stream", "mem0", "drift", 0.71, 0.7, 0.72]
            + [0.45, 0.43, 0.47, 10, 0.66, 0.64, 0.68, 10, 0.5, 0.4, 0.6, 10, 0.47, 0.43, 0.5, 10],
            ["deployed_mem0_preference", "preference_stream", "no_memory", "drift", 0.84, 0.83, 0.85]
            + [None, None, None, None, 0, 0, 0, 10, 0, 0, 0, 10, 0, 0, 0, 10],
        ],
        columns=["experiment", "env", "memory", "phase", "success_mean", "success_low", "success_high"]
        + [
            f"{m}_{s}"
            for m in ("stale_share", "truth_present", "stale_present", "pollution")
            for s in ("mean", "low", "high", "n")
        ],  # fmt: skip
    )
    memory.to_csv(tables / "memory_deployed_mem0_preference.csv", index=False)
    text = "\n".join(deployed_section(root))
    assert "mem0 (`memory=mem0`, infer=false, offline) on the preference stream" in text
    assert "| Method | stable | drift | overall |" in text
    assert "| mem0 | 0.710 [0.700, 0.720] | 0.710 [0.700, 0.720] | 0.710 [0.700, 0.720] |" in text
    row = "| deployed_mem0_preference | preference stream, drift | mem0 | 0.45 [0.43, 0.47] | 0.66 [0.64,"
    assert row in text and "| No Memory |" not in text.split("Memory quality without a reader")[1]
