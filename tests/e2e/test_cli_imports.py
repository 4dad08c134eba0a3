"""Start-up hygiene: a command imports only what it uses (``python -X importtime`` of the real
CLI in a subprocess). The heavy imports are named in docs/performance.md (CLI start-up)."""

from __future__ import annotations

import subprocess
import sys

from crawler.catalog import Catalog
from tests.cli import ROOT, clean_env


def _imported(args: list[str], env: dict[str, str]) -> tuple[int, set[str]]:
    """(exit code, modules imported) of ``quants ARGS``."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "crawler", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    names = {
        line.rsplit("|", 1)[1].strip()
        for line in proc.stderr.splitlines()
        if line.startswith("import time:") and line.count("|") == 2
    }
    assert "crawler" in names, proc.stderr[-2000:]  # importtime's lines were read
    return proc.returncode, names


def test_root_help_imports_no_parser_database_or_logging(tmp_path):
    code, names = _imported(["--help"], clean_env(tmp_path))
    assert code == 0
    for heavy in ("typer", "click", "pydantic", "sqlalchemy", "logging", "typing"):
        assert heavy not in names, heavy


def test_search_imports_neither_sqlalchemy_nor_the_column_functions(tmp_path, sqlite_url):
    with Catalog.open(sqlite_url):  # an empty catalog at the current schema
        pass
    code, names = _imported(
        ["search", "--vram", "24", "--offline", "--db", sqlite_url], clean_env(tmp_path)
    )
    assert code == 3  # nothing fits an empty catalog: the whole search path ran
    assert "crawler.library.search" in names and "crawler.ranking.rank" in names
    for heavy in ("sqlalchemy", "crawler.ranking.columns", "crawler.profile.build", "pyarrow"):
        assert heavy not in names, heavy
    # Its options are parsed without typer (crawler.cli._argv): neither typer nor pydantic.
    assert not {n for n in names if n.split(".")[0] in ("typer", "click", "pydantic")}, names


def test_search_help_and_a_refused_option_still_go_through_typer(tmp_path, sqlite_url):
    env = clean_env(tmp_path)
    code, names = _imported(["search", "--help"], env)
    assert code == 0 and "typer" in names
    code, names = _imported(["search", "--vram", "24x", "--db", sqlite_url], env)
    assert code == 2 and "typer" in names
