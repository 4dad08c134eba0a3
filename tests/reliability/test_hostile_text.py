"""Hostile text from GGUF headers and the Hub is printed literally and stored intact.

Terminal escapes (CSI, OSC title, BEL), rich markup (``[bold]``), bidi overrides, C0/C1 controls
and NUL, invalid UTF-8, newlines, a 1 MB metadata string and path-like file names travel through
``quants inspect`` (a local file whose own name is hostile, and not UTF-8), and through ``quants
crawl`` of an emulated repo, then ``quants sql`` / ``search`` / ``compare``: every output is
asserted exactly, no output carries a control character, and the catalog holds the text as the
header and the Hub gave it (invalid UTF-8 as U+FFFD: the parser decodes with ``replace``).
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import zlib
from pathlib import Path
from typing import Any

import pytest

import tests.synth as synth
from tests.cli import clean_env, run_quants
from tests.hub_emulator import HubEmulator
from tests.hub_emulator.state import Blob
from tests.schemas import checked

ROOT = Path(__file__).resolve().parents[2]
REPO = "evil/Hostile-Text-GGUF"
# 16 bytes: CSI clear screen, rich markup, RLO (U+202E), an invalid byte, NUL, a lone C1 CSI byte.
ARCH_BYTES = b"\x1b[2J[bold]\xe2\x80\xae\xff\x00\x9b"
ARCH = "\x1b[2J[bold]\u202e\ufffd\x00\ufffd" + "_" * 24  # as decoded and padded to 40 bytes
# Same length as "output_norm.weight" (18 bytes), so it can replace it in the tensor table.
TENSOR_BYTES = b"\x1b[31m[i]\xff\xfe\x07.weight"
TENSOR = "\x1b[31m[i]\ufffd\ufffd\x07.weight"
HUGE = "N" * 1_000_000
NAME_ESC = "\x1b]0;owned\x07[bold]x[/bold]\u202eevil-Q4_K_M.gguf"
NAME_NL = "new\nline\r-Q5_K_M.gguf"
NAME_PCT = "..%2F..%2Fetc%2Fpasswd-Q4_0.gguf"
NAME_BROKEN = "Broken \x1b[31m[red]-Q6_K.gguf"
NAME_SHELL = "x;rm -rf ~ $(id)`id`-Q4_K_M.gguf"
TAG = "x\x1b[31m[bold]\u202e"
# Anything a terminal acts on: C0 but tab/newline, DEL, C1, bidi controls.
CONTROLS = {chr(c) for c in (*range(0, 9), *range(11, 32), *range(0x7F, 0xA0))} | {
    "\u202a",
    "\u202b",
    "\u202c",
    "\u202d",
    "\u202e",
    "\u2066",
    "\u2067",
    "\u2068",
    "\u2069",
}
_PLACEHOLDER = "A" * 40


def write_hostile_gguf(path: Path, *, arch: bytes | None, tensor: bool, huge: bool) -> None:
    """A tiny llama GGUF whose header is patched in place: architecture bytes, a tensor name."""
    meta: dict[str, Any] = {"general.quantized_by": "\x1b[5m[blink]\u202e"}
    if arch is not None:
        meta["general.architecture"] = _PLACEHOLDER
    if huge:
        meta["general.name"] = HUGE
    lay = synth.layout(synth.preset("llama", "tiny"), synth.q4_k_m_like(), metadata=meta)
    head = lay.header
    if arch is not None:
        assert head.count(_PLACEHOLDER.encode()) == 1
        head = head.replace(_PLACEHOLDER.encode(), arch.ljust(40, b"_"))
    if tensor:
        assert head.count(b"output_norm.weight") == 1
        head = head.replace(b"output_norm.weight", TENSOR_BYTES)
    with path.open("wb") as fh:
        fh.write(head)
        fh.truncate(lay.size)


def quants(*args: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    return run_quants(*args, env=clean_env(tmp), timeout=120)


def assert_inert(*texts: str) -> None:
    """No character a terminal would act on (tabs and newlines aside)."""
    for text in texts:
        bad = sorted({c for c in text if c in CONTROLS or "\ud800" <= c <= "\udfff"})
        assert not bad, f"raw control characters in output: {bad!r}"


def hostile_hub(files: Path, arch: bytes) -> HubEmulator:
    """An emulator (not started) serving REPO: hostile file names, metadata, tags, a broken file."""
    files.mkdir(parents=True, exist_ok=True)
    write_hostile_gguf(files / "esc.gguf", arch=None, tensor=True, huge=True)
    write_hostile_gguf(files / "arch.gguf", arch=arch, tensor=False, huge=False)
    write_hostile_gguf(files / "plain.gguf", arch=None, tensor=False, huge=False)
    emulator = HubEmulator()
    emulator.state.create_repo(
        REPO,
        {
            NAME_ESC: Blob.from_file(files / "esc.gguf"),
            "arch-Q8_0.gguf": Blob.from_file(files / "arch.gguf"),
            NAME_NL: Blob.from_file(files / "plain.gguf"),
            NAME_PCT: Blob.from_file(files / "plain.gguf"),
            NAME_SHELL: Blob.from_file(files / "plain.gguf"),
            NAME_BROKEN: Blob.from_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 64, lfs=True),
        },
        tags=["gguf", TAG],
        card_data={"base_model": "meta-llama/Llama-3.1-8B"},
        library_name="gguf",
    )
    return emulator


@pytest.fixture(scope="module")
def crawled(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("hostile")
    db = f"sqlite:///{tmp / 'catalog.sqlite'}"
    with hostile_hub(tmp / "files", ARCH_BYTES) as emulator:
        json_run = quants(
            "crawl", "--endpoint", emulator.endpoint, "--db", db, "--all", "--json", tmp=tmp
        )
    return {"tmp": tmp, "db": db, "json": json_run}


# What the CLI shows for each hostile string (written out by hand: C0/C1/bidi as escapes,
# newline as a space, U+FFFD as itself).
SHOWN_ESC = r"\x1b]0;owned\x07[bold]x[/bold]\u202eevil-Q4_K_M.gguf"
SHOWN_NL = r"new line\r-Q5_K_M.gguf"
SHOWN_ARCH = r"\x1b[2J[bold]\u202e" + "\ufffd" + r"\x00" + "\ufffd" + "_" * 24
SHOWN_TENSOR = r"\x1b[31m[i]" + "\ufffd\ufffd" + r"\x07.weight"


def test_inspect_prints_a_hostile_local_file_literally(tmp_path: Path) -> None:
    # The file's own name is hostile and not UTF-8 (byte 0xff): os.fsdecode gives U+DCFF.
    path = Path(os.fsdecode(bytes(tmp_path) + b"/\x1b]0;owned\x07[bold]\xe2\x80\xaeevil\xff.gguf"))
    write_hostile_gguf(path, arch=ARCH_BYTES, tensor=True, huge=True)
    text = quants("inspect", str(path), "--tensors", tmp=tmp_path)
    assert text.returncode == 0, text.stderr
    assert_inert(text.stdout, text.stderr)
    lines = text.stdout.splitlines()
    shown_path = f"{tmp_path}/" + r"\x1b]0;owned\x07[bold]\u202eevil\udcff.gguf"
    # Claims ("! ...") and a blank line come first, then the file's facts.
    i = next(k for k, line in enumerate(lines) if line.strip() and not line.startswith("! "))
    assert lines[i] == "source".ljust(18) + "  " + shown_path
    assert lines[i + 2] == "architecture".ljust(18) + "  " + SHOWN_ARCH
    tensor_rows = [line for line in lines if line.startswith(SHOWN_TENSOR + " ")]
    assert len(tensor_rows) == 1 and tensor_rows[0].split()[1:3] == ["norm", "F32"]
    as_json = quants("inspect", str(path), "--json", "--tensors", tmp=tmp_path)
    assert as_json.returncode == 0, as_json.stderr
    assert as_json.stdout.isascii()  # every non-ASCII character escaped
    assert r'"architecture": "\u001b[2J[bold]\u202e\ufffd\u0000\ufffd' in as_json.stdout
    doc = checked("inspect", as_json.stdout)
    assert doc["source"] == str(path) and doc["architecture"] == ARCH
    assert TENSOR in {t["name"] for t in doc["tensors"]}


def test_crawl_output_carries_no_hub_text(crawled: dict[str, Any]) -> None:
    run = crawled["json"]
    assert run.returncode == 0, run.stderr
    assert_inert(run.stdout, run.stderr)
    summary = checked("crawl", crawled["json"].stdout)
    assert summary["quants_analysed"] == 5 and summary["errors"] == 1


def test_catalog_stores_hostile_text_intact(crawled: dict[str, Any]) -> None:
    conn = sqlite3.connect(crawled["db"].removeprefix("sqlite:///"))
    try:
        quants_rows = set(
            conn.execute("SELECT path, architecture FROM quants WHERE analysed_at IS NOT NULL")
        )
        (tags,) = conn.execute("SELECT tags FROM repos").fetchone()
        errors = conn.execute("SELECT DISTINCT path, kind FROM scan_errors").fetchall()
        (blob,) = conn.execute(
            "SELECT t.data FROM tensor_tables t JOIN quants q ON q.id = t.quant_id"
            " WHERE q.path = ?",
            (NAME_ESC,),
        ).fetchone()
    finally:
        conn.close()
    assert quants_rows == {
        (NAME_ESC, "llama"),
        ("arch-Q8_0.gguf", ARCH),
        (NAME_NL, "llama"),
        (NAME_PCT, "llama"),
        (NAME_SHELL, "llama"),
    }
    assert TAG in json.loads(tags)
    assert errors == [(NAME_BROKEN, "malformed_gguf")]
    shard = json.loads(zlib.decompress(blob))["shards"][0]
    assert shard["metadata"]["general.name"] == HUGE
    assert shard["metadata"]["general.quantized_by"] == "\x1b[5m[blink]\u202e"
    assert TENSOR in [t[0] for t in shard["tensors"]]


def test_sql_prints_hostile_cells_literally(crawled: dict[str, Any]) -> None:
    tmp, db = crawled["tmp"], crawled["db"]
    query = "SELECT path, architecture FROM v_quants ORDER BY path"
    table = quants("sql", query, "--db", db, tmp=tmp)
    assert table.returncode == 0, table.stderr
    assert_inert(table.stdout, table.stderr)
    rows = [
        (SHOWN_ESC, "llama"),
        (NAME_PCT, "llama"),
        ("arch-Q8_0.gguf", SHOWN_ARCH),
        (SHOWN_NL, "llama"),
        (NAME_SHELL, "llama"),
    ]
    w1 = max(len(r[0]) for r in rows)
    w2 = max(len(r[1]) for r in rows)
    expected = [
        "path".ljust(w1) + "  architecture",
        "-" * w1 + "  " + "-" * w2,
        *[(a.ljust(w1) + "  " + b).rstrip() for a, b in rows],
    ]
    assert table.stdout.splitlines() == expected
    assert table.stderr == "(5 rows)\n"
    as_json = quants("sql", query, "--db", db, "--json", tmp=tmp)
    assert as_json.stdout.isascii()
    assert json.loads(as_json.stdout) == [
        {"path": NAME_ESC, "architecture": "llama"},
        {"path": NAME_PCT, "architecture": "llama"},
        {"path": "arch-Q8_0.gguf", "architecture": ARCH},
        {"path": NAME_NL, "architecture": "llama"},
        {"path": NAME_SHELL, "architecture": "llama"},
    ]
    assert r'"path": "\u001b]0;owned\u0007[bold]x[/bold]\u202eevil-Q4_K_M.gguf"' in as_json.stdout
    errors = quants("sql", "SELECT DISTINCT path FROM scan_errors", "--db", db, tmp=tmp)
    assert errors.stdout.splitlines()[2] == r"Broken \x1b[31m[red]-Q6_K.gguf"


def test_search_and_compare_print_hostile_names_literally(crawled: dict[str, Any]) -> None:
    tmp, db = crawled["tmp"], crawled["db"]
    args = ("--vram", "24", "--ctx", "4096", "--db", db, "--limit", "50")
    text = quants("search", *args, tmp=tmp)
    assert text.returncode == 0, text.stderr
    assert_inert(text.stdout, text.stderr)
    as_json = quants("search", *args, "--json", tmp=tmp)
    assert as_json.stdout.isascii()
    results = {r["path"]: r for r in checked("search", as_json.stdout)["results"]}
    # The hostile arch has no memory rules: not a candidate. Everything else is, path intact.
    assert set(results) == {NAME_ESC, NAME_NL, NAME_PCT, NAME_SHELL}
    # Two files share the Q4_K_M label, so the command names each file: shell-quoted.
    shell_cmd = results[NAME_SHELL]["command"]
    assert " -hff 'x;rm -rf ~ $(id)`id`-Q4_K_M.gguf' " in shell_cmd
    # A name with control characters gets no command at all: no quoting makes ESC or a bidi
    # override safe to paste (crawler/ranking/shell.py); the row itself is still listed.
    assert results[NAME_ESC]["command"] is None
    assert "(no command: a name holds a character no shell line can carry)" in text.stdout
    compare = quants("compare", "Llama-3.1-8B", "--db", db, tmp=tmp)
    assert compare.returncode == 0, compare.stderr
    assert_inert(compare.stdout, compare.stderr)


@pytest.mark.postgres
def test_postgres_stores_hostile_text_intact_but_nul(pg_url: str, tmp_path: Path) -> None:
    # PostgreSQL text cannot hold NUL: the catalog stores it as U+FFFD there (docs/reliability.md).
    with hostile_hub(tmp_path / "files", ARCH_BYTES) as emulator:
        run = quants("crawl", "--endpoint", emulator.endpoint, "--db", pg_url, "--all",
                     "--json", tmp=tmp_path)  # fmt: skip
    assert run.returncode == 0, run.stderr
    from sqlalchemy import create_engine, text

    engine = create_engine(pg_url)
    try:
        with engine.connect() as conn:
            rows = {
                (r[0], r[1])
                for r in conn.execute(
                    text("SELECT path, architecture FROM quants WHERE analysed_at IS NOT NULL")
                )
            }
            tags = conn.execute(text("SELECT tags FROM repos")).scalar_one()
            errors = conn.execute(text("SELECT DISTINCT path FROM scan_errors")).scalars().all()
            blob = conn.execute(
                text(
                    "SELECT t.data FROM tensor_tables t JOIN quants q ON q.id = t.quant_id"
                    " WHERE q.path = :p"
                ),
                {"p": NAME_ESC},
            ).scalar_one()
    finally:
        engine.dispose()
    assert rows == {
        (NAME_ESC, "llama"),
        ("arch-Q8_0.gguf", ARCH.replace("\x00", "\ufffd")),
        (NAME_NL, "llama"),
        (NAME_PCT, "llama"),
        (NAME_SHELL, "llama"),
    }
    assert TAG in tags
    assert errors == [NAME_BROKEN]
    shard = json.loads(zlib.decompress(blob))["shards"][0]
    assert shard["metadata"]["general.name"] == HUGE
    assert TENSOR in [t[0] for t in shard["tensors"]]
