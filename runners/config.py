"""Structured configs and start-up validation for `python -m runners.run`.

The primary config is typed by `RunConfig` (stored in Hydra's ConfigStore as `run_schema`, the first
entry of conf/config.yaml's defaults), so Hydra rejects a wrong top-level type or an unknown key while
composing. The three component nodes (`env`, `memory`, `llm`) are plain `_target_` nodes so that a
user's own class can replace a project class from the command line; they are checked when a run starts:

- every class (a memory method, an environment, a backend, a user's own) against its constructor's
  signature: unknown and missing parameters, and the types its annotations name;
- the memory is then built once: its class checks its own ranges (through `tepa.validation`), so a bad
  value stops the run before any episode, with the class's message prefixed by the group.

Before any of that, each `_target_` is imported and must be a class that implements its group's
protocol (`runners.registry.require_class`): a function or another kind of class named there is never
called. Every number must be finite; no value may look like a credential (`secret_problem`); seeds must
fit the episode log's int64; `name` and labels are plain folder names; `results_dir` must be writable;
top-level keys are RunConfig's. `runners.preflight` runs the checks that must precede Hydra's own output.

Every problem is a `ConfigError` whose message names the key, e.g. "memory.theta_rev=1.5: must be in
[0, 1]"; Hydra prints such an error as one line and exits non-zero, before any episode runs.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import re
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Optional

from hydra.core.config_store import ConfigStore
from hydra.errors import CompactHydraException
from omegaconf import MISSING, DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from analysis.data.validate import unwritable
from analysis.streamlog.record import INT64_MAX
from envs.base import Environment
from runners.embed.retrieval import RetrievalSpec, check_retrieval
from runners.llm.backend import Backend
from runners.registry import HARNESS_KEYS, import_target, require_class
from tepa.protocol import Memory, missing_members
from tepa.redact import KEY_SHAPED

# Keys of a component node that configure the harness, not the class: never passed to the constructor.
RESERVED = frozenset({"_target_", *HARNESS_KEYS})
# Parameter names that would hold a secret. Keys live in environment variables (llm.api_key_env).
_SECRET = re.compile(r"(^|_)(api_?key|token|secret|password)$")
# Values that look like a credential: provider key formats (`tepa.redact`), a bearer token, a URL
# with a user part or with a secret-named parameter in its query string (`?api_key=...`).
_SECRET_VALUE = re.compile(
    rf"{KEY_SHAPED.pattern}|\bBearer\s+\S{{8,}}|[A-Za-z][A-Za-z0-9+.\-]*://[^/@\s]*@"
    r"|[?&;](?:[A-Za-z0-9_\-]*[_\-])?(?:api[_\-]?key|key|token|secret|password|sig|signature)=[^&#\s]"
)
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
_DIR_NAME = re.compile(r"[A-Za-z0-9_.=+-]+")
MAX_DIR_NAME = 128  # characters of `name` or a label
_PROJECT_PACKAGES = ("tepa.", "baselines.", "envs.", "runners.")
PROTOCOLS: dict[str, type] = {"env": Environment, "memory": Memory, "llm": Backend}


#: The project's resolvers, each a function of its arguments alone (no clock, no environment): a value
#: that uses only these and references resolves the same in every composition of the same options.
PURE_RESOLVERS = frozenset({"tepa.removeprefix", "tepa.default"})


class ConfigError(CompactHydraException):
    """A config that cannot run. Hydra prints it as its message alone (no traceback) and exits 1."""


# ---------------------------------------------------------------------------------------------------
# Top level
# ---------------------------------------------------------------------------------------------------


@dataclass
class RunConfig:
    """The primary config. `seeds` (a list) wins over `seed` when set: one run covers several seeds,
    run concurrently. `progress`: None shows a bar only on a terminal. `plan`: print what the run would
    cost (`runners.plan`) instead of running it. `max_episodes`: stop every stream after that many
    episodes (a quick try; None runs the whole stream). `log_prompts`: keep every prompt in the episode
    log (None: the backend's default, `default_log_prompts`). `log_samples`: log what each prompt held
    (options, retrieved lines, truth) and its memory quality; false keeps the log to the episode's
    outcome (smaller, and no memory metrics). `max_evidence`: show the model at most that
    many retrieved items per decision, the most recent (the same evidence budget for every method; None:
    all). `streams_at_once`: run at most that many of the seeds' streams at a time (None: all); a
    local server with a few cache slots reuses more of its cache when one stream's prompts follow each
    other than when every stream's interleave. It changes the time, never an episode."""

    env: Any = MISSING
    memory: Any = MISSING
    llm: Any = MISSING
    name: str = "adhoc"
    seed: int = 0
    seeds: Optional[list[int]] = None  # noqa: UP045 (OmegaConf does not read `X | None` on 3.11)
    results_dir: str = "results"
    progress: Optional[bool] = None  # noqa: UP045
    plan: bool = False
    max_episodes: Optional[int] = None  # noqa: UP045
    log_prompts: Optional[bool] = None  # noqa: UP045
    log_samples: bool = True
    max_evidence: Optional[int] = None  # noqa: UP045
    streams_at_once: Optional[int] = None  # noqa: UP045
    retrieval: Any = None  # conf/retrieval/: keyed (default), bm25, dense (runners.embed.retrieval)


def register() -> None:
    """Store the run schema in Hydra's ConfigStore, add the `tepa.removeprefix` resolver (which
    conf/env/memoryagentbench.yaml uses for its label) and name unknown keys in one line
    (`_name_unknown_keys`); idempotent, done on import."""
    OmegaConf.register_new_resolver("tepa.removeprefix", str.removeprefix, replace=True)
    OmegaConf.register_new_resolver("tepa.default", _listed_default, replace=True)
    ConfigStore.instance().store(name="run_schema", node=RunConfig)
    _name_unknown_keys()


def _listed_default(value: Any = None) -> Any:
    """`${tepa.default:V}` is V: an option lists a parameter at its class's default so that it can be
    set (`env.noise=0.1`), and the run passes it only once something sets it (`_listed_defaults`)."""
    return value


_LISTED = re.compile(r"\$\{tepa\.default:[^}]*\}")


def _listed_defaults(node: Any) -> set[str]:
    """The keys of a component node still at their option's `${tepa.default:...}`: left out of the
    class's arguments (it applies the same default), so that listing a parameter in an option changes
    no run's identity. A value set anywhere (an experiment, the command line, even to the default) is
    passed, as it was before the option listed it."""
    if not isinstance(node, DictConfig):
        return set()
    raw = OmegaConf.to_container(node, resolve=False)
    assert isinstance(raw, dict)
    return {str(k) for k, v in raw.items() if isinstance(v, str) and _LISTED.fullmatch(v.strip())}


_OVERRIDDEN = re.compile(r"Could not override '([^']+)'")


def _name_unknown_keys() -> None:
    """Hydra refuses an override of a key the composed config lacks (`env.phase_lenght=100`) with
    "Could not override ... To append to your config use +env.phase_lenght=100": a hint that would add
    a key no class takes. Every composition (a run, a sweep's jobs, a plan, `compose_spec`) applies
    the command line's overrides through `ConfigLoaderImpl._apply_overrides_to_config`; wrapped here,
    such a refusal is the project's one line instead, naming the key and what its node takes:
    "env.phase_lenght: not a parameter of envs.controlled_drift.ControlledDrift (it takes: ...)"."""
    try:
        from hydra._internal.config_loader_impl import ConfigLoaderImpl
        from hydra.errors import ConfigCompositionException
        from omegaconf.errors import ConfigAttributeError, ConfigKeyError
    except ImportError:  # another Hydra: its own message stays
        return
    apply = ConfigLoaderImpl.__dict__.get("_apply_overrides_to_config")
    if not isinstance(apply, staticmethod) or getattr(apply.__func__, "_tepa", False):
        return
    original = apply.__func__

    def applied(overrides: Any, cfg: DictConfig) -> None:
        overrides = [_as_set(o, cfg) for o in overrides]
        try:
            original(overrides, cfg)
        except ConfigCompositionException as exc:
            match = _OVERRIDDEN.match(str(exc))
            if match is None or not isinstance(exc.__cause__, ConfigAttributeError | ConfigKeyError):
                raise
            raise ConfigError(unknown_key_message(match.group(1), cfg)) from None

    applied._tepa = True  # type: ignore[attr-defined]
    ConfigLoaderImpl._apply_overrides_to_config = staticmethod(applied)  # type: ignore[method-assign]


def _as_set(override: Any, cfg: DictConfig) -> Any:
    """`+env.noise=0.1` as `env.noise=0.1` when the option lists the key: a component's parameter once
    had to be added with `+` (its option did not list it), and such command lines still run."""
    key = override.key_or_group
    if override.is_add() and key.split(".", 1)[0] in PROTOCOLS and "." in key:
        if OmegaConf.select(cfg, key, throw_on_missing=False) is not None:
            from hydra.core.override_parser.types import OverrideType

            return dataclasses.replace(override, type=OverrideType.FORCE_ADD)
    return override


def unknown_key_message(key: str, cfg: DictConfig) -> str:
    """One line for `key`, which composed config `cfg` does not have: for a key of a component (env,
    memory, llm) the parameters its class takes, else the keys its node has."""
    head, _, leaf = key.rpartition(".")
    if not head:
        return f"{key}: not a config key (the keys: {', '.join(_RUN_KEYS)})"
    group = head.split(".", 1)[0]
    node = OmegaConf.select(cfg, head, throw_on_missing=False)
    target = node.get("_target_") if head == group and isinstance(node, DictConfig) else None
    if group in PROTOCOLS and head == group and target in (None, "???"):
        return f"{key}: {group}._target_ is not set yet (set it first; a parameter of your class: +{key}=...)"
    if group in PROTOCOLS and isinstance(target, str):
        try:
            accepted = list(inspect.signature(import_target(target)).parameters)  # type: ignore[arg-type]
        except (ValueError, TypeError, ImportError):
            accepted = None
        if accepted is not None and leaf in accepted:  # a class of your own: its option lists nothing
            return (
                f"{key}: a parameter of {target} that the {group} option does not list (add it: +{key}=...)"
            )
        if accepted is not None:
            hint = " (start from memory=custom for a class of your own)" if group == "memory" else ""
            return f"{key}: not a parameter of {target} (it takes: {', '.join(accepted) or 'none'}){hint}"
    if isinstance(node, DictConfig):
        keys = ", ".join(str(k) for k in node if str(k) not in RESERVED) or "none"
        return f"{key}: not a key of {head} (its keys: {keys})"
    return f"{key}: not a config key ({head} has no key {leaf!r})"


register()


# ---------------------------------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------------------------------


_RUN_KEYS = tuple(f.name for f in fields(RunConfig))


@dataclass(frozen=True)
class Component:
    """A validated component: the class to build, its keyword arguments and its results label."""

    group: str
    target: str
    cls: type
    params: dict[str, Any] = field(default_factory=dict)
    label: str = ""

    def build(self) -> Any:
        """Construct the component; a ValueError from the class becomes a ConfigError naming the key,
        and so does an object that lacks part of its group's protocol."""
        try:
            obj = self.cls(**self.params)
        except (TypeError, ValueError) as exc:
            raise ConfigError(_prefixed(self.group, str(exc), self.params)) from None
        protocol = PROTOCOLS[self.group]
        missing = missing_members(obj, protocol)
        if missing:
            raise ConfigError(
                f"{self.group}._target_={self.target!r}: does not implement "
                f"{protocol.__module__}.{protocol.__name__} (missing: {', '.join(missing)})"
            )
        return obj


@dataclass(frozen=True)
class RunSpec:
    """Everything a run needs, checked: the components, the seeds, where results go."""

    name: str
    seeds: tuple[int, ...]
    results_dir: str
    progress: bool | None
    plan: bool
    max_episodes: int | None
    log_prompts: bool
    max_evidence: int | None
    env: Component
    memory: Component
    llm: Component
    config: dict[str, Any]  # the resolved config (env, memory, llm, run keys), secrets never present
    retrieval: RetrievalSpec = RetrievalSpec()
    log_samples: bool = True
    streams_at_once: int | None = None


def validate(cfg: DictConfig, choices: Mapping[str, str | None]) -> RunSpec:
    """Check a composed config and return its RunSpec, or raise ConfigError naming the bad key.

    `choices` are the selected group options (Hydra's `runtime.choices`): the default results labels.
    """
    unknown = [k for k in cfg if k != "hydra" and k not in _RUN_KEYS]
    if unknown:
        raise ConfigError(f"{unknown[0]}: not a config key (the keys: {', '.join(_RUN_KEYS)})")
    if "hydra" in cfg:  # Hydra's own node is not ours (a running job's config comes without it)
        cfg = OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"])
    try:
        missing = sorted(OmegaConf.missing_keys(cfg))
    except OmegaConfBaseException as exc:
        raise ConfigError(_omegaconf_message(exc)) from None
    if missing:
        raise ConfigError(
            f"{missing[0]}: missing required value (set it on the command line: {missing[0]}=...)"
        )
    try:
        resolved = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)
    except OmegaConfBaseException as exc:
        raise ConfigError(_omegaconf_message(exc)) from None
    seeds = tuple(resolved["seeds"]) if resolved.get("seeds") is not None else (resolved["seed"],)
    if not seeds:
        raise ConfigError("seeds=[]: must name at least one seed")
    for s in seeds:
        if not 0 <= s <= INT64_MAX:
            raise ConfigError(f"seed={s}: must be in [0, 2**63 - 1] (what the episode log can store)")
    if len(set(seeds)) != len(seeds):
        raise ConfigError(f"seeds={list(seeds)}: must not repeat a seed")
    for key in ("name", "results_dir"):
        problem = secret_problem(key, resolved[key])
        if problem:
            raise ConfigError(f"{key}{problem}")
    max_episodes = resolved.get("max_episodes")  # absent from a logged config (meta.json) of a full run
    if max_episodes is not None and max_episodes < 1:
        raise ConfigError(f"max_episodes={max_episodes}: must be >= 1 (null runs the whole stream)")
    max_evidence = resolved.get("max_evidence")  # absent from a logged config of a run without a cap
    if max_evidence is not None and max_evidence < 1:
        raise ConfigError(f"max_evidence={max_evidence}: must be >= 1 (null shows all retrieved evidence)")
    streams_at_once = resolved.get("streams_at_once")
    if streams_at_once is not None and streams_at_once < 1:
        raise ConfigError(f"streams_at_once={streams_at_once}: must be >= 1 (null runs every stream at once)")
    check_dir_name("name", resolved["name"])
    if not resolved.get("plan"):  # a plan writes nothing (checking the folder creates it)
        check_results_dir(resolved["results_dir"])
    components = {
        g: _component(g, resolved[g], choices.get(g), _listed_defaults(cfg[g]))
        for g in ("env", "memory", "llm")
    }
    log_prompts = resolved.get("log_prompts")  # absent from a logged config (meta.json) of an older run
    if log_prompts is None:
        log_prompts = default_log_prompts(components["llm"])
    config = {k: v for k, v in resolved.items() if k not in ("seed", "seeds", "plan", "streams_at_once")}
    config["log_prompts"] = log_prompts  # as applied, for meta.json
    retrieval = _retrieval(resolved.get("retrieval"))
    if retrieval.mode == "keyed":  # the default leaves logged configs as they were
        config.pop("retrieval", None)
    return RunSpec(
        name=resolved["name"],
        seeds=seeds,
        results_dir=resolved["results_dir"],
        progress=resolved["progress"],
        plan=bool(resolved.get("plan", False)),  # absent from a logged config (meta.json)
        max_episodes=max_episodes,
        log_prompts=log_prompts,
        log_samples=bool(resolved.get("log_samples", True)),  # absent from a logged config of an older run
        max_evidence=max_evidence,
        streams_at_once=streams_at_once,
        config=config,
        retrieval=retrieval,
        **components,
    )


