"""A variant directory names one configuration: a text value with `,` in it (or one that reads as a list
or mapping) once gave two configurations one directory (each run then moved the other's stream aside),
while every ordinary value keeps the name it always had, so existing streams stay where they are."""

from __future__ import annotations

import pytest

from runners.compose import compose_config
from runners.run import CONF_DIR
from runners.store.identity import variant_of


def variant_name(*overrides: str) -> str:
    cfg = compose_config(["llm=openai", *overrides])
    return variant_of(
        cfg, {"env": "controlled_drift", "memory": "tepa_rev", "llm": "openai"}, str(CONF_DIR)
    ).name


@pytest.mark.parametrize(
    ("ambiguous", "other"),
    [
        (("llm.model='m,llm.temperature=0.5'",), ("llm.model=m", "llm.temperature=0.5")),
        (("llm.model='m,memory.theta_rev=0.3'",), ("llm.model=m", "memory.theta_rev=0.3")),
        (("llm.model='[1]'",), ("llm.model=[1]",)),
        (("""llm.model='{"a":1}'""",), ("llm.model={a: 1}",)),
    ],
)
def test_a_value_that_reads_as_more_keys_gets_a_directory_of_its_own(ambiguous, other):
    name = variant_name(*ambiguous)
    assert name.startswith("cfg-") and name != variant_name(*other)
    assert variant_name(*ambiguous) == name  # still decided by the configuration alone


@pytest.mark.parametrize(
    ("overrides", "recorded"),
    [
        (("llm.model=m",), "llm.model=m"),
        (("llm.model=m", "llm.temperature=0.5"), "llm.model=m,llm.temperature=0.5"),
        (("llm.model='a=b'",), "llm.model=a=b"),
        (("llm.model=m", "memory.theta_rev=0.3"), "llm.model=m,memory.theta_rev=0.3"),
        (("llm.model=Qwen/Qwen2.5-7B-Instruct",), "cfg-c705c00054fc"),
        (("llm.model=m", "+env.actions=[up,down,left]"), "cfg-4395ef394319"),
    ],
)
def test_an_ordinary_value_keeps_the_directory_it_always_had(overrides, recorded):
    assert variant_name(*overrides) == recorded
