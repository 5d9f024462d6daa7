"""Environments: controlled_drift, executable_drift, preference_stream, memoryagentbench."""

from envs.base import TRIAL_KINDS, Environment, Outcome, Task

__all__ = ["TRIAL_KINDS", "Environment", "Outcome", "Task"]
