"""Architecture rules, read from the code's own imports (ast; function-level imports included).

* every module of crawler/ belongs to one layer of LAYERS, and imports only what its layer's
  allow-lists name: quants layers (or single modules) and libraries beyond the standard library's
  pure part (I/O modules of the standard library count as libraries here);
* nothing below the CLI imports crawler.cli, and only ``quants serve`` imports the web app;
* no import circle anywhere in crawler/;
* the public API is sorted.
"""

from __future__ import annotations

import ast
import graphlib
import sys
from pathlib import Path

import pytest

import crawler

PKG = Path(crawler.__file__).resolve().parent

# The layers, bottom first: (name, its modules (a package or a module), the quants layers or
# single modules it may import, the libraries it may import). Allow-lists, not deny-lists: a new
# import across layers or of a library fails here until the table says it belongs.
LAYERS: tuple[tuple[str, tuple[str, ...], tuple[str, ...], frozenset[str]], ...] = (
    (
        "base",
        ("crawler", "crawler.base", "crawler.schemas"),
        ("base",),
        frozenset({"platformdirs"}),
    ),
    ("gguf", ("crawler.gguf",), ("base",), frozenset()),
    ("fit", ("crawler.fit",), ("base", "gguf"), frozenset({"rapidfuzz"})),
    ("profile", ("crawler.profile",), ("base", "gguf", "fit"), frozenset({"gguf"})),
    ("ranking", ("crawler.ranking",), ("base", "fit", "profile"), frozenset({"rapidfuzz", "yaml"})),
    ("charts", ("crawler.charts",), ("base", "fit"), frozenset()),
    (
        "hub",
        ("crawler.hub",),
        ("base",),
        frozenset({"httpx2", "huggingface_hub", "logging", "urllib"}),
    ),
    (
        # The catalog stores and reads: of the modelling side it takes types, the ranking's SQL
        # builders (bounds, copies) and query matcher, and the change wording; it computes no
        # column itself.
        # (A layer may always import its own modules.)
        "catalog",
        ("crawler.catalog",),
        (
            "base",
            "gguf",
            "crawler.fit",
            "crawler.profile.analysis",
            "crawler.profile.diff",
            "crawler.profile.grouping",
            "crawler.profile.groups",
            "crawler.profile.measured",
            "crawler.profile.mtp_grade",
            "crawler.profile.quant_files",
            "crawler.ranking.bounds",
            "crawler.ranking.copies",
            "crawler.ranking.model",
            "crawler.ranking.query",
            "crawler.ranking.speed_bound",
        ),
        frozenset({"sqlalchemy", "alembic", "psycopg", "sqlite3", "logging", "socket", "urllib"}),
    ),
    (
        "snapshot",
        ("crawler.snapshot",),
        # The crawl's own models and file naming check an import's rows.
        ("base", "catalog", "crawler.fit", "crawler.profile.quant_files"),
        frozenset({"pyarrow", "huggingface_hub", "httpx2", "sqlalchemy"}),
    ),
    (
        # The library calls behind commands.
        "library",
        ("crawler.library",),
        ("base", "gguf", "fit", "profile", "ranking", "hub", "catalog"),
        frozenset({"urllib"}),
    ),
    (
        # The watches run their saved searches through the library's search.
        "crawl",
        ("crawler.crawl",),
        (
            "base",
            "gguf",
            "profile",
            "ranking",
            "hub",
            "catalog",
            "library",
        ),
        frozenset({"apscheduler", "tzlocal", "logging", "socket", "urllib"}),
    ),
    (
        # The stable Python API over the library calls (the commands and the MCP server call it).
        "api",
        ("crawler.api",),
        ("base", "gguf", "fit", "profile", "ranking", "catalog", "library", "crawl"),
        frozenset(),
    ),
    (
        "mcp",
        ("crawler.mcp",),
        ("base", "profile", "library", "api"),
        frozenset({"mcp", "pydantic"}),
    ),
    (
        "web",
        ("crawler.web",),
        ("base", "fit", "profile", "ranking", "charts", "catalog", "library"),
        frozenset({"starlette", "jinja2", "logging", "uvicorn", "socket"}),
    ),
    (
        "cli",
        ("crawler.cli", "crawler.__main__"),
        (
            "base",
            "gguf",
            "fit",
            "profile",
            "ranking",
            "charts",
            "hub",
            "catalog",
            "snapshot",
            "library",
            "crawl",
            "api",
            "mcp",
            "web",
        ),
        frozenset({"typer", "uvicorn", "huggingface_hub", "resvg_py", "socket", "yaml"}),
    ),
)
# Standard-library modules that do I/O: a layer names them like any library it may use.
IO_STDLIB = frozenset({"sqlite3", "socket", "urllib", "http", "ssl", "subprocess", "logging"})
LAYER_NAMES_IN_ORDER = [name for name, *_ in LAYERS]
LAYER_NAMES = set(LAYER_NAMES_IN_ORDER)


