"""``quants schedule --print-systemd|--print-cron`` and option errors, via the real CLI."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.cli import run_quants

TOKEN = "hf_SECRETtokenNEVERprinted"


def _quants(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUANTS_")}
    env.update(
        QUANTS_DATA_DIR=str(tmp_path / "data"),
        QUANTS_HF_ENDPOINT="http://127.0.0.1:9/mirror",
        HF_TOKEN=TOKEN,
    )
    return run_quants("schedule", *args, env=env, timeout=60)


def test_print_systemd(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'my catalog.sqlite'}"
    out = _quants(
        tmp_path,
        "--print-systemd",
        "--cron",
        "15 4 * * sun",
        "--timezone",
        "Europe/Berlin",
        "--jitter",
        "120",
        "--author",
        "unsloth",
        "--db",
        db,
    )
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert TOKEN not in text + out.stderr
    assert f'Environment="QUANTS_DB={db}"' in text
    assert f"Environment=QUANTS_DATA_DIR={tmp_path / 'data'}" in text
    assert "Environment=QUANTS_HF_ENDPOINT=http://127.0.0.1:9/mirror" in text
    exec_start = next(line for line in text.splitlines() if line.startswith("ExecStart="))
    program = exec_start.removeprefix("ExecStart=").split()[0]
    assert Path(program).is_absolute()
    assert exec_start.endswith(" crawl --author unsloth")
    assert "OnCalendar=Sun *-*-* 04:15:00 Europe/Berlin" in text
    assert "RandomizedDelaySec=120" in text


def test_print_cron(tmp_path: Path) -> None:
    out = _quants(tmp_path, "--print-cron", "--search", "50%", "--limit", "7")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert TOKEN not in out.stdout
    entry = lines[-1]
    assert entry.startswith("0 3 * * * /")
    assert " crawl --search 50\\% --limit 7 >> " in entry
    assert entry.endswith(f"{tmp_path / 'data' / 'crawl.log'} 2>&1")


def test_option_errors(tmp_path: Path) -> None:
    both = _quants(tmp_path, "--print-systemd", "--print-cron")
    assert both.returncode == 2 and "one of --print-systemd and --print-cron" in both.stderr
    zone = _quants(tmp_path, "--timezone", "Nowhere/Land", "--print-cron")
    assert zone.returncode == 1 and "unknown time zone 'Nowhere/Land'" in zone.stderr
    cron = _quants(tmp_path, "--cron", "0 3 * *")
    assert cron.returncode == 1 and "needs 5 fields" in cron.stderr
    for out in (both, zone, cron):
        assert out.stdout == "" and "Traceback" not in out.stderr
