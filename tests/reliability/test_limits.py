"""The documented limits (README "Environment variables") hold through the real CLI.

``QUANTS_MAX_HEADER_BYTES`` (header cap) and ``QUANTS_MAX_REQUESTS`` / ``QUANTS_MAX_BYTES``
(per-crawl budgets) each stop what they should, are recorded in the catalog, and never abort the
pass with a traceback; a bad value is a one-line configuration error. ``QUANTS_TIMEOUT`` is checked
in-process (real timeouts, fake retry clock) by test_faults_world.py's ``timeout`` kind: through
the CLI its retries would sleep for real.
"""

from __future__ import annotations

import sqlite3
import subprocess
from pathlib import Path

import pytest

from tests.cli import clean_env, run_quants
from tests.hub_emulator import HubEmulator
from tests.schemas import checked

ROOT = Path(__file__).resolve().parents[2]
AUTHOR = "lmstudio-community"  # two plain quants: Qwen3-8B Q4_K_M and Q8_0 (~14 KB headers)


def crawl(emu: HubEmulator, tmp: Path, **env: str) -> tuple[subprocess.CompletedProcess[str], str]:
    db = tmp / "catalog.sqlite"
    args = ("crawl", "--endpoint", emu.endpoint, "--db", f"sqlite:///{db}", "--author", AUTHOR)
    out = run_quants(*args, "--json", env=clean_env(tmp, **env), timeout=120)
    return out, str(db)


def errors(db: str) -> list[tuple[str, str]]:
    conn = sqlite3.connect(db)
    try:
        return conn.execute("SELECT kind, message FROM scan_errors ORDER BY path").fetchall()
    finally:
        conn.close()


def test_header_cap_refuses_larger_headers_and_records_them(
    shared_hub: HubEmulator,
    tmp_path: Path,
) -> None:
    out, db = crawl(shared_hub, tmp_path, QUANTS_MAX_HEADER_BYTES="8192")
    assert out.returncode == 0, out.stderr
    assert checked("crawl", out.stdout)["quants_analysed"] == 0
    recorded = errors(db)
    assert len(recorded) == 2
    assert all(kind == "malformed_gguf" and "header cap" in msg for kind, msg in recorded)
    # No read went past the cap (plus the one block that showed it was exceeded).
    reads = shared_hub.requests(origin="cdn")
    assert reads and max(r.bytes_sent for r in reads) <= 8192


@pytest.mark.parametrize(
    ("var", "value"), [("QUANTS_MAX_REQUESTS", "3"), ("QUANTS_MAX_BYTES", "20000")]
)
def test_budgets_stop_the_pass_and_are_recorded(
    shared_hub: HubEmulator,
    tmp_path: Path,
    var: str,
    value: str,
) -> None:
    out, db = crawl(shared_hub, tmp_path, **{var: value})
    assert out.returncode == 0, out.stderr
    summary = checked("crawl", out.stdout)
    assert summary["status"] == "interrupted"
    assert summary["quants_analysed"] < 2
    assert "budget" in {kind for kind, _ in errors(db)}
    if var == "QUANTS_MAX_REQUESTS":
        # Checked before each call; a call already started may still follow its redirect hop.
        assert summary["requests"] <= int(value) + 1
        assert len(shared_hub.requests()) == summary["requests"]
    else:
        # Checked as each chunk of a body arrives: at most one chunk (64 KiB) past the budget.
        assert summary["bytes_fetched"] <= int(value) + 64 * 1024


@pytest.mark.parametrize(
    ("var", "value"),
    [("QUANTS_TIMEOUT", "soon"), ("QUANTS_MAX_HEADER_BYTES", "10")],
)
def test_a_bad_limit_is_a_one_line_config_error(
    shared_hub: HubEmulator,
    tmp_path: Path,
    var: str,
    value: str,
) -> None:
    out, _ = crawl(shared_hub, tmp_path, **{var: value})
    assert out.returncode == 1
    lines = out.stderr.splitlines()
    assert lines[0].startswith("error: ") and lines[1].startswith("hint: check the QUANTS_*")
    assert "Traceback" not in out.stderr