def default_log_prompts(llm: Component) -> bool:
    """Whether a run logs its prompts when `log_prompts` is null: not on the offline simulated reader
    (its prompts are a function of the logged stream that `analysis.inspect` rebuilds by replay, and
    Append-Only's, which hold every observation of a key, would grow its logs several-fold), but on every
    other backend, where a model call costs far more than writing the prompt it answered."""
    from runners.llm.simulated import SimulatedBackend  # here: config is imported before any backend

    return not issubclass(llm.cls, SimulatedBackend)


def _retrieval(node: Any) -> RetrievalSpec:
    for key, value in (node or {}).items() if isinstance(node, dict) else ():
        problem = secret_problem(key, value) or _number_problem(value)
        if problem:
            raise ConfigError(f"retrieval.{key}{problem}")
    try:
        return check_retrieval(node)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def _component(
    group: str, node: Any, choice: str | None, listed: set[str] | frozenset[str] = frozenset()
) -> Component:
    if not isinstance(node, dict) or not isinstance(node.get("_target_"), str) or not node["_target_"]:
        raise ConfigError(
            f"{group}._target_: missing required value (the class to build, package.module.Class)"
        )
    for key, value in node.items():
        problem = secret_problem(key, value) or _number_problem(value)
        if problem:
            raise ConfigError(f"{group}.{key}{problem}")
    target = node["_target_"]
    params = {k: v for k, v in node.items() if k not in RESERVED and k not in listed}
    try:
        cls = require_class(target, import_target(target), PROTOCOLS[group])
    except ValueError as exc:
        raise ConfigError(f"{group}._target_={target!r}: {exc}") from None
    except TypeError as exc:
        raise ConfigError(f"{group}._target_: {exc}") from None
    hints = _check_signature(group, target, cls, params)
    if group == "memory":  # stored as the parameters' types say, as run identities have recorded them
        params = {k: float(v) if hints.get(k) is float and type(v) is int else v for k, v in params.items()}
    label = node.get("label") or _default_label(group, target, cls, choice)
    check_dir_name(f"{group}.label", label)
    component = Component(group=group, target=target, cls=cls, params=params, label=label)
    if group == "memory":
        component.build()  # cheap: the class checks its ranges before any episode runs
    return component


