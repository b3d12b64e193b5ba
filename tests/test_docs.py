"""The README reads in ten minutes and the docs say ideas, not history.

The README stays under 250 lines with no prose line over 200 characters (code blocks and
tables may be wider); neither it nor ``docs/`` cites issue or seed numbers, which a reader
cannot look up, or the rounds of a benchmark's history, which live in git. Every relative link
reaches its file, and its heading where it names one.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
HISTORY = re.compile(r"\b(issue|seed)s? #?\d+|before this round|\(additions\)", re.IGNORECASE)


def _prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) outside code fences and tables."""
    lines, code = [], False
    for number, line in enumerate(text.splitlines(), start=1):
        if line.startswith("```"):
            code = not code
        elif not code and not line.startswith("|"):
            lines.append((number, line))
    return lines


def test_readme_is_short() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines: move detail to docs/"


def test_readme_has_no_wall_of_text() -> None:
    long = [
        f"README.md:{n} ({len(line)} characters)"
        for n, line in _prose_lines(README.read_text(encoding="utf-8"))
        if len(line) > 200
    ]
    assert not long, long


def test_readme_starts_with_the_two_commands() -> None:
    head = README.read_text(encoding="utf-8").splitlines()[:6]
    assert any(line.startswith("make run") for line in head) and any(line.startswith("make test") for line in head)


@pytest.mark.parametrize("path", [README, *DOCS], ids=lambda p: p.name)
def test_no_history_in_the_docs(path: Path) -> None:
    found = [
        f"{path.name}:{n}: {m.group(0)!r}"
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        for m in HISTORY.finditer(line)
    ]
    assert not found, found


def test_the_checker_sees_history() -> None:
    assert (
        HISTORY.search("since issue 13")
        and HISTORY.search("Seed 003's ping")
        and HISTORY.search("73 before this round")
    )
    assert not HISTORY.search("a fixed seed; issues a warning")


LINK = re.compile(r"\]\(([^)\s]+)\)")


def _anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


@pytest.mark.parametrize("path", [README, *DOCS], ids=lambda p: p.name)
def test_relative_links_reach_a_file_and_its_heading(path: Path) -> None:
    broken = []
    for target in LINK.findall(path.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto: not checked offline
        file, _, anchor = target.partition("#")
        linked = (path.parent / file).resolve() if file else path
        if not linked.exists():
            broken.append(f"{path.name}: {target} (no such file)")
        elif anchor and linked.suffix == ".md":
            headings = re.findall(r"^#+ (.+)$", linked.read_text(encoding="utf-8"), re.MULTILINE)
            if anchor not in {_anchor(h) for h in headings}:
                broken.append(f"{path.name}: {target} (no such heading)")
    assert not broken, broken


def test_the_anchor_follows_github() -> None:
    assert _anchor("The create page's defaults: 32 px tiles, 100 tiles across") == (
        "the-create-pages-defaults-32-px-tiles-100-tiles-across"
    )
