"""The real ``quants`` CLI in a subprocess: help, db upgrade, read-only sql, error handling."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli import clean_env, run_quants

ROOT = Path(__file__).resolve().parents[2]
# Data directory that does not exist: these commands must not need one.
NOWHERE = Path("/nonexistent-quants")


def quants(*args: str, db: str | None = None, env: dict[str, str] | None = None):
    extra = {"QUANTS_DB": db} if db else {}
    return run_quants(*args, env=clean_env(NOWHERE, **extra, **(env or {})), timeout=120)


def test_help_lists_the_commands():
    out = quants("--help")
    assert out.returncode == 0
    for command in ("db", "sql"):
        assert f"  {command} " in out.stdout


def test_db_upgrade_creates_schema(catalog_url):
    out = quants("db", "upgrade", "--db", catalog_url)
    assert out.returncode == 0, out.stderr
    assert "at revision" in out.stdout
    current = quants("db", "current", "--db", catalog_url)
    lines = current.stdout.splitlines()
    assert lines[0].split()[-1] == lines[1].split()[-1] != "empty"


def made(url: str) -> str:
    """``url`` with an empty catalog made (`quants sql` reads; it never creates one)."""
    assert quants("db", "upgrade", db=url).returncode == 0
    return url


def test_sql_on_empty_catalog_and_refused_write(catalog_url):
    made(catalog_url)
    out = quants("sql", "select * from v_quants", "--json", db=catalog_url)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == []
    out = quants("sql", "delete from repos", db=catalog_url)
    assert out.returncode == 1
    assert out.stdout == ""
    lines = out.stderr.splitlines()
    assert lines[0].startswith("error: refused: quants sql only reads")
    assert lines[1].startswith("hint: ")
    assert "Traceback" not in out.stderr


def test_sql_csv_and_params(sqlite_url):
    out = quants(
        "sql", "select :a as a, :b as b", "-p", "a=3", "-p", "b=x", "--csv", db=made(sqlite_url)
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout == "a,b\n3,x\n"


def test_sql_list_shows_every_shipped_query():
    out = quants("sql", "--list")
    names = {line.split()[0] for line in out.stdout.splitlines()}
    assert names == {p.stem for p in (ROOT / "queries").glob("*.sql")}


def test_sql_table_escapes_terminal_control_characters(sqlite_url):
    out = quants("sql", "select char(27) || '[31mred' as x", db=made(sqlite_url))
    assert out.returncode == 0
    assert "\x1b" not in out.stdout
    assert "\\x1b[31mred" in out.stdout


@pytest.mark.parametrize(
    ("args", "code", "needle"),
    [
        (("sql",), 2, "give a query"),
        (("sql", "select 1", "--json", "--csv"), 2, "exclusive"),
        (("sql", "nope.sql"), 2, "no shipped query or file"),
        (("sql", "select * from missing_table"), 1, "query failed"),
        (("sql", "mtp_downgraded", "-p", "oops"), 1, "NAME=VALUE"),
        (("no-such-command",), 2, "No such command"),
    ],
)
def test_bad_arguments_get_one_line_errors(sqlite_url, args, code, needle):
    out = quants(*args, db=made(sqlite_url))
    assert out.returncode == code
    assert needle in out.stderr
    assert "Traceback" not in out.stderr


def test_unreachable_database_is_a_clean_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    out = quants("db", "upgrade", db=f"sqlite:///{blocker}/sub/c.db")
    assert out.returncode == 1
    assert out.stderr.startswith("error: cannot open catalog")
    # `quants sql` never creates a catalog: a missing one is named as such.
    out = quants("sql", "select 1", db=f"sqlite:///{blocker}/sub/c.db")
    assert out.returncode == 1
    assert out.stderr.startswith("error: no catalog at")
    assert "Traceback" not in out.stderr


def test_debug_shows_traceback(sqlite_url):
    out = quants("sql", "select * from missing_table", db=sqlite_url, env={"QUANTS_DEBUG": "1"})
    assert out.returncode == 1
    assert "Traceback" in out.stderr


def test_every_command_has_help_and_is_in_the_readme():
    readme = (ROOT / "README.md").read_text("utf-8")
    out = quants("--help").stdout
    listed = out.split("Commands:", 1)[1].splitlines()
    commands = [line.split()[0] for line in listed if line.startswith("  ") and line.split()]
    assert len(commands) >= 12
    for command in commands:
        assert f"`quants {command}" in readme, f"README does not document `quants {command}`"
        help_out = quants(command, "--help")
        assert help_out.returncode == 0
        assert len(help_out.stdout.splitlines()) > 3


def test_every_relative_link_in_the_docs_points_at_a_file():
    import re

    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    assert len(pages) >= 8
    checked = 0
    for page in pages:
        text = page.read_text("utf-8")
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                continue  # an absolute URL, or an anchor in the same page
            path = target.split("#", 1)[0]
            assert (page.parent / path).exists(), f"{page.name}: broken link {target}"
            checked += 1
    assert checked >= 9  # the README's table of docs pages at least


def test_the_fast_root_help_lists_every_registered_command():
    # `quants --help` prints crawler.cli.COMMANDS without importing typer or any command; the
    # table must name every command typer registers, with the module that registers it.
    import typer.main

    from crawler import cli

    group = typer.main.get_command(cli.register(None))
    registered = group.commands  # type: ignore[attr-defined]
    assert {name for name, _, _ in cli.COMMANDS} == set(registered)
    for name, module, summary in cli.COMMANDS:
        command = registered[name]
        owner = (command.callback.__module__ if command.callback else "") or ""
        if name in ("db", "watch"):  # groups: their module defines the sub-app
            owner = f"crawler.cli.{module}"
        assert owner == f"crawler.cli.{module}", name
        words = " ".join((command.help or "").split()[:3]).rstrip(":,.")
        assert summary.startswith(words), (name, summary, words)
    assert all(f"  {name} " in cli.root_help() for name in registered)
