"""A stream's identity ignores what a backend or an environment declares operational, and nothing else."""

from __future__ import annotations

import pytest

from runners.compose import compose_config
from runners.config import ConfigError, validate
from runners.llm.backend import Reply, Request
from runners.run import CONF_DIR
from runners.store.identity import stream_identity, variant_of


def identity_of(*overrides: str, env: str = "controlled_drift"):
    options = [f"env={env}", "llm=openai", "llm.model=m", *overrides]
    cfg = compose_config(options)
    choices = {"env": env, "memory": "tepa_rev", "llm": "openai"}
    spec = validate(cfg, choices)
    variant = variant_of(cfg, choices, str(CONF_DIR))
    return variant, stream_identity(spec, 0, variant, None)


def test_changing_only_a_backends_operational_keys_keeps_the_stream():
    base_variant, base = identity_of()
    variant, identity = identity_of("llm.timeout=5", "llm.max_retries=1", "llm.price_in=2.5")
    assert variant.name == base_variant.name
    assert identity == base


def test_changing_only_an_environments_operational_keys_keeps_the_stream(tmp_path):
    base_variant, base = identity_of(env="executable_drift")
    variant, identity = identity_of(f"env.sandbox_dir={tmp_path}", env="executable_drift")
    assert variant.name == base_variant.name
    assert identity == base
    _, changed = identity_of("env.time_limit=1.0", env="executable_drift")
    assert changed != base


def test_a_backend_setting_that_changes_answers_is_a_new_stream():
    base_variant, base = identity_of()
    variant, identity = identity_of("llm.temperature=0.7")
    assert variant.name == f"{base_variant.name},llm.temperature=0.7"
    assert identity != base


class NoOperational:
    """A backend that forgets to declare its operational keys."""

    name = "forgetful"

    def __init__(self, **params: object) -> None:
        self.params = params

    async def complete(self, request: Request) -> Reply:
        return Reply(text="A")

    def stats(self) -> dict:
        return {}

    async def aclose(self) -> None:
        pass


def test_a_backend_without_operational_keys_is_refused_naming_the_member():
    cfg = compose_config(["llm=openai", "llm.model=m", f"llm._target_={__name__}.NoOperational"])
    spec = validate(cfg, {"env": "controlled_drift", "memory": "tepa_rev", "llm": None})
    with pytest.raises(ConfigError, match=r"missing: operational"):
        spec.llm.build()
