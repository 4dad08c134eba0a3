"""Architecture rules: pure modules import no I/O libraries; the public API is sorted."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import crawler

PKG = Path(crawler.__file__).resolve().parent
PURE = [
    "gguf",
    "ggml",
    "profile",
    "labels",
    "fit",
    "rank",
    "quality",
    "speed",
    "grouping",
    "analysis",
    "diff",
    "cron",
    "launch",
    "query",
]
FORBIDDEN = {
    "httpx",
    "httpx2",
    "requests",
    "urllib",
    "http",
    "socket",
    "sqlalchemy",
    "alembic",
    "typer",
    "click",
    "rich",
    "huggingface_hub",
    "apscheduler",
    "logging",
    "crawler.config",
    "crawler.catalog",
    "crawler.hub",
    "crawler.cli",
    "crawler.scan",
    "crawler.source",
}


def _module_files(name: str) -> list[Path]:
    single = PKG / f"{name}.py"
    package = PKG / name
    if single.is_file():
        return [single]
    if package.is_dir():
        return sorted(package.rglob("*.py"))
    return []


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text("utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


@pytest.mark.parametrize("name", PURE)
def test_pure_modules_do_no_io(name):
    files = _module_files(name)
    if not files:
        pytest.skip(f"crawler.{name} does not exist")
    for path in files:
        bad = {
            imp
            for imp in _imports(path)
            if any(imp == f or imp.startswith(f + ".") for f in FORBIDDEN)
        }
        assert not bad, f"{path.name} (pure) imports {sorted(bad)}"


def test_public_api_is_sorted_and_importable():
    assert list(crawler.__all__) == sorted(crawler.__all__)
    for name in crawler.__all__:
        assert hasattr(crawler, name), name


def test_the_memory_model_depends_on_no_ranking_or_search():
    """crawler.fit (estimate, offload, tiers, devices, vision, apple) sits under ranking: it
    never imports it back (no import circle)."""
    for path in _module_files("fit"):
        bad = {
            imp
            for imp in _imports(path)
            if imp.startswith(
                ("crawler.rank", "crawler.search", "crawler.ranking", "crawler.speed")
            )
        }
        assert not bad, f"{path.name} imports {sorted(bad)}"
