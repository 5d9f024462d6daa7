"""What a stream *is*: its identity, and the directory that names it.

A stream's identity is everything that decides its episodes: for env, memory and llm the chosen config
option and its parameters (not the Python path of the class, so moving a class keeps its runs; the path
counts only where the user chose it, as with `memory=custom memory._target_=...`), the seed, a
truncation (`max_episodes`, when set: a truncated stream is never the full one), and the fingerprint
of the input data when the environment reads data files (its `provenance`). Keys that change how a
stream runs but not its episodes (a backend's timeouts, an environment's data folder: what the class
declares as its `operational` keys) are not part of it.

Directories stay readable: `results/runs/<experiment>/<env>/<memory>/seed=<n>/` holds the experiment's
own configuration (the config composed from the same options, without value overrides). A configuration
that differs from it gets one more level named by the differing keys, e.g.
`tepa_rev/llm.lapse=0.5,memory.theta_rev=0.3/seed=0/` or `tepa_rev/max_episodes=5/seed=0/`, or
`cfg-<hash>` when that name would be long, unsafe or ambiguous (meta.json records the keys either way).
Keys the labels already show (a label that interpolates them, as the threshold sweep's does) are left
out. So every grid point of any sweep has its own directory, decided by the job alone, without knowing
the other jobs of the sweep.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from runners.compose import compose_config
from runners.config import PURE_RESOLVERS, RunSpec
from runners.embed.retrieval import KEYS as RETRIEVAL_KEYS
from runners.embed.retrieval import OPERATIONAL as RETRIEVAL_OPERATIONAL
from runners.registry import HARNESS_KEYS, import_target

GROUPS = ("env", "memory", "llm")
# Top-level keys that change a stream's episodes (`max_episodes` truncates it, `max_evidence` caps the
# evidence a prompt shows): part of its identity when set.
RUN_KEYS = ("max_episodes", "max_evidence")
_AMBIGUOUS_START = ("[", "{")  # a text value that starts so reads as a list or mapping in a name
_SAFE = re.compile(r"[A-Za-z0-9_.=+,-]{1,120}")
_REFERENCE = re.compile(r"\$\{\s*(\.?[A-Za-z_][\w.]*)\s*\}")
# Every `${...}` in a text: the key or resolver name, and ":" when it calls a resolver.
_INTERPOLATION = re.compile(r"\$\{\s*([^\s:{}$]*)\s*(:?)")
# The roots of the values `variant_of` compares: the components, retrieval and the run keys.
COMPARED = (*GROUPS, "retrieval", *RUN_KEYS)
# Hydra's groups whose options set only the `hydra` node.
_HYDRA_GROUPS = ("hydra/launcher", "hydra/sweeper")


@dataclass(frozen=True)
class Variant:
    """How a run's configuration differs from its experiment's own.

    `name`: the extra directory level ("" for the experiment's own configuration); `overrides`: the
    differing keys and their values; `options`: the config option chosen per group; `chosen_targets`:
    the groups whose class the user chose (by `_target_`) rather than by option."""

    name: str = ""
    overrides: dict[str, Any] = field(default_factory=dict)
    options: dict[str, str] = field(default_factory=dict)
    chosen_targets: frozenset[str] = frozenset()


def variant_of(
    cfg: DictConfig, choices: Mapping[str, str | None], conf_dir: str, hydra: DictConfig | None = None
) -> Variant:
    """Compare `cfg` with the config composed from the same options (no value overrides): `cfg` itself
    when its overrides provably change none of the compared values (`_composes_as_own`). `hydra`: the
    Hydra node `cfg` was composed with (a running job's `HydraConfig.get()`); None: `cfg`'s own."""
    options = {g: str(choices[g]) for g in (*GROUPS, "experiment") if choices.get(g)}
    if _composes_as_own(cfg, options, hydra if hydra is not None else cfg.get("hydra")):
        base = cfg
    else:
        base = _compose(tuple(f"{g}={c}" for g, c in options.items()), conf_dir)
    overrides: dict[str, Any] = {}
    chosen = set()
    for group in GROUPS:
        ours, theirs = _component_values(cfg, group), _component_values(base, group)
        shown = _label_references(cfg, group)
        for key in sorted(set(ours) | set(theirs)):
            if ours.get(key) == theirs.get(key) or key in shown:
                continue
            if key == f"{group}._target_":
                chosen.add(group)
                if theirs.get(key) == "???":  # the option asks for a class: the label names it
                    continue
            overrides[key] = ours.get(key)
    for key in RUN_KEYS:
        if cfg.get(key) != base.get(key):
            overrides[key] = cfg.get(key)
    overrides.update(_retrieval_overrides(cfg, base))
    return Variant(_dirname(overrides), overrides, options, frozenset(chosen))


def stream_identity(spec: RunSpec, seed: int, variant: Variant | None, data: Any) -> dict[str, Any]:
    """Everything that decides one stream's episodes (module docstring)."""
    identity: dict[str, Any] = {}
    for group in GROUPS:
        component = getattr(spec, group)
        skip = _operational(group, component.target)
        params = {k: v for k, v in component.params.items() if k not in skip}
        if variant is None or group in variant.chosen_targets or group not in variant.options:
            head = {"_target_": component.target}
        else:
            head = {"option": variant.options[group]}
        identity[group] = {**head, **params}
    identity["seed"] = seed
    for key in RUN_KEYS:
        if getattr(spec, key) is not None:  # unset keys leave the identity of existing runs as it was
            identity[key] = getattr(spec, key)
    retrieval = spec.retrieval.identity()
    if retrieval is not None:  # keyed retrieval leaves the identity of existing runs as it was
        identity["retrieval"] = retrieval
    if data is not None:
        identity["data"] = data
    return identity


def _retrieval_overrides(cfg: DictConfig, base: DictConfig) -> dict[str, Any]:
    """The retrieval keys (`retrieval.mode`, `retrieval.model`, ...) in which `cfg` differs from `base`,
    operational keys aside; a key at its mode's default is named only when both have that mode."""

    def values(c: DictConfig) -> tuple[str, dict[str, Any]]:
        node = c.get("retrieval")
        node = OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else node
        node = {"mode": node} if isinstance(node, str) else node or {"mode": "keyed"}
        mode = node.get("mode", "keyed")
        return mode, {k: v for k, v in node.items() if k not in RETRIEVAL_OPERATIONAL}

    (mode, ours), (their_mode, theirs) = values(cfg), values(base)
    defaults = RETRIEVAL_KEYS.get(mode, {}) if mode != their_mode else {}
    return {
        f"retrieval.{k}": ours.get(k)
        for k in sorted(set(ours) | set(theirs))
        if ours.get(k) != theirs.get(k) and not (k in defaults and ours.get(k) == defaults[k])
    }


def _composes_as_own(cfg: DictConfig, options: Mapping[str, str], hydra: DictConfig | None) -> bool:
    """Whether the config composed from `options` alone provably has `cfg`'s compared values, so that
    composing it (as long as composing `cfg` itself) can be skipped: every job of a paper sweep.

    Both are composed from the same group options, so they differ only in the overrides applied after:
    `cfg`'s value overrides (`results_dir=...`) and Hydra's own (`hydra.launcher.n_jobs=1`). They have
    the same compared values when `options` are `cfg`'s own choices and every group it chose is one of
    them, no override sets a compared node (`COMPARED`), a Hydra override sets only the `hydra` node, and
    every compared value refers only to compared nodes, through resolvers that are functions of their
    arguments alone (not `${now:...}` or `${hydra:...}`)."""
    if not isinstance(hydra, DictConfig):  # no Hydra node: nothing lists the overrides
        return False
    groups = set(hydra.runtime.choices)
    own = {g: str(c) for g, c in hydra.runtime.choices.items() if g in (*GROUPS, "experiment") and c}
    return (
        own == dict(options)
        and all(_app_override_kept(o, options, groups) for o in hydra.overrides.task)
        and all(_hydra_override_kept(o) for o in hydra.overrides.hydra)
        and all(_refers_within(cfg, root) for root in COMPARED if root in cfg)
    )


def _app_override_kept(override: str, options: Mapping[str, str], groups: set[str]) -> bool:
    """Whether a command-line override leaves every compared value as `options` compose it: it chooses
    one of their groups' options, or sets a key outside the compared nodes."""
    key, sep, _ = override.partition("=")
    key = key.lstrip("+")
    if not sep or key.startswith("~") or "@" in key:  # a deletion or a package move: compose instead
        return False
    if key in groups:
        return key in options
    return "/" not in key and _root(key) not in COMPARED


def _hydra_override_kept(override: str) -> bool:
    """Whether a Hydra override sets only the `hydra` node: a value under it (but the config search
    path, which decides what every option composes to) or the choice of launcher or sweeper."""
    key = override.partition("=")[0].lstrip("+")
    return (key.startswith("hydra.") and key != "hydra.searchpath") or key in _HYDRA_GROUPS


def _refers_within(cfg: DictConfig, root: str) -> bool:
    """Whether every interpolation in `cfg[root]` is a reference into a compared node or a pure resolver
    (`runners.config.PURE_RESOLVERS`), so that it resolves the same whatever is overridden elsewhere."""
    if OmegaConf.is_interpolation(cfg, root):
        return False
    node = cfg[root]
    if not isinstance(node, DictConfig | ListConfig):
        return True
    raw = OmegaConf.to_container(node, resolve=False)
    return all(_kept_reference(*found) for text in _texts(raw) for found in _INTERPOLATION.findall(text))


def _kept_reference(name: str, resolver: str) -> bool:
    """One `${...}` (its key or resolver `name`; `resolver`: ":" for a resolver call)."""
    if resolver:
        return name in PURE_RESOLVERS
    if name.startswith("."):  # relative: within its own node, unless it climbs out (`${..name}`)
        return not name.startswith("..")
    return _root(name) in COMPARED


def _texts(value: Any) -> list[str]:
    """Every text in a container's values, however deep."""
    if isinstance(value, dict):
        return [t for v in value.values() for t in _texts(v)]
    if isinstance(value, list):
        return [t for v in value for t in _texts(v)]
    return [value] if isinstance(value, str) else []


def _root(key: str) -> str:
    """The top-level key of a dotted key (`env.phases[0].name`: `env`)."""
    return re.split(r"[.\[]", key, maxsplit=1)[0]


@functools.lru_cache(maxsize=64)
def _compose(overrides: tuple[str, ...], conf_dir: str) -> DictConfig:
    """The config of `overrides` (group options only), inside a running Hydra app or outside one;
    composed once per process (a launcher's worker runs many jobs with the same options), read only."""
    return compose_config(overrides, conf_dir)


def _component_values(cfg: DictConfig, group: str) -> dict[str, Any]:
    """A component node's resolved values as dotted keys, without harness and operational keys."""
    node = OmegaConf.to_container(cfg[group], resolve=True, throw_on_missing=False)
    assert isinstance(node, dict)
    skip = HARNESS_KEYS | _operational(group, node.get("_target_"))
    return {f"{group}.{k}": v for k, v in node.items() if k not in skip}


def _operational(group: str, target: Any) -> frozenset[str]:
    """Keys of `group` that change how a stream runs, not its episodes: a rerun that changes only these
    continues (or skips) the same streams. Environments, backends and memories declare them
    (`operational`)."""
    if group in ("env", "llm", "memory") and isinstance(target, str):
        try:
            return import_target(target).operational  # type: ignore[attr-defined]
        except (ValueError, AttributeError):  # not a class of the group: validation names it
            return frozenset()
    return frozenset()


def _label_references(cfg: DictConfig, group: str) -> set[str]:
    """The keys a group's label interpolates (`${memory.theta_rev}`, `${.source}`): the label shows them."""
    raw = OmegaConf.to_container(cfg[group], resolve=False).get("label")
    if not isinstance(raw, str):
        return set()
    return {f"{group}{ref}" if ref.startswith(".") else ref for ref in _REFERENCE.findall(raw)}


def _dirname(overrides: Mapping[str, Any]) -> str:
    """`key=value,...` sorted by key, or `cfg-<hash>` when that is long or not a plain file name.

    The name must tell configurations apart: a text value with a `,` in it could read as more keys
    (`llm.model='m,llm.temperature=0.5'` as two), one that starts with `[` or `{` as a list or mapping
    (`llm.model='[1]'` as `[1]`), so such overrides are named by the hash of their keys and typed values
    instead. Keys are parameter names (no `,` or `=`) and every other value renders one way, so every
    other name (and hash) is as it always was: existing streams stay where they are."""
    if not overrides:
        return ""
    if any(isinstance(v, str) and ("," in v or v.startswith(_AMBIGUOUS_START)) for v in overrides.values()):
        typed = json.dumps(sorted(overrides.items()), separators=(",", ":"), default=repr)
        return "cfg-" + hashlib.sha256(typed.encode()).hexdigest()[:12]
    name = ",".join(f"{k}={_plain(v)}" for k, v in sorted(overrides.items()))
    return name if _SAFE.fullmatch(name) else "cfg-" + hashlib.sha256(name.encode()).hexdigest()[:12]


def _plain(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, separators=(",", ":"))
