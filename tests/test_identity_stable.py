"""Run identities and directories of existing configs are stable: the fingerprints below were recorded
from runs made before the memory options gained harness keys (`display`) and the class checks replaced
the typed schemas; a change here would make every existing run look like another configuration."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir

from analysis.streamlog.encoding import fingerprint
from runners.config import validate
from runners.run import CONF_DIR
from runners.store.identity import stream_identity, variant_of

RECORDED = [
    ((), "tepa_rev", "", "8ce049bfe91f6e5a"),
    (("memory=tepa_full",), "tepa_full", "", "f35a115a8a28d120"),
    (("memory=sliding_window", "memory.steps=4"), "sliding_window", "memory.steps=4", "e2eeb94e7dc17302"),
    (("experiment=paper_controlled", "memory=reactive"), "reactive", "", "838afd33642ab31d"),
    (("experiment=paper_memoryagentbench", "memory=tepa_rev_facts"), "tepa_rev", "", "133ca4fa7c71b47c"),
    (
        ("experiment=sweep_thresholds", "memory.theta_rev=0.3"),
        "tepa_rev-theta_rev=0.3-theta_rec=0.5",
        "",
        "fc4852b5ff23b424",
    ),
    (
        ("memory=tepa_rev_literal", "memory.theta_rev=0.3"),
        "tepa_rev_literal",
        "memory.theta_rev=0.3",
        "fe913203d0c214d3",
    ),
    (("env=preference_stream", "memory=oracle_reset"), "oracle_reset", "", "b034abc3d231dc61"),
]


@pytest.mark.parametrize(("overrides", "label", "variant", "recorded"), RECORDED, ids=lambda v: str(v))
def test_the_identity_and_directory_of_an_existing_config_are_unchanged(overrides, label, variant, recorded):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=list(overrides), return_hydra_config=True)
        spec = validate(cfg, cfg.hydra.runtime.choices)
        found = variant_of(cfg, cfg.hydra.runtime.choices, str(CONF_DIR))
    assert (spec.memory.label, found.name) == (label, variant)
    assert fingerprint(stream_identity(spec, 0, found, None)) == recorded
    assert "display" not in spec.memory.params
