"""Every relative link in README.md and docs/ leads somewhere: its file exists, and its #anchor is a heading there.

Links are read from the Markdown outside code (fenced blocks and inline code are skipped), as
``[text](path)``, ``[text](path#anchor)``, ``[text](#anchor)`` and images ``![alt](path)``; links with a scheme
(``https:``, ``mailto:``) are not checked. Anchors are the ones GitHub gives headings: the heading's text
lowercased, markup and punctuation other than ``-`` and ``_`` dropped, spaces turned into hyphens, and a
repeated heading numbered ``-1``, ``-2``, … in its order.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

import pytest

from tests.support.paths import REPO_ROOT

pytestmark = pytest.mark.database_independent

ROOT = REPO_ROOT

FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")
INLINE_CODE = re.compile(r"`+[^`]*`+")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


@dataclass(frozen=True)
class Link:
    """One relative link: where it is written, the file it names and the anchor in it (or None)."""

    source: Path
    line: int
    target: str
    file: Path
    anchor: str | None

    def __str__(self) -> str:
        return f"{self.source.relative_to(ROOT)}:{self.line}: ({self.target})"


def documents() -> list[Path]:
    """README.md and every Markdown page under docs/."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def prose_lines(path: Path) -> list[tuple[int, str]]:
    """(line number, text) of every line outside fenced code blocks."""
    lines, fenced = [], False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            lines.append((number, line))
    return lines


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading's text, before numbering repeats."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading keeps only its text
    text = text.replace("`", "").replace("*", "")
    text = re.sub(r"(?<!\w)_+|_+(?!\w)", "", text)  # _emphasis_ marks, not snake_case
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor of a Markdown file's headings, repeats numbered as GitHub numbers them."""
    seen: dict[str, int] = {}
    found = set()
    for _, line in prose_lines(path):
        heading = HEADING.match(line)
        if not heading:
            continue
        base = slug(heading[1])
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(path: Path) -> list[Link]:
    """Every relative link written in a Markdown file."""
    found = []
    for number, line in prose_lines(path):
        for match in LINK.finditer(INLINE_CODE.sub("", line)):
            target = match[1]
            if SCHEME.match(target):
                continue
            name, _, anchor = target.partition("#")
            file = path if not name else (path.parent / unquote(name)).resolve()
            found.append(Link(path, number, target, file, unquote(anchor) if anchor else None))
    return found


def all_links() -> list[Link]:
    return [link for document in documents() for link in links(document)]


def test_every_relative_link_names_an_existing_file():
    broken = [str(link) for link in all_links() if not link.file.exists()]

    assert broken == [], "links to files that do not exist:\n" + "\n".join(broken)


def test_every_anchor_names_a_heading_of_its_file():
    broken = [
        f"{link}: no heading #{link.anchor} in {link.file.relative_to(ROOT)}"
        for link in all_links()
        if link.anchor and link.file.exists() and (link.file.suffix != ".md" or link.anchor not in anchors(link.file))
    ]

    assert broken == [], "anchors that name no heading:\n" + "\n".join(broken)


def test_the_readme_links_every_docs_page():
    linked = {link.file for link in links(ROOT / "README.md")}
    pages = {page.resolve() for page in (ROOT / "docs").rglob("*.md")}

    assert sorted(str(page.relative_to(ROOT)) for page in pages - linked) == []


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        ("Quick start", "quick-start"),
        ("Retention: `flask purge`", "retention-flask-purge"),
        ("The same worker in any language (curl + jq)", "the-same-worker-in-any-language-curl--jq"),
        ("Flow control's cost to a claim", "flow-controls-cost-to-a-claim"),
        ("A **bold** word and a [link](api.md)", "a-bold-word-and-a-link"),
        ("QUEUELOG_JOB_TYPES and _emphasis_", "queuelog_job_types-and-emphasis"),
        ("Dedupe windows, expiry and run timeouts", "dedupe-windows-expiry-and-run-timeouts"),
    ],
)
def test_a_heading_gets_githubs_anchor(heading, anchor):
    assert slug(heading) == anchor


def test_a_repeated_heading_is_numbered_in_its_order(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Notes\n\n## Notes\n\n```sh\n# not a heading\n```\n\n## Notes\n", encoding="utf-8")

    assert anchors(page) == {"notes", "notes-1", "notes-2"}
