"""Architecture rules, read from the code's own imports (ast; function-level imports included).

* pure modules and packages import no I/O library and no I/O part of quants;
* nothing below the CLI imports ``crawler.cli`` (the CLI passes what the library needs in);
* the catalog computes no quality, speed, estimate or ranking: of those it may import only the
  ranking's types, SQL builders and search-column functions, and the memory model's types;
* no import circle anywhere in ``crawler/``;
* the public API is sorted.
"""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import pytest

import crawler

PKG = Path(crawler.__file__).resolve().parent
PURE = [
    "gguf",
    "gguf_model",
    "gguf_fetch",
    "sibling",
    "tokenizer_template",
    "header_read",
    "ggml",
    "profile",
    "precision",
    "claims",
    "labels",
    "fit",
    "ranking",
    "quality",
    "speed",
    "grouping",
    "analysis",
    "group_stats",
    "diff",
    "cron",
    "query",
    "type_claims",
    "llamalog",
    "checklog",
    "charts",
    "snapshot/manifest",
    "units",
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


def _module_name(path: Path) -> str:
    parts = path.relative_to(PKG.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(PKG.rglob("*.py"))}


def _imported_modules(path: Path) -> set[str]:
    """The quants modules ``path`` imports (``from pkg import mod`` counts ``pkg.mod``)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name in MODULES)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module in MODULES:
                found.add(node.module)
            found.update(
                f"{node.module}.{a.name}"
                for a in node.names
                if f"{node.module}.{a.name}" in MODULES
            )
    return found


def _import_graph() -> dict[str, set[str]]:
    return {name: _imported_modules(path) - {name} for name, path in MODULES.items()}


def test_the_graph_reads_the_tree():
    graph = _import_graph()
    assert len(graph) > 50
    assert "crawler.ranking.model" in graph["crawler.catalog.candidates"]
    assert "crawler.cli.search_cmd" in graph["crawler.cli.watch_cmd"]


def test_no_import_circle_in_crawler():
    graph = _import_graph()
    try:
        graph_order = tuple(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as exc:
        pytest.fail(f"import circle: {' -> '.join(exc.args[1])}")
    assert len(graph_order) >= len(graph)


def test_nothing_below_the_cli_imports_it():
    upward = {
        name: sorted(m for m in imports if m == "crawler.cli" or m.startswith("crawler.cli."))
        for name, imports in _import_graph().items()
        if not (name == "crawler.cli" or name.startswith("crawler.cli."))
        and name != "crawler.__main__"
    }
    assert {k: v for k, v in upward.items() if v} == {}


# What the catalog may take from the modelling side: types, SQL builders and the search columns.
CATALOG_MAY_USE = {
    "crawler.fit",  # MemoryCoefficients (the type; its package face re-exports it)
    "crawler.ranking",
    "crawler.ranking.model",
    "crawler.ranking.bounds",
    "crawler.ranking.columns",
}
MODELLING = (
    "crawler.fit",
    "crawler.ranking",
    "crawler.quality",
    "crawler.speed",
    "crawler.profile",
)


def test_catalog_computes_no_quality_speed_or_ranking():
    bad = {}
    for name, imports in _import_graph().items():
        if not name.startswith("crawler.catalog"):
            continue
        found = sorted(
            m
            for m in imports
            if any(m == p or m.startswith(p + ".") for p in MODELLING) and m not in CATALOG_MAY_USE
        )
        if found:
            bad[name] = found
    assert bad == {}


def test_pure_packages_are_checked_whole():
    # A package in PURE is checked file by file (rglob), so a new module in it is covered.
    assert len(_module_files("ranking")) >= 6
    assert all(p.suffix == ".py" for p in _module_files("ranking"))


def test_web_app_is_a_layer_beside_the_cli():
    """crawler.web calls the library, never the CLI; only ``quants serve`` imports it."""
    for path in sorted((PKG / "web").rglob("*.py")):
        bad = {imp for imp in _imports(path) if imp.startswith("crawler.cli")}
        assert not bad, f"{path.name} (web) imports {sorted(bad)}"
    users = {
        path.relative_to(PKG).as_posix()
        for path in PKG.rglob("*.py")
        if not path.is_relative_to(PKG / "web")
        and any(imp.startswith("crawler.web") for imp in _imports(path))
    }
    assert users == {"cli/serve_cmd.py"}


def test_snapshot_library_never_imports_the_cli():
    for path in sorted((PKG / "snapshot").rglob("*.py")):
        bad = {i for i in _imports(path) if i == "crawler.cli" or i.startswith("crawler.cli.")}
        assert not bad, f"{path.name} imports {sorted(bad)}"


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
