"""The README, docs/ and the results pages hold no dead link and no stale number.

Every relative link resolves (a file, and its `#anchor` where one is named). A result quoted in prose is a
link to the file it comes from, with the row and column in the link's title
(`[0.32](../results/tables/mpi_paper_controlled.csv "memory=append_only phase=full_reversal: mean")`,
or a dotted path into a JSON file): the number shown must be that value at the precision shown, so a
table that moves fails here until the prose moves with it. A decimal number in prose that is not such a
link (outside code) fails too: it would be a hand-copied result nothing checks.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RESULT_PAGES = sorted((ROOT / "results").rglob("*.md"))
LINK = re.compile(r'(?<!!)\[(?P<text>[^\]]*)\]\((?P<target>[^)\s]+)(?: "(?P<title>[^"]*)")?\)')
IMAGE = re.compile(r"!\[[^\]]*\]\((?P<target>[^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
CODE = re.compile(r"`[^`\n]*`")
DECIMAL = re.compile(r"(?<![\w.])[-+]?\d[\d,]*\.\d+(?![\w.])")
#: Decimals in prose that are not results: versions named with their software, significance levels.
VERSION = re.compile(
    r"(?:(?:Python|PyTorch|hydra-core|omegaconf|mem0|SLURM|slurm-wlm|munge|version|v)\s*[<>=~]*|\bp\s*[<>]=?)\s*$",
    re.I,
)


def _prose(text: str) -> str:
    """The text outside fenced blocks and inline code (where paths, commands and config values live)."""
    return CODE.sub(" ", FENCE.sub(" ", text))


def slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


@cache
def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    found, seen = set(), {}
    for heading in re.findall(r"^#{1,6} (.+)$", text, re.MULTILINE):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found | set(re.findall(r'<a (?:id|name)="([^"]+)"', text))


def _links(page: Path) -> list[tuple[str, str, str | None]]:
    text = FENCE.sub(" ", page.read_text(encoding="utf-8"))
    found = [(m["text"], m["target"], m["title"]) for m in LINK.finditer(text)]
    return found + [("", m["target"], None) for m in IMAGE.finditer(text)]


def _broken(page: Path) -> list[str]:
    broken = []
    for _, target, _ in _links(page):
        if re.match(r"^[a-z]+:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{target} (no such heading)")
    return broken


@pytest.mark.parametrize("page", PAGES + RESULT_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves_to_a_file_and_its_heading(page):
    assert _broken(page) == []


def test_the_docs_pages_exist_and_the_readme_links_each_of_them():
    docs = sorted(p.name for p in (ROOT / "docs").glob("*.md"))
    assert len(docs) >= 8
    linked = {
        Path(t.partition("#")[0]).name for _, t, _ in _links(ROOT / "README.md") if t.startswith("docs/")
    }
    assert set(docs) <= linked


def _value(source: Path, selector: str) -> float:
    """The number a checked link points at: `k=v k=v: column` in a CSV (exactly one row), or a dotted
    path in a JSON file."""
    if source.suffix == ".json":
        value = json.loads(source.read_text())
        for part in selector.split("."):
            value = value[int(part)] if isinstance(value, list) else value[part]
        return float(value)
    where, _, column = selector.rpartition(":")
    frame = _csv(source)
    for pair in where.split():
        key, _, wanted = pair.partition("=")
        frame = frame[frame[key].astype(str) == wanted]
    values = frame[column.strip()].unique()  # (a table may repeat a row)
    assert len(values) == 1, f"{source.name} [{selector}]: {len(frame)} rows match"
    return float(values[0])


@cache
def _csv(source: Path) -> pd.DataFrame:
    return pd.read_csv(source, keep_default_na=False)


def _shown(text: str) -> tuple[float, int]:
    """The number in a link's text and its decimals ("1,132.6" -> 1132.6, 1; "+0.70" -> 0.7, 2)."""
    number = re.search(r"[-+]?\d[\d,]*(?:\.\d+)?", text)
    assert number, f"no number in [{text}]"
    digits = number.group().replace(",", "")
    return float(digits), len(digits.partition(".")[2])


def checked_numbers(page: Path) -> list[tuple[str, str, str]]:
    """The links of `page` that quote a result: (text, target, title)."""
    return [
        (text, target, title)
        for text, target, title in _links(page)
        if title and target.partition("#")[0].endswith((".csv", ".json"))
    ]


def stale_numbers(page: Path) -> list[str]:
    """The quoted results of `page` that are not their source's value at the precision shown."""
    stale = []
    for text, target, title in checked_numbers(page):
        value = _value((page.parent / target).resolve(), title)
        shown, decimals = _shown(text)
        if abs(value - shown) > 0.5 * 10**-decimals + 1e-9:
            stale.append(f"[{text}]({target} {title!r}) is {value}")
    return stale


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_quoted_result_is_the_value_of_its_source_at_the_precision_shown(page):
    assert stale_numbers(page) == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_decimal_number_in_prose_is_left_unchecked(page):
    text = page.read_text(encoding="utf-8")
    text = LINK.sub(lambda m: " " if m["title"] else f"[{m['text']}]", _prose(text))
    loose = []
    for m in DECIMAL.finditer(text):
        if not VERSION.search(text[max(0, m.start() - 20) : m.start()]):
            loose.append(text[max(0, m.start() - 40) : m.end() + 10].replace("\n", " "))
    assert loose == []


def test_a_number_that_drifts_from_its_table_fails_the_check(tmp_path):
    """The check itself: a quoted number that no longer matches its source is caught, a true one is not."""
    (tmp_path / "t.csv").write_text("memory,metric,mean\nreactive,prompt_tokens,1132.6\n")
    page = tmp_path / "p.md"
    page.write_text('Reactive uses [777](t.csv "memory=reactive metric=prompt_tokens: mean") tokens.\n')
    assert stale_numbers(page) == ["[777](t.csv 'memory=reactive metric=prompt_tokens: mean') is 1132.6"]
    page.write_text('Reactive uses [1,132.6](t.csv "memory=reactive metric=prompt_tokens: mean") tokens.\n')
    assert stale_numbers(page) == []
