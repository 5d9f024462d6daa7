"""The pages an analysis writes into its output folder (README.md and one page per experiment), read
back for tests: their text, their headings and their relative links."""

from __future__ import annotations

import json
import re
from pathlib import Path

_LINK = re.compile(r"(?<!\\)\]\(([^()\s]+)\)")
_HEADING = re.compile(r"^#{1,6} (.*)$", re.MULTILINE)


def pages(out: Path) -> dict[str, str]:
    """File name -> text of README.md and of every experiment page the manifest lists."""
    listed = json.loads((out / "manifest.json").read_text(encoding="utf-8")).get("pages", [])
    return {name: (out / name).read_text(encoding="utf-8") for name in ["README.md", *listed]}


def all_text(out: Path) -> str:
    """Every page's text, README.md first."""
    return "\n".join(pages(out).values())


def headings(text: str) -> list[str]:
    return _HEADING.findall(text)


def links(text: str) -> list[str]:
    """The targets of the markdown links and images of a page, as written."""
    return _LINK.findall(text)


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but hyphens and underscores dropped,
    spaces as hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.lower())
    return text.replace(" ", "-")
