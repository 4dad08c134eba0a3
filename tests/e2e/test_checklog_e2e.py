"""``quants check-log`` finds the model a log names in the catalog when it is not on this machine
(a crawl of the Hub emulator stores its header)."""

from __future__ import annotations

from pathlib import Path

from tests.cli import clean_env, run_quants
from tests.fixtures.llamacpp.logs import render
from tests.fixtures.llamacpp.models import load_rows
from tests.schemas import checked


def test_model_named_in_the_log_is_found_in_the_catalog(hub, tmp_path: Path):
    db = f"sqlite:///{tmp_path / 'catalog.sqlite'}"
    env = clean_env(tmp_path, QUANTS_DB=db)
    crawl = run_quants(
        "crawl", "--endpoint", hub.endpoint, "--author", "bartowski", "--json", env=env
    )
    assert crawl.returncode == 0, crawl.stderr
    gemma = next(r for r in load_rows() if r["config"]["model"] == "gemma3")
    log = tmp_path / "server.log"
    log.write_text(render(gemma, "/srv/models/google_gemma-3-12b-it-Q4_K_M.gguf", 4))
    out = run_quants("check-log", str(log), "--json", env=env)
    assert out.returncode == 0, out.stderr
    data = checked("check-log", out.stdout)
    assert data["estimated_from"] == (
        "bartowski/google_gemma-3-12b-it-GGUF/google_gemma-3-12b-it-Q4_K_M.gguf"
    )
    assert all(b["predicted_bytes"] is not None for b in data["buffers"] if b["name"] == "kv")
    log.write_text(render(gemma, "/srv/models/not-crawled-Q4_K_M.gguf", 4))
    out = run_quants("check-log", str(log), env=env)
    assert out.returncode == 2 and "nor (by its file name) in the catalog" in out.stderr
