"""Names read from run logs (a phase, method or env a user named) are inert text in the generated
markdown: a markdown link, an autolink or a bare URL in a name links nowhere in the tables or README."""

from __future__ import annotations

import re

import pandas as pd

from analysis.report.figures import FigureFile
from analysis.report.readme import render_report
from analysis.report.tables import Table, markdown_table, to_markdown

NAMES = ["[click](https://example.com)", "<https://x>", "www.example.com", "[a\\](https://evil.example)"]

# what would still be live after rendering: a `](` or `<letter` not escaped by an odd run of
# backslashes, or a bare URL whose `://` / `www.` is intact
_LIVE = re.compile(r"(?:^|[^\\])(?:\\\\)*(?:\]\(|<[A-Za-z])|(?<!\\)://|www\.", re.MULTILINE)


def _live(markdown: str) -> list[str]:
    return [m.group() for m in _LIVE.finditer(markdown)]


def test_a_phase_or_method_named_as_a_link_renders_with_no_live_link_in_the_table_markdown():
    table = Table(
        name="t",
        title=f"exp {NAMES[0]}: success per phase",
        columns=["Setting", "Method", *NAMES],
        rows=[[name, name, *["0.5"] * len(NAMES)] for name in NAMES],
        data=pd.DataFrame(),
    )
    text = to_markdown(table)
    assert _live(text) == [], text
    assert "\\[click\\](https\\://example.com)" not in text  # brackets are shown, only `](` is broken
    assert "[click\\](https\\://example.com)" in text
    assert "&lt;https\\://x>" in text


def test_a_link_we_write_in_a_value_cell_stays_a_link():
    text = markdown_table(["Method", "why"], [["TEPA-Rev", "lapses ([evidence](sensitivity.md))"]], labels=1)
    assert "([evidence](sensitivity.md))" in text


def test_a_figure_titled_with_a_link_has_no_live_link_in_its_heading_or_alt_text(tmp_path):
    figures = [FigureFile(tmp_path / "figures" / f"f{i}.png", title=name) for i, name in enumerate(NAMES)]
    text = render_report([], figures, {}, tmp_path)
    figure_part = text[text.index("## Figures") :]
    images = re.findall(r"^!\[(.*)\]\(figures/f\d\.png\)$", figure_part, re.MULTILINE)
    assert len(images) == len(NAMES), figure_part
    for alt in images:  # no bracket of a title closes the alt text early
        assert re.search(r"(?:^|[^\\])(?:\\\\)*[\[\]]", alt) is None, alt
    # with each image's own target taken out, nothing live is left
    assert _live(re.sub(r"\]\(figures/f\d\.png\)", "", figure_part)) == [], figure_part
