"""`python -m runners.map` end to end on a tiny map: both stages run through the runner's multirun, the
analysis writes its outputs, and a rerun skips every complete stream."""

import json

from analysis.map.__main__ import main as analyse
from analysis.streamlog.stream import META
from runners.map.__main__ import main as run_map


def test_a_tiny_map_runs_both_stages_is_analysed_and_resumes(tmp_path, capfd):
    declaration = tmp_path / "tiny.yaml"
    declaration.write_text(
        json.dumps(
            {
                "experiment": "robustness_map",
                "tuning_seeds": [1000],
                "tune": {"reactive": {"c": [1, 3]}},
                "evidence_budget": 1,
            }  # fmt: skip
        ),
        encoding="utf-8",
    )
    out = tmp_path / "map"
    args = ["--map", str(declaration), "memory=reactive,tepa_rev", "env.noise=0,0.2",
            "env.reversal_rate=0.01", "env.phase_length=10", "seeds=[0,1]", f"results_dir={out}",
            "progress=false", "hydra/launcher=basic"]  # fmt: skip
    assert run_map(args) == 0
    metas = sorted(out.rglob(META))
    seeds = [json.loads(m.read_text())["seed"] for m in metas]
    # tuning seed: 2 cells x (2 points + Reactive's defaults c=2, not a point + TEPA-Rev's defaults), and
    # 2 cells x 2 methods under the evidence budget; evaluation: defaults, tuned, budget on seeds 0 and 1
    assert seeds.count(1000) == 2 * (2 + 1 + 1) + 2 * 2
    assert {s for s in seeds if s != 1000} == {0, 1}
    capped = [m for m in metas if "max_evidence=1" in str(m)]
    assert len(capped) == 2 * 2 * 3  # 2 cells x 2 methods x 3 seeds (1 tuning, 2 evaluation) under the budget
    spec = json.loads((out / "map.json").read_text())
    assert [c["method"] for c in spec["chosen"]] == ["reactive", "reactive"]
    assert analyse(["--out", str(out)]) == 0
    assert (out / "tables" / "map_advantage.md").is_file() and (out / "figures" / "map_winners.png").is_file()
    assert (
        "TEPA-Rev (tuned) against the best simple baseline (tuned)**, 2 cells, 2 evaluation seeds"
        in (out / "README.md").read_text()
    )
    stamps = {m: m.stat().st_mtime_ns for m in metas}
    capfd.readouterr()
    assert run_map(args) == 0  # everything is complete: skipped, nothing rewritten
    assert {m: m.stat().st_mtime_ns for m in sorted(out.rglob(META))} == stamps
    captured = capfd.readouterr()
    done = [line for line in (captured.out + captured.err).splitlines() if "stream(s):" in line]
    assert done and all(" 0 run," in line for line in done)
