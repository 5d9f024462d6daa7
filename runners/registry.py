"""Memory methods by config name, and `build_memory` to make one (or a user's own class) from a config.

Classes are imported lazily, so that listing names or building one baseline never imports the others.
A name that is not registered may be a dotted path, "package.module:Class" or "package.module.Class",
which is how a user plugs in a method of their own (`memory.name=mypkg.mymemory:MyMemory`).
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from tepa.protocol import Memory, protocol_members, protocol_methods

MEMORIES: dict[str, str] = {
    "tepa_rev": "tepa.tepa_rev:TEPARev",
    "tepa_full": "tepa.tepa_full:TEPAFull",
    "tepa_norev": "tepa.tepa_norev:TEPANoRev",
    "tepa_rev_literal": "tepa.tepa_rev:TEPARevLiteral",
    "no_memory": "baselines.no_memory:NoMemory",
    "append_only": "baselines.append_only:AppendOnly",
    "lww": "baselines.lww:LastWriteWins",
    "sliding_window": "baselines.sliding_window:SlidingWindow",
    "reactive": "baselines.reactive:ReactiveForgetting",
    "oracle_reset": "baselines.oracle_reset:OracleReset",
}


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


def memory_names() -> list[str]:
    """The registered config names, in registry order."""
    return list(MEMORIES)


def memory_class(name: str) -> type:
    """The class a config name (or a user's dotted path) refers to."""
    path = MEMORIES.get(name)
    if path is not None:
        module, _, attr = path.partition(":")
        return getattr(importlib.import_module(module), attr)
    if ":" in name:
        module, _, attr = name.partition(":")
    elif "." in name:
        module, _, attr = name.rpartition(".")
    else:
        raise ValueError(
            f"unknown memory {name!r}; valid names: {', '.join(MEMORIES)} "
            "(or a dotted path 'package.module:Class' to a class of your own)"
        )
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name is None or not (module == exc.name or module.startswith(exc.name + ".")):
            raise  # the module exists but one of its own imports is missing
        raise ValueError(f"memory {name!r}: no module named {module!r}") from exc
    try:
        return getattr(mod, attr)
    except AttributeError:
        raise ValueError(f"memory {name!r}: module {module!r} has no attribute {attr!r}") from None


def build_memory(name: str, **params: Any) -> Memory:
    """Construct memory `name` with `params` (its constructor's keyword arguments).

    Raises ValueError for an unknown name, a parameter the class does not take, or (from the class) a
    bad parameter value; TypeError, before anything is called, when `name` is not a class implementing
    `tepa.protocol.Memory`.
    """
    cls = require_class(name, memory_class(name), Memory)
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
    missing = [m for m in protocol_members(Memory) if not hasattr(memory, m)]
    if missing:
        raise TypeError(
            f"memory {name!r} does not implement tepa.protocol.Memory: missing {', '.join(missing)}"
        )
    return memory
