"""HF_TOKEN never leaks: not in any output, log, error, catalog byte, and never sent to the CDN.

A crawl of the whole fixture world runs with a recognisable token that the emulated Hub accepts
(and that opens the gated and private repos, so their files are read through the CDN redirect),
at DEBUG log level, while the Hub answers some requests with errors whose body echoes the token
back. Then every output is searched for the token: stdout, stderr, ``--json``, the SQLite file and
its WAL, ``quants sql`` over scan_errors, ``quants scans``, and a failing ``quants inspect`` with
``QUANTS_DEBUG=1`` (full traceback). The emulator's request log shows which origin got an
``Authorization`` header: the Hub only (httpx2 drops it on a cross-origin redirect).
"""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path
from typing import Any

from tests.cli import clean_env, run_quants
from tests.hub_emulator import Fault, HubEmulator
from tests.reliability.conftest import count

ROOT = Path(__file__).resolve().parents[2]
GATED = "google/gemma-3-12b-it-qat-q4_0-gguf"
PRIVATE = "quants-test/Private-Qwen3-8B-GGUF"


def _run(args: list[str], tmp: Path, token: str, **extra: str) -> subprocess.CompletedProcess[str]:
    env = clean_env(tmp, HF_TOKEN=token, QUANTS_LOG_LEVEL="DEBUG", **extra)
    return run_quants(*args, env=env)


def test_token_is_in_no_output_and_only_sent_to_the_hub(
    hub: HubEmulator,
    tmp_path: Path,
    figures: dict[str, Any],
) -> None:
    token = f"hf_QuantsSecret{uuid.uuid4().hex}"
    hub.state.valid_tokens.add(token)
    for repo_id in (GATED, PRIVATE):
        hub.state.get(repo_id).granted.add(token)
    # Error bodies that echo the token (a hostile or buggy server), on a listing and a read.
    hub.faults.add(Fault.http(500, message=f"bad token {token}"), path="/tree/", times=1)
    hub.faults.add(
        Fault.http(403, message=f"Authorization: Bearer {token}"),
        regex=r"/resolve/.*Q8_0\.gguf$",
        times=3,
    )
    db_file = tmp_path / "catalog.sqlite"
    db = f"sqlite:///{db_file}"
    outputs: dict[str, str] = {}
    crawl = _run(
        ["crawl", "--endpoint", hub.endpoint, "--db", db, "--all", "--json"], tmp_path, token
    )
    assert crawl.returncode == 0, crawl.stderr[-3000:]
    outputs |= {"crawl stdout": crawl.stdout, "crawl stderr": crawl.stderr}
    assert "DEBUG" in crawl.stderr or "INFO" in crawl.stderr  # the logs were really on
    for name, args in {
        "scan_errors": ["sql", "SELECT * FROM scan_errors", "--json", "--db", db],
        "scans": ["scans", "--db", db],
    }.items():
        out = _run(args, tmp_path, token)
        assert out.returncode == 0, out.stderr
        outputs |= {f"{name} stdout": out.stdout, f"{name} stderr": out.stderr}
    # A failing command with the traceback shown: the exception messages and their chain.
    missing = _run(
        ["inspect", f"{GATED}/does-not-exist.gguf"],
        tmp_path,
        token,
        QUANTS_HF_ENDPOINT=hub.endpoint,
        QUANTS_DEBUG="1",
    )
    assert missing.returncode != 0 and "Traceback" in missing.stderr
    outputs |= {"inspect traceback": missing.stderr, "inspect stdout": missing.stdout}

    leaks = [
        f"{name}: {line[:300]}"
        for name, value in outputs.items()
        for line in value.splitlines()
        if token in line
    ]
    assert leaks == []
    # The echoing faults really fired and their failures were recorded.
    errors = _run(
        ["sql", "SELECT count(*) AS n FROM scan_errors", "--json", "--db", db], tmp_path, token
    )
    assert '"n": 0' not in errors.stdout
    catalog_bytes = b"".join(
        p.read_bytes() for p in tmp_path.glob("catalog.sqlite*") if p.is_file()
    )
    assert len(catalog_bytes) > 100_000
    assert token.encode() not in catalog_bytes
    count(figures, "secrets", "outputs grepped", len(outputs) + 2)
    count(figures, "secrets", "bytes grepped", sum(map(len, outputs.values())) + len(catalog_bytes))
    for path in (tmp_path / "data").rglob("*"):
        if path.is_file():
            assert token.encode() not in path.read_bytes(), path

    hub_side = hub.requests(origin="hub")
    cdn_side = hub.requests(origin="cdn")
    assert cdn_side and hub_side
    assert not [r.path for r in cdn_side if r.authorization]
    count(figures, "secrets", "hub requests with Authorization", len(hub_side))
    count(figures, "secrets", "cdn requests without Authorization", len(cdn_side))
    # Every Hub request of the crawl carried it (listing, trees, resolve of gated/private files).
    assert all(r.authorization for r in hub_side)
    gated_reads = [r for r in hub_side if f"/{GATED}/resolve/" in r.path and r.status == 302]
    assert gated_reads, "the gated repo's files were read with the token"
