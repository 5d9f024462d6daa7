"""Environment options list every constructor parameter at its default, as memory options do: any can be
set without `+` (`env.noise=0.1`), and an unknown key of any group (`env.phase_lenght=100`,
`memory.thta=1`) is the project's one line naming the key and what the class takes, never Hydra's
"To append to your config use +..." hint. Listing the parameters changes no run's identity."""

from __future__ import annotations

import inspect

import pytest
from omegaconf import OmegaConf

from runners.compose import CONF_DIR, compose_config, compose_spec
from runners.config import RESERVED, ConfigError
from runners.registry import import_target
from tests.helpers.hostile import TINY, one_line_error
from tests.helpers.runner import cli

ENV_OPTIONS = sorted(p.stem for p in (CONF_DIR / "env").glob("*.yaml") if p.stem != "custom")
# Options that set a parameter away from the class's default, on purpose.
SET_ON_PURPOSE = {"controlled_drift_words": {"actions"}}


@pytest.mark.parametrize("option", ENV_OPTIONS)
def test_every_env_option_lists_every_constructor_parameter_at_the_classes_default(option):
    node = OmegaConf.to_container(compose_config([f"env={option}"]).env, resolve=True)
    assert isinstance(node, dict)
    signature = inspect.signature(import_target(node["_target_"])).parameters  # type: ignore[arg-type]
    listed = {k: v for k, v in node.items() if k not in RESERVED}
    assert set(listed) == set(signature), option
    differ = {k for k, v in listed.items() if v != signature[k].default}
    assert differ == SET_ON_PURPOSE.get(option, set()), option


@pytest.mark.parametrize("option", ["controlled_drift", "executable_drift"])
def test_noise_and_reversals_are_set_without_a_plus(option):
    spec = compose_spec([f"env={option}", "env.noise=0.1", "env.reversal_rate=0.01"])
    assert spec.env.params["noise"] == 0.1 and spec.env.params["reversal_rate"] == 0.01
    env = spec.env.build()
    assert env.outcome_noise.noise == 0.1 and env.reversal_rate == 0.01
    old = compose_spec([f"env={option}", "+env.noise=0.1", "+env.reversal_rate=0.01"])  # as once needed
    assert old.env.params == spec.env.params


def test_a_listed_parameter_left_at_its_default_is_not_passed_but_one_set_is():
    """Existing runs' identities hold only what was set: the default listed for overriding stays out."""
    assert not {"noise", "reversal_rate", "phases", "actions", "false_success"} & set(
        compose_spec().env.params
    )
    assert compose_spec(["env.noise=0.0"]).env.params["noise"] == 0.0  # set, even to the default


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("env.phase_lenght=100", "env.phase_lenght: not a parameter of envs.controlled_drift.ControlledDrift "
         "(it takes: n_keys, n_actions, phase_length, phases, partial_fraction, actions, noise, "
         "false_success, reversal_rate)"),
        ("memory.thta=1", "memory.thta: not a parameter of tepa.tepa_rev.TEPARev (it takes: a0, b0, "),
        ("llm.temprature=0", "llm.temprature: not a parameter of runners.llm.simulated.SimulatedBackend"),
        ("retrieval.top=3", "retrieval.top: not a key of retrieval (its keys: mode)"),
        ("bogus=1", "bogus: not a config key (the keys: env, memory, llm, name, "),
    ],
)  # fmt: skip
def test_an_unknown_key_of_any_group_names_the_key_and_what_the_class_takes(override, message):
    with pytest.raises(ConfigError) as error:
        compose_spec([override])
    assert str(error.value).startswith(message) and "\n" not in str(error.value)
    assert "+" not in str(error.value)


def test_a_parameter_of_a_class_of_your_own_says_to_add_it():
    with pytest.raises(
        ConfigError, match=r"^memory\.top_k: a parameter of baselines\.lww\.LastWriteWins .*\+memory"
    ):
        compose_spec(["memory=custom", "memory._target_=baselines.lww.LastWriteWins", "memory.top_k=3"])
    spec = compose_spec(["memory=custom", "memory._target_=baselines.lww.LastWriteWins", "+memory.top_k=3"])
    assert spec.memory.params == {"top_k": 3}


@pytest.mark.parametrize("args", [("env.phase_lenght=100",), ("-m", "memory.thta=1,2")])
def test_on_the_command_line_an_unknown_key_is_one_line_without_the_plus_hint(tmp_path, args):
    proc = cli(tmp_path, *args, f"results_dir={tmp_path}", *TINY)
    error = one_line_error(proc)
    key = args[-1].split("=")[0]
    assert error.startswith(f"{key}: not a parameter of "), error
    assert "To append" not in proc.stderr and f"+{key}" not in proc.stderr
    assert not (tmp_path / "runs").exists()


def test_a_plan_names_an_unknown_key_in_one_line(tmp_path):
    proc = cli(tmp_path, "env.phase_lenght=100", "plan=true", f"results_dir={tmp_path}")
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("error: env.phase_lenght: not a parameter of envs.controlled_drift")
