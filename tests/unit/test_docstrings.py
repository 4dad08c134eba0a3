"""Module docstrings are short and point at docs/ for the detail; no Sphinx roles in crawler/.

A module docstring says in at most three lines what the module is for and why, optionally followed
by one link line ("Details: docs/internals/fit.md#offload") whose file exists and whose anchor is a
heading of that file (GitHub's anchors: lowercase, spaces to '-', punctuation dropped). The
internals pages those lines point at link only to files and headings that exist.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import crawler

PKG = Path(crawler.__file__).resolve().parent
ROOT = PKG.parent
MODULES = sorted(PKG.rglob("*.py"))
INTERNALS = sorted((ROOT / "docs" / "internals").glob("*.md"))
LINK = re.compile(r"^Details: (?P<file>docs/[\w./-]+\.md)(?:#(?P<anchor>[\w-]+))?$")
SPHINX_ROLE = re.compile(r"(?<![\w:]):(?:py:)?[a-z]+:`[^`]")


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lowercase, punctuation dropped, spaces to '-'."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(doc: Path) -> set[str]:
    """The anchors of the headings of a Markdown file (fenced code blocks skipped)."""
    out: set[str] = set()
    fenced = False
    for line in doc.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (m := re.match(r"#{1,6} (.+)", line)):
            out.add(anchor(m[1]))
    return out


def _docstring(path: Path) -> str | None:
    return ast.get_docstring(ast.parse(path.read_text()))


def test_the_anchor_and_role_rules() -> None:
    assert anchor("Decode speed (tokens/s)") == "decode-speed-tokenss"
    assert anchor("header_read") == "header_read"
    assert anchor("The `fit` package") == "the-fit-package"
    assert anchor("Partial offload (`-ngl N`) — `x.py`") == "partial-offload--ngl-n--xpy"
    assert SPHINX_ROLE.search("see :func:`read_header`") and SPHINX_ROLE.search(":py:class:`X`")
    assert not SPHINX_ROLE.search("base_model:quantized:`` and ``x``")


def test_every_module_is_found() -> None:
    assert len(MODULES) > 100
    assert PKG / "gguf" / "fetch.py" in MODULES and PKG / "cli" / "__init__.py" in MODULES


@pytest.mark.parametrize("path", MODULES, ids=[str(p.relative_to(ROOT)) for p in MODULES])
def test_module_docstring_is_short_with_at_most_one_link(path: Path) -> None:
    doc = _docstring(path)
    assert doc, f"{path.relative_to(ROOT)} has no module docstring"
    lines = doc.strip().splitlines()
    links = [line for line in lines if line.startswith("Details:")]
    assert len(links) <= 1, links
    if links:
        assert lines[-1] == links[0], "the link is the docstring's last line"
        m = LINK.match(links[0])
        assert m, f"not a docs/ link: {links[0]!r}"
        target = ROOT / m["file"]
        assert target.is_file(), f"{m['file']} does not exist"
        if m["anchor"]:
            assert m["anchor"] in anchors(target), f"no heading for #{m['anchor']} in {m['file']}"
        lines = lines[:-1]
    assert len(lines) <= 3, f"{len(lines)} lines before the link (at most 3)"


def test_no_sphinx_roles_in_crawler() -> None:
    found = [
        f"{p.relative_to(ROOT)}:{n}"
        for p in MODULES
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if SPHINX_ROLE.search(line)
    ]
    assert not found, found


@pytest.mark.parametrize("page", INTERNALS, ids=[p.name for p in INTERNALS])
def test_internals_links_resolve(page: Path) -> None:
    text = page.read_text()
    text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)  # code blocks hold no links
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    assert links or page.name != "README.md"
    for link in links:
        if re.match(r"[a-z]+://", link):
            continue
        file, _, frag = link.partition("#")
        target = (page.parent / file).resolve() if file else page
        assert target.exists(), f"{page.name}: {link} names a missing file"
        if frag:
            assert frag in anchors(target), f"{page.name}: no heading for {link}"


def test_every_internals_page_is_indexed() -> None:
    index = (ROOT / "docs" / "internals" / "README.md").read_text()
    assert len(INTERNALS) >= 10
    for page in INTERNALS:
        assert page.name == "README.md" or f"]({page.name})" in index, page.name