def secret_problem(key: str, value: Any) -> str | None:
    """Why `key=value` must not be in a config (it would reach logs and Hydra's copies), or None.

    The message never repeats the value: it goes to the terminal and to log files."""
    hint = "; put the key in an environment variable and name that variable with llm.api_key_env"
    leaf = key.rsplit(".", 1)[-1]
    if _SECRET.search(leaf):
        return f": never put a secret in a config{hint}"
    if leaf == "api_key_env" and not (isinstance(value, str) and _ENV_NAME.fullmatch(value)):
        return f": must name an environment variable (letters, digits, _), not hold the key itself{hint}"
    texts = [value] if isinstance(value, str) else _strings(value)
    if any(_SECRET_VALUE.search(text) for text in texts):
        return (
            ": the value looks like a credential (a key, a token, or a URL with user:password@ or a key "
            f"in its query string){hint}"
        )
    return None


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, Mapping):
        return [t for k, v in value.items() for t in (*_strings(k), *_strings(v))]
    if isinstance(value, list | tuple):
        return [t for v in value for t in _strings(v)]
    return []


def _number_problem(value: Any) -> str | None:
    """ ": must be a finite number" when `value` (or a number inside it) is NaN or infinite."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"={value}: must be a finite number"
    if isinstance(value, Mapping):
        value = list(value.values())
    if isinstance(value, list | tuple):
        return next((p for p in map(_number_problem, value) if p), None)
    return None


def check_dir_name(key: str, value: Any) -> None:
    """A results directory name (`name`, a label): one plain path component, never `.` or `..`, short
    enough for any file system (a name is one component of 255 bytes at most, and the harness adds
    suffixes to some)."""
    if not isinstance(value, str) or not _DIR_NAME.fullmatch(value) or not value.strip("."):
        raise ConfigError(
            f"{key}={value!r}: must be a plain directory name (letters, digits, _ . = + -; not . or ..)"
        )
    if len(value) > MAX_DIR_NAME:
        raise ConfigError(
            f"{key}={value[:40]}...: must be at most {MAX_DIR_NAME} characters, got {len(value)}"
        )


def check_results_dir(value: Any) -> None:
    """`results_dir` must be a directory this process can write (it is created if missing): checked
    before Hydra or a run writes anything there, so the failure is one line, not a traceback."""
    if not isinstance(value, str) or not value or "\x00" in value:
        raise ConfigError(f"results_dir={value!r}: must be a directory path")
    problem = unwritable(value)
    if problem:
        raise ConfigError(f"results_dir={value}: {problem}")


def _omegaconf_message(exc: OmegaConfBaseException) -> str:
    return f"{getattr(exc, 'full_key', '') or 'config'}: {str(exc).splitlines()[0]}"


def _check_signature(group: str, target: str, cls: type, params: dict[str, Any]) -> dict[str, Any]:
    """Unknown, missing and mistyped constructor arguments, from the signature and its annotations;
    returns the annotations it checked against (by parameter name)."""
    try:
        sig = inspect.signature(cls)
    except (TypeError, ValueError):  # no signature to check against (a builtin or C extension)
        return {}
    accepted = sig.parameters
    if not any(p.kind is p.VAR_KEYWORD for p in accepted.values()):
        for key in params:
            if key not in accepted:
                hint = " (start from memory=custom for a class of your own)" if group == "memory" else ""
                takes = ", ".join(accepted) or "none"
                raise ConfigError(f"{group}.{key}: not a parameter of {target} (it takes: {takes}){hint}")
    for name, p in accepted.items():
        if p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL):
            continue
        if p.default is p.empty and name not in params:
            raise ConfigError(
                f"{group}.{name}: missing required value (a parameter of {target} without default)"
            )
    hints = _type_hints(cls)
    for key, value in params.items():
        expected = hints.get(key)
        if expected is not None and not _matches(value, expected):
            raise ConfigError(f"{group}.{key}={value!r}: wrong type, expected {_type_name(expected)}")
    return hints


def _type_hints(cls: type) -> dict[str, Any]:
    """The constructor's annotations, evaluated (also through a `functools.partialmethod` __init__)."""
    try:
        sig = inspect.signature(cls, eval_str=True)
    except Exception:  # unresolvable annotations (forward references to optional packages): skip types
        return {}
    return {name: p.annotation for name, p in sig.parameters.items() if p.annotation is not p.empty}


