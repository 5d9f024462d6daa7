"""Baseline memory methods; each follows `tepa.protocol.Memory`."""
