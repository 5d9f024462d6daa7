"""The published numbers our results are compared with, as data.

Two sources: the TEPA paper itself (the reference column of every paper table) and, for context on
MemoryAgentBench, published systems from the MemoryAgentBench paper. `approximate=True` marks numbers
the paper gives only roughly ("~0.210"); they are shown with a "~".
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import pandas as pd

TEPA_PAPER = (
    "Zhou, Ouyang, Zheng, Xiang (2026), TEPA: Revoking Stale Memories for Conflict-Robust Language Agents"
)
MAB_PAPER = "Hu, Wang, McAuley (2025), MemoryAgentBench, arXiv:2507.05257"

#: Metrics a paper number can be: a success rate, an MPI, or a success difference (method - other).
METRICS = ("success", "mpi", "diff")


@dataclass(frozen=True)
class PaperNumber:
    """One published number for (experiment, env, phase, method[, other]).

    For metric "diff", `other` is the method subtracted. `note` carries what the value alone cannot,
    e.g. the reported p-value.
    """

    experiment: str
    env: str
    phase: str
    method: str
    metric: str
    value: float
    approximate: bool
    source: str
    other: str = ""
    note: str = ""


def _drift(experiment: str, env: str, no_memory: float, polluted: float) -> tuple[PaperNumber, ...]:
    """The drift settings report the same four methods, MPI and TEPA's gain at full reversal."""
    phase = "full_reversal"
    return (
        PaperNumber(experiment, env, phase, "no_memory", "success", no_memory, False, TEPA_PAPER),
        PaperNumber(experiment, env, phase, "append_only", "success", polluted, True, TEPA_PAPER),
        PaperNumber(experiment, env, phase, "lww", "success", polluted, True, TEPA_PAPER),
        PaperNumber(experiment, env, phase, "tepa_rev", "success", 0.950, False, TEPA_PAPER),
        PaperNumber(experiment, env, phase, "append_only", "mpi", 0.31, True, TEPA_PAPER),
        PaperNumber(
            experiment, env, phase, "tepa_rev", "diff", 0.74, True, TEPA_PAPER, "append_only", "p < 0.001"
        ),
    )


def _mab(source: str, method: str, value: float, paper: str = TEPA_PAPER) -> PaperNumber:
    return PaperNumber(
        "paper_memoryagentbench",
        f"memoryagentbench_{source}",
        "questions",
        method,
        "success",
        value,
        False,
        paper,
    )


PAPER_NUMBERS: tuple[PaperNumber, ...] = (
    *_drift("paper_controlled", "controlled_drift", 0.309, 0.210),
    *_drift("paper_executable", "executable_drift", 0.298, 0.203),
    PaperNumber(
        "paper_preference", "preference_stream", "overall", "append_only", "success", 0.138, False, TEPA_PAPER
    ),
    PaperNumber(
        "paper_preference", "preference_stream", "overall", "no_memory", "success", 0.837, False, TEPA_PAPER
    ),
    PaperNumber(
        "paper_preference", "preference_stream", "overall", "tepa_full", "success", 0.910, False, TEPA_PAPER
    ),
    _mab("sh_6k", "tepa_rev", 0.890),
    _mab("sh_6k", "lww", 0.890),
    _mab("sh_6k", "tepa_norev", 0.630),
    _mab("sh_32k", "tepa_rev", 0.680),
    _mab("mh_6k", "tepa_rev", 0.040),
    _mab("sh_262k", "tepa_rev", 0.000),
)
"""The TEPA paper's numbers. TEPA in the drift and MemoryAgentBench settings is the
default variant, TEPA-Rev; in the preference stream the paper reports TEPA-Full."""

PUBLISHED_SYSTEMS: tuple[PaperNumber, ...] = (
    _mab("sh_6k", "GPT-4o (long context)", 0.92, MAB_PAPER),
    _mab("sh_32k", "GPT-4o (long context)", 0.88, MAB_PAPER),
    _mab("sh_262k", "GPT-4o (long context)", 0.60, MAB_PAPER),
    _mab("sh_262k", "BM25 (RAG)", 0.48, MAB_PAPER),
    _mab("sh_262k", "Mem0", 0.18, MAB_PAPER),
    _mab("sh_262k", "Zep", 0.07, MAB_PAPER),
)
"""Other systems on MemoryAgentBench FactConsolidation-SH, for context (not methods of this harness)."""


def paper_frame(numbers: tuple[PaperNumber, ...] = PAPER_NUMBERS) -> pd.DataFrame:
    """The numbers as a frame, one row per number, in the order given."""
    return pd.DataFrame([asdict(n) for n in numbers])


def lookup(
    experiment: str, env: str, phase: str, method: str, metric: str = "success", other: str = ""
) -> PaperNumber | None:
    """The paper's number for this cell, or None when the paper does not report it."""
    if metric not in METRICS:
        raise ValueError(f"metric: must be one of {', '.join(METRICS)}, got {metric!r}")
    for number in PAPER_NUMBERS:
        if (number.experiment, number.env, number.phase, number.method, number.metric, number.other) == (
            experiment,
            env,
            phase,
            method,
            metric,
            other,
        ):
            return number
    return None