_SIMPLE = {int: (int,), float: (int, float), str: (str,), bool: (bool,), type(None): (type(None),)}


def _matches(value: Any, expected: Any) -> bool:
    """Whether `value` fits a simple annotation (int, float, str, bool, None, their unions, list,
    tuple, dict); anything else is not checked."""
    origin = typing.get_origin(expected)
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, arg) for arg in typing.get_args(expected))
    if expected in _SIMPLE:
        if isinstance(value, bool) and expected in (int, float):
            return False
        return isinstance(value, _SIMPLE[expected])
    if origin in (list, tuple) or expected in (list, tuple):
        return isinstance(value, (list, tuple))
    if origin is dict or expected is dict:
        return isinstance(value, dict)
    return True


def _type_name(expected: Any) -> str:
    if typing.get_origin(expected) is None and hasattr(expected, "__name__"):
        return expected.__name__
    return str(expected).replace("typing.", "")


def _default_label(group: str, target: str, cls: type, choice: str | None) -> str:
    """The group option's name; for a class from outside the project, an environment's own `name` (set
    in the class itself and a plain folder name: a subclass that only inherits a built-in's name would
    share its folder), else the class's name in lower case."""
    if choice and target.startswith(_PROJECT_PACKAGES):
        return choice
    own = vars(cls).get("name")
    if group == "env" and isinstance(own, str) and _DIR_NAME.fullmatch(own) and own.strip("."):
        return own
    return cls.__name__.lower()


def _prefixed(group: str, message: str, params: Mapping[str, Any]) -> str:
    """Name the key in a class's own error message: "lapse=2: ..." -> "llm.lapse=2: ..."."""
    head = re.match(r"[A-Za-z_][A-Za-z0-9_]*", message)
    if head and head.group(0) in params:
        return f"{group}.{message}"
    return f"{group}: {message}"