def _owns(prefix: str, module: str) -> bool:
    return module == prefix or (prefix != "crawler" and module.startswith(prefix + "."))


def _layer_of(module: str) -> str:
    """The layer a crawler module belongs to (the longest prefix that names it)."""
    best = max(
        ((len(p), name) for name, prefixes, *_ in LAYERS for p in prefixes if _owns(p, module)),
        default=None,
    )
    assert best is not None, f"{module} belongs to no layer of LAYERS"
    return best[1]


def _module_name(path: Path) -> str:
    parts = path.relative_to(PKG.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(PKG.rglob("*.py"))}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text("utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_every_name_in_the_table_exists():
    for name, prefixes, allowed, libraries in LAYERS:
        for prefix in prefixes:
            assert any(_owns(prefix, m) for m in MODULES), f"{name}: no module {prefix}"
        for target in allowed:
            assert target in LAYER_NAMES or target in MODULES, f"{name} allows unknown {target}"
        for lib in libraries:
            assert lib in IO_STDLIB or lib not in sys.stdlib_module_names, (name, lib)


@pytest.mark.parametrize("layer", [name for name, *_ in LAYERS])
def test_each_layer_imports_only_what_its_allow_lists_name(layer):
    _, _prefixes, allowed, libraries = next(row for row in LAYERS if row[0] == layer)
    bad: dict[str, list[str]] = {}
    for module, path in MODULES.items():
        if _layer_of(module) != layer:
            continue
        for imp in sorted(_imports(path)):
            top = imp.split(".")[0]
            if top == "crawler":
                target = _quants_module(imp)
                ok = _layer_of(target) in (layer, *allowed) or any(
                    _owns(a, target) for a in allowed if a not in LAYER_NAMES
                )
            elif top == "__future__" or (top in sys.stdlib_module_names and top not in IO_STDLIB):
                ok = True
            else:
                ok = top in libraries
            if not ok:
                bad.setdefault(module, []).append(imp)
    assert bad == {}


def _may_import(layer: str, allowed: tuple[str, ...]) -> str:
    """The "May import:" line a layer package's docstring carries, from its allow-list."""
    below = LAYER_NAMES_IN_ORDER[: LAYER_NAMES_IN_ORDER.index(layer)]
    names: list[str] = []
    for target in allowed:
        short = target if target in LAYER_NAMES else target.split(".")[1]
        part = target not in LAYER_NAMES and target.count(".") >= 2
        if not any(n.split(" ")[0] == short for n in names):
            names.append(short + (" (part)" if part else ""))
    if names == below and len(below) > 6:
        return "May import: every layer below."
    return f"May import: {', '.join(names)}."


@pytest.mark.parametrize("layer", [name for name, *_ in LAYERS])
def test_each_layer_package_says_what_it_may_import(layer):
    _, prefixes, allowed, _libraries = next(row for row in LAYERS if row[0] == layer)
    for prefix in prefixes:
        init = PKG.parent / prefix.replace(".", "/") / "__init__.py"
        if prefix == "crawler" or not init.exists():
            continue
        doc = ast.get_docstring(ast.parse(init.read_text("utf-8"))) or ""
        assert _may_import(layer, allowed) in doc.splitlines(), (prefix, doc)


def _quants_module(name: str) -> str:
    """The crawler module an import names (``crawler.fit.MemoryCoefficients`` is crawler.fit)."""
    while name not in MODULES and "." in name:
        name = name.rsplit(".", 1)[0]
    return name


def test_public_api_is_sorted_and_importable():
    assert list(crawler.__all__) == sorted(crawler.__all__)
    for name in crawler.__all__:
        assert hasattr(crawler, name), name


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
