"""``quants crawl`` twice with the Hub emulator's world mutated in between; ``quants changes``
reports exactly the mutations, and ``quants scans`` the two passes. The real CLI, in a subprocess.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli import Cli
from tests.fixtures.world import WORLD, FileCache, Quant, reupload
from tests.hub_emulator import HubEmulator


def _mutate(emulator: HubEmulator, cache: FileCache) -> None:
    state = emulator.state
    # Unsloth's real story: the UD-Q4_K_XL re-uploaded under the same name, attention off MXFP4.
    reupload(
        state,
        cache,
        "unsloth/Qwen3.5-35B-A3B-GGUF",
        Quant("Qwen3.5-35B-A3B-UD-Q4_K_XL.gguf", "qwen35", "UD-Q4_K_XL"),
    )
    # A quant silently re-uploaded without its MTP head.
    reupload(
        state,
        cache,
        "unsloth/Qwen3.6-27B-GGUF",
        Quant("Qwen3.6-27B-Q8_0.gguf", "qwen35", "Q8_0", no_mtp=True),
    )
    # A new quant in a known repo.
    reupload(
        state,
        cache,
        "bartowski/google_gemma-3-12b-it-GGUF",
        Quant("google_gemma-3-12b-it-Q5_K_M.gguf", "gemma3", "Q4_K_M"),
    )
    # Files deleted (a quant, a vision projector, an MTP sidecar), and a whole repo deleted.
    state.commit("lmstudio-community/Qwen3-8B-GGUF", delete=["Qwen3-8B-Q8_0.gguf"])
    state.commit("unsloth/Qwen3.6-27B-GGUF", delete=["mmproj-F16.gguf"])
    state.commit("ggml-org/Qwen3.6-27B-GGUF", delete=["mtp-Qwen3.6-27B-Q8_0.gguf"])
    state.delete_repo("unsloth/DeepSeek-V2-Lite-Chat-GGUF")


def test_changes_report_exactly_the_mutations(
    hub: HubEmulator,
    world_cache: FileCache,
    tmp_path: Path,
) -> None:
    # Every base model of the world from the first pass on: the default crawl also lists the
    # children of the base models the catalog holds, so without this its scope would
    # grow between the two passes and new uploaders' quants would show up as changes too.
    bases = sorted(
        {
            b
            for r in WORLD
            if r.card_data
            for b in (
                [r.card_data["base_model"]]
                if isinstance(r.card_data.get("base_model"), str)
                else list(r.card_data.get("base_model") or [])
            )
        }
    )
    cli = Cli(tmp_path, endpoint=hub.endpoint, QUANTS_BASE_MODELS=",".join(bases))
    first = cli.json("crawl")
    assert first["quants_analysed"] > 10
    # Nothing changed yet: the latest scan's changes are every quant, all new.
    initial = cli.json("changes")
    assert initial["reuploads"] == [] and initial["vanished_quants"] == []
    assert initial["vanished_files"] == [] and initial["vanished_repos"] == []
    # Quants whose header failed to parse (the base models bring broken/Malformed-GGUF in) are
    # new quants too, without an analysis.
    assert len(initial["new_quants"]) >= first["quants_analysed"]

    _mutate(hub, world_cache)
    # --full lists every repo, so the deleted repo is noticed in this pass.
    second = cli.json("crawl", "--full")
    assert second["repos_changed"] >= 3

    report = cli.json("changes")
    assert report["scans"] == [2]
    assert [(q["repo"], q["path"]) for q in report["new_quants"]] == [
        ("bartowski/google_gemma-3-12b-it-GGUF", "google_gemma-3-12b-it-Q5_K_M.gguf")
    ]
    ups = {(r["repo"], r["path"]): r for r in report["reuploads"]}
    assert set(ups) == {
        ("unsloth/Qwen3.5-35B-A3B-GGUF", "Qwen3.5-35B-A3B-UD-Q4_K_XL.gguf"),
        ("unsloth/Qwen3.6-27B-GGUF", "Qwen3.6-27B-Q8_0.gguf"),
    }
    ud = ups[("unsloth/Qwen3.5-35B-A3B-GGUF", "Qwen3.5-35B-A3B-UD-Q4_K_XL.gguf")]
    assert ud["changes"][0].startswith("attention MXFP4 -> ")
    assert "MXFP4" not in ud["changes"][0].split("->")[1]
    assert "attention now preserved" in ud["changes"]
    assert ud["old_revision"] != ud["new_revision"]
    assert ud["new_size_bytes"] != ud["old_size_bytes"]
    assert any(c.startswith("size ") for c in ud["changes"])
    q8 = ups[("unsloth/Qwen3.6-27B-GGUF", "Qwen3.6-27B-Q8_0.gguf")]
    assert q8["changes"][0] == "MTP head removed"
    assert [(q["repo"], q["path"]) for q in report["vanished_quants"]] == [
        ("lmstudio-community/Qwen3-8B-GGUF", "Qwen3-8B-Q8_0.gguf")
    ]
    assert [(f["repo"], f["path"], f["kind"]) for f in report["vanished_files"]] == [
        ("ggml-org/Qwen3.6-27B-GGUF", "mtp-Qwen3.6-27B-Q8_0.gguf", "mtp_sidecar"),
        ("unsloth/Qwen3.6-27B-GGUF", "mmproj-F16.gguf", "mmproj"),
    ]
    assert [(r["repo"], r["quants"]) for r in report["vanished_repos"]] == [
        ("unsloth/DeepSeek-V2-Lite-Chat-GGUF", 2)
    ]
    # --since the first scan is the same window; since the second, nothing.
    assert cli.json("changes", "--since", "1") == {**report, "since_scan_id": 1}
    assert cli.json("changes", "--since", "2")["new_quants"] == []

    # The human view says the same in words, with Hub text escaped.
    text = cli.run("changes").stdout
    assert "re-upload  unsloth/Qwen3.6-27B-GGUF/Qwen3.6-27B-Q8_0.gguf [Q8_0]" in text
    assert "             MTP head removed" in text
    assert "vanished   repo unsloth/DeepSeek-V2-Lite-Chat-GGUF (2 quants)" in text
    assert "vanished   lmstudio-community/Qwen3-8B-GGUF/Qwen3-8B-Q8_0.gguf" in text
    assert "vanished   unsloth/Qwen3.6-27B-GGUF/mmproj-F16.gguf (mmproj)" in text

    scans = cli.json("scans")
    assert [(s["id"], s["status"], s["trigger"]) for s in scans] == [
        (2, "ok", "manual"),
        (1, "ok", "manual"),
    ]
    assert scans[1]["repos_new"] == first["repos_new"]
    assert scans[0]["requests"] == second["requests"]
    assert scans[0]["bytes_fetched"] == second["bytes_fetched"]
    assert all(s["duration_s"] is not None and s["duration_s"] >= 0 for s in scans)
    table = cli.run("scans").stdout.splitlines()
    assert table[0].split()[:5] == ["id", "started", "duration", "status", "trigger"]
    assert len(table) == 4


@pytest.mark.parametrize("since", ["nope", "999"])
def test_changes_bad_since_is_a_usage_error(
    since: str,
    hub: HubEmulator,
    tmp_path: Path,
) -> None:
    cli = Cli(tmp_path, endpoint=hub.endpoint)
    out = cli.run("changes", "--since", since, ok=False)
    assert out.returncode == 2
    assert out.stderr.startswith("error: --since")
    assert "Traceback" not in out.stderr
