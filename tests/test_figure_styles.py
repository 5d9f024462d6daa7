"""A method's colour and line style are its own in every figure, titles say when methods have different
seed counts, and the memory-quality tables withhold intervals below the seeds a bootstrap needs."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd

from analysis.metrics import memory_quality as mq
from analysis.metrics.compute import OVERALL
from analysis.metrics.display import MEMORY_CONF
from analysis.report.figures import method_colors, success_over_time
from analysis.report.memory_report import memory_table
from analysis.stats import MIN_BOOTSTRAP_SEEDS

ROOT = Path(__file__).resolve().parents[1]
#: The colours the committed figures were drawn in.
COMMITTED = {
    "no_memory": "#7f7f7f",
    "append_only": "#d62728",
    "lww": "#ff7f0e",
    "sliding_window": "#8c564b",
    "reactive": "#e377c2",
    "oracle_reset": "#17becf",
    "tepa_rev": "#1f77b4",
    "tepa_full": "#2ca02c",
    "tepa_norev": "#9467bd",
    "tepa_rev_literal": "#aec7e8",
}
BUILT_INS = list(COMMITTED)


def _colors_with_registry(conf: Path, methods: list[str]) -> dict[str, str]:
    """`method_colors` in a fresh interpreter whose registry is read from `conf` (as if the user's
    conf/memory held it), imported before the figures are."""
    code = (
        "import json, sys\n"
        "from pathlib import Path\n"
        "import analysis.metrics.display as m\n"
        "m.METHOD_LABELS = m.read_methods(Path(sys.argv[1]))\n"
        "m.METHOD_ORDER = tuple(m.METHOD_LABELS)\n"
        "from analysis.report.figures import method_colors\n"
        "print(json.dumps(method_colors(json.loads(sys.argv[2]))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(conf), json.dumps(methods)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(done.stdout)


def test_registering_a_new_method_between_the_built_ins_recolours_none_of_them(tmp_path):
    conf = tmp_path / "memory"
    shutil.copytree(MEMORY_CONF, conf)
    (conf / "my_memory.yaml").write_text("display: {name: Mine, rank: 55}\n", encoding="utf-8")
    before = _colors_with_registry(MEMORY_CONF, BUILT_INS)
    after = _colors_with_registry(conf, [*BUILT_INS, "my_memory"])
    assert {m: after[m] for m in BUILT_INS} == before == COMMITTED
    assert after["my_memory"] not in COMMITTED.values()


def test_a_method_keeps_its_colour_whether_or_not_another_method_is_present():
    alone = method_colors(["tepa_rev", "mem0", "zeta_memory"])
    with_more = method_colors(["tepa_rev", "mem0", "alpha_memory", "zeta_memory"])
    assert {m: with_more[m] for m in alone} == alone


def test_the_built_ins_and_mem0_keep_the_colours_of_the_committed_figures_beside_a_new_method():
    colors = method_colors([*BUILT_INS, "mem0", "aaa_memory"])
    assert {m: colors[m] for m in COMMITTED} == COMMITTED
    assert colors["mem0"] == "#bcbd22"  # drawn so in results/deployed


def _episodes(seeds: dict[str, int]) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    rows = [
        {"memory": m, "seed": s, "t": t, "phase": "ab"[t >= 20], "success": float(rng.random() < 0.5)}
        for m, n in seeds.items()
        for s in range(n)
        for t in range(40)
    ]
    return pd.DataFrame(rows)


def test_a_title_over_methods_with_different_seed_counts_says_so():
    drawing = success_over_time(_episodes({"tepa_rev": 20, "my_memory": 5}), ["a", "b"], "exp", "env", 5)
    assert "mean over 5-20 seeds, per method in legend" in drawing.title


def test_a_title_over_methods_with_the_same_seed_count_is_unchanged():
    drawing = success_over_time(_episodes({"tepa_rev": 3, "lww": 3}), ["a", "b"], "exp", "env", 5)
    assert drawing.title == "exp / env: success over time (mean over 3 seeds)"


def test_a_memory_quality_table_over_five_seeds_shows_no_interval():
    rng = np.random.default_rng(1)
    episodes = pd.DataFrame(
        [
            {
                "run": f"r{seed}",
                "experiment": "exp",
                "env": "env",
                "memory": "append_only",
                "seed": seed,
                "phase": "a" if t < 10 else "b",
                "current": float(rng.integers(0, 4)),
                "stale": float(rng.integers(0, 4)),
                "truth_present": float(rng.random() < 0.5),
                "stale_present": float(rng.random() < 0.5),
                "polluted": float(rng.random() < 0.5),
            }
            for seed in range(5)
            for t in range(20)
        ]
    )
    phases = {("exp", "env"): ["a", "b"]}
    memory = mq.summarize(episodes, phases, OVERALL)
    assert memory["low"].isna().all() and memory["high"].isna().all()
    success = pd.DataFrame(
        [
            {"experiment": "exp", "env": "env", "memory": "append_only", "phase": p}
            | {"mean": 0.5, "low": 0.4, "high": 0.6, "n": 5}
            for p in ("a", "b", OVERALL)
        ]
    )
    table = memory_table(SimpleNamespace(memory=memory, success=success, phases=phases), "exp")
    cells = [cell for row in table.rows for cell in row[3:]]
    assert cells and not any("[" in cell for cell in cells), cells
    assert all("(n=5, no CI)" in cell for cell in cells if cell != "n/a"), cells
    assert f"fewer than {MIN_BOOTSTRAP_SEEDS} seeds" in table.note
