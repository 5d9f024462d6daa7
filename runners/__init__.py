"""Runners: the agent loop, LLM backends, the Hydra entry point, episode logs and resume."""
