"""Baseline memory methods; each follows `tepa.protocol.Memory` and ranks through `tepa.retrieval.rank`."""

from baselines.append_only import AppendOnly
from baselines.lww import LastWriteWins
from baselines.no_memory import NoMemory
from baselines.oracle_reset import OracleReset
from baselines.reactive import ReactiveForgetting
from baselines.sliding_window import SlidingWindow

__all__ = [
    "AppendOnly",
    "LastWriteWins",
    "NoMemory",
    "OracleReset",
    "ReactiveForgetting",
    "SlidingWindow",
]
