"""Memory methods by config name: the `conf/memory/` group is the registry, `build_memory` makes one.

Each entry of the group (one YAML file: `_target_`, the parameters' defaults, optionally `label` and
`display`) is a method; `memory=custom` is the slot for a class named on the command line
(`memory=custom memory._target_=mypkg.mymodule.MyMemory`) and is not listed. Only the chosen class's
module is imported, so listing names or building one baseline never imports the others.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Glob
from omegaconf import OmegaConf

from tepa.protocol import Memory, missing_members, protocol_methods

#: The memory config group: one YAML file per method.
MEMORY_DIR = Path(__file__).resolve().parents[1] / "conf" / "memory"
#: Keys of a component node that configure the harness (results label, table name and order, the
#: optional extra an adapter needs), never passed to the constructor.
HARNESS_KEYS = frozenset({"label", "display", "extra"})


def require_class(target: str, obj: object, protocol: type) -> type:
    """`obj` itself when it is a class that defines `protocol`'s methods; otherwise TypeError.

    Checked before anything is called: a config names a `_target_`, and a function there
    (`subprocess.getoutput`, `shutil.rmtree`) or a class of another kind must never run.
    """
    what = f"{protocol.__module__}.{protocol.__name__}"
    if not isinstance(obj, type):
        raise TypeError(f"{target!r} is not a class (a {type(obj).__name__}); it must implement {what}")
    missing = [m for m in protocol_methods(protocol) if not callable(getattr(obj, m, None))]
    if missing:
        raise TypeError(f"{target!r} does not implement {what}: missing {', '.join(missing)}")
    return obj


def import_target(target: str) -> object:
    """What a dotted path "package.module.Class" (or "package.module:Class") names, importing only its
    module; ValueError saying which part is missing."""
    module, _, attr = target.rpartition(":" if ":" in target else ".")
    if not module:
        raise ValueError("must be a dotted path package.module.Class")
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name is None or not (module == exc.name or module.startswith(exc.name + ".")):
            raise  # the module exists but one of its own imports is missing
        raise ValueError(f"no module named {module!r}") from None
    try:
        return getattr(mod, attr)
    except AttributeError:
        raise ValueError(f"module {module!r} has no attribute {attr!r}") from None


@functools.cache
def memory_names(adapters: bool = False) -> list[str]:
    """The group's entries that name a class (every file but `custom`), alphabetically; adapters to
    memory libraries (an entry with `extra`, the optional dependencies it needs) only with `adapters`."""
    entries = {p.stem: OmegaConf.load(p) for p in MEMORY_DIR.glob("*.yaml")}
    return sorted(
        name
        for name, entry in entries.items()
        if not OmegaConf.is_missing(entry, "_target_") and (adapters or "extra" not in entry)
    )


@functools.cache
def memory_entry(name: str) -> dict[str, Any]:
    """Entry `name` of the group as `memory=name` composes it (its `defaults` included): `_target_`,
    the parameters' defaults and the harness keys (shared: read it, do not change it)."""
    if name not in memory_names(adapters=True):
        raise ValueError(f"unknown memory {name!r}; valid names: {', '.join(memory_names(adapters=True))}")
    with _own_hydra(), initialize_config_dir(config_dir=str(MEMORY_DIR), version_base="1.3"):
        entry = OmegaConf.to_container(compose(name), resolve=True)
    assert isinstance(entry, dict)
    return entry


@functools.cache
def swept_memories(experiment: str) -> list[str]:
    """The memory entries experiment `experiment` sweeps (its `hydra.sweeper.params.memory`: a list, or
    a `glob(...)` over the group), in the order it runs them."""
    swept = OmegaConf.load(
        MEMORY_DIR.parent / "experiment" / f"{experiment}.yaml"
    ).hydra.sweeper.params.memory
    override = OverridesParser.create().parse_override(f"memory={swept}")
    value = override.value()
    if isinstance(value, Glob):
        return value.filter(sorted(p.stem for p in MEMORY_DIR.glob("*.yaml")))
    return list(override.sweep_string_iterator())


@contextmanager
def _own_hydra() -> Iterator[None]:
    """Compose apart from a Hydra app that may be running in this process, and leave it as it was."""
    global_hydra = GlobalHydra.instance()
    running, global_hydra.hydra = global_hydra.hydra, None
    try:
        yield
    finally:
        GlobalHydra.instance().hydra = running


def build_memory(name: str, **params: Any) -> Memory:
    """Construct memory `name` (an entry of conf/memory/, or a dotted path "package.module.Class" to a
    class of your own) with the entry's defaults and `params` merged over them.

    Raises ValueError for an unknown name, a parameter the class does not take, or (from the class) a
    bad parameter value; TypeError, before anything is called, when the class does not implement
    `tepa.protocol.Memory`.
    """
    if "." in name or ":" in name:
        target, defaults = name, {}
    else:
        entry = memory_entry(name)
        target = entry["_target_"]
        defaults = {k: v for k, v in entry.items() if k != "_target_" and k not in HARNESS_KEYS}
    try:
        obj = import_target(target)
    except ValueError as exc:
        raise ValueError(f"memory {name!r}: {exc}") from None
    cls = require_class(name, obj, Memory)
    params = {**defaults, **params}
    try:
        sig = inspect.signature(cls)
    except (TypeError, ValueError):  # some classes (builtins, C extensions) have no signature
        sig = None
    if sig is not None and not any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values()):
        unknown = sorted(set(params) - set(sig.parameters))
        if unknown:
            raise ValueError(
                f"memory {name!r} has no parameter {', '.join(map(repr, unknown))}; "
                f"it takes: {', '.join(sig.parameters) or 'none'}"
            )
    memory = cls(**params)
    missing = missing_members(memory, Memory)
    if missing:
        raise TypeError(
            f"memory {name!r} does not implement tepa.protocol.Memory: missing {', '.join(missing)}"
        )
    return memory
