"""Environments: controlled_drift, executable_drift, preference_stream, memoryagentbench."""

from envs.base import (
    TRIAL_KINDS,
    AsyncEnvironment,
    Environment,
    EnvironmentBase,
    MultiHop,
    Outcome,
    Task,
    TruthEnvironment,
)
from envs.env_checker import EnvCheckError, check_env

__all__ = [
    "TRIAL_KINDS",
    "AsyncEnvironment",
    "EnvCheckError",
    "Environment",
    "EnvironmentBase",
    "MultiHop",
    "Outcome",
    "Task",
    "TruthEnvironment",
    "check_env",
]
