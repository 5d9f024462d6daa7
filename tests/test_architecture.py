"""The layers point only down. The import graph is read from the source (every import statement,
including those inside functions and under TYPE_CHECKING): no module takes part in an import cycle, no
package imports one above it, and no package's top-level modules grow past a line budget (the rest lives
in subpackages by concern)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("tepa", "baselines", "envs", "runners", "analysis")
#: The most lines the top-level modules of one package may hold together.
TOP_LEVEL_LINES = 1600

#: The layers, as what each may import besides itself (a module belongs to the longest name that prefixes
#: its own). At the bottom, the shared model of a stream's log: the record, the lifecycle event vocabulary,
#: the staleness rule, the files and their one writer and reader. Then the mechanism, with what every
#: memory shares (similarity retrieval and text embeddings, argument checks, key redaction). Then the
#: memory methods and the environments, side by side. The analysis reads logs only; the runner, at the
#: top, builds and runs everything and summarises its runs with the analysis.
MAY_IMPORT: dict[str, set[str]] = {
    "analysis.streamlog": set(),
    "tepa": {"analysis.streamlog"},
    "baselines": {"analysis.streamlog", "tepa"},
    "envs": {"analysis.streamlog", "tepa"},
    "analysis": {"analysis.streamlog"},
    "runners": {"analysis.streamlog", "tepa", "baselines", "envs", "analysis"},
}


def _modules(root: Path, packages: tuple[str, ...]) -> dict[str, Path]:
    found = {}
    for package in packages:
        for path in (root / package).rglob("*.py"):
            parts = path.relative_to(root).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def import_graph(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES) -> dict[str, set[str]]:
    """Module -> the project's modules it imports (`from a.b import c` names a.b.c when it is a module,
    else a.b; a module importing a submodule also imports the packages above it, which Python runs)."""
    modules = _modules(root, packages)

    def known(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: set[str | None] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets.update(known(alias.name) for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*parent, base] if base else parent)
                targets.update(known(f"{base}.{alias.name}") for alias in node.names)
        graph[name] = {t for t in targets if t and t != name}
    return graph


def unit(module: str) -> str:
    """The layer a module belongs to: the longest name in MAY_IMPORT that prefixes it."""
    return max((u for u in MAY_IMPORT if module == u or module.startswith(u + ".")), key=len)


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def upward(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """Every import of a module from a layer its own may not import."""
    return {
        (source, target)
        for source, targets in graph.items()
        for target in targets
        if unit(target) != unit(source) and unit(target) not in MAY_IMPORT[unit(source)]
    }


def test_a_cycle_finder_finds_a_cycle_through_three_modules_and_none_in_a_chain():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_the_import_graph_sees_imports_inside_functions_under_type_checking_and_relative(tmp_path):
    (tmp_path / "p" / "q").mkdir(parents=True)
    for name in ("p/__init__.py", "p/q/__init__.py", "p/q/c.py", "p/d.py", "p/e.py"):
        (tmp_path / name).touch()
    (tmp_path / "p" / "a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from p.d import X\n"
        "def f():\n    import p.e\n    from .q import c\n"
    )
    graph = import_graph(tmp_path, ("p",))
    assert graph["p.a"] == {"p.d", "p.e", "p.q.c"}


def test_no_module_takes_part_in_an_import_cycle():
    found = cycles(import_graph())
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_no_package_imports_one_above_it():
    wrong = sorted(upward(import_graph()))
    assert not wrong, "imports that point up:\n" + "\n".join(f"{s} -> {t}" for s, t in wrong)


def test_no_package_holds_more_than_its_budget_in_top_level_modules():
    over = {}
    for package in PACKAGES:
        lines = sum(len(p.read_text(encoding="utf-8").splitlines()) for p in (ROOT / package).glob("*.py"))
        if lines > TOP_LEVEL_LINES:
            over[package] = lines
    assert not over, (
        f"over {TOP_LEVEL_LINES} lines in top-level modules (move a concern to a subpackage): {over}"
    )


def _defined(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef)}


def test_a_streams_log_is_written_and_read_through_one_module():
    """Open, lock, replay, append, verify, finish, move aside: `analysis.streamlog.stream`; the bytes
    they are made of: `analysis.streamlog.encoding`. No other module defines these names."""
    homes = {
        ROOT / "analysis" / "streamlog" / "stream.py": {
            "StreamLog",
            "verify",
            "read_meta",
            "move_aside",
            "stream_dir",
        },
        ROOT / "analysis" / "streamlog" / "encoding.py": {
            "parquet_bytes",
            "jsonl_bytes",
            "episodes_table",
            "dumps",
        },
    }
    for home, names in homes.items():
        assert names <= _defined(home), f"{home.relative_to(ROOT)} lacks {names - _defined(home)}"
    every = set().union(*homes.values())
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if path not in homes:
                assert not every & _defined(path), f"{path.relative_to(ROOT)} defines log names"
    assert "from analysis.streamlog.stream import" in (ROOT / "runners" / "run.py").read_text(
        encoding="utf-8"
    )
