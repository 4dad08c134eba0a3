"""The printed llama-server commands, started as printed on a GPU: the recorded launch proof.

tools/launch_proof.py planned the top results of four reference searches (launch-plan.jsonl)
and ran each printed command on real-size zero-data files with only ``-hf REPO:QUANT`` replaced
by ``-m FILE`` (launch.jsonl; provenance in PROVENANCE.md beside them).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.llamacpp.tools import tool_module

HERE = Path(__file__).resolve().parents[1] / "fixtures" / "llamacpp"
MIB = 1024**2
QUERIES = ("seed", "moe-experts-cpu", "partial", "vision")


def _lines(name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (HERE / name).read_text().splitlines()]


PLAN = _lines("launch-plan.jsonl")
RUNS = {(r["query"], r["rank"]): r for r in _lines("launch.jsonl") if not r.get("header")}


def _used_mib(run: dict[str, Any]) -> int:
    before = run["gpu_before"][0]["used_mib"]
    return int(run["gpu_after_request"][0]["used_mib"]) - int(before)


def test_every_planned_command_ran_once_for_the_four_queries() -> None:
    assert {p["query"] for p in PLAN} == set(QUERIES)
    assert all(p["rank"] <= 5 for p in PLAN)
    assert set(RUNS) == {(p["query"], p["rank"]) for p in PLAN}
    for p in PLAN:
        assert RUNS[(p["query"], p["rank"])]["command"] == p["command"]


@pytest.mark.parametrize("plan", PLAN, ids=lambda p: f"{p['query']}-{p['rank']}")
def test_the_run_is_the_printed_command_with_only_the_download_replaced(
    plan: dict[str, Any],
) -> None:
    run = RUNS[(plan["query"], plan["rank"])]
    tool = tool_module("launch_proof")
    model = Path("/w") / Path(plan["path"]).name
    projector = Path("/w") / run["projector"] if run["projector"] else None
    argv, steps = tool.server_argv(plan["command"], model, projector)
    assert [Path(a).name if a.startswith("/") else a for a in argv] == run["argv"]
    printed = plan["command"].split(" && ")[-1].split()
    if "-hf" in printed:
        i = printed.index("-hf")
        # Everything but the download source is as printed, flag for flag.
        assert run["argv"][:i] == printed[:i]
        assert run["argv"][i : i + 2] == ["-m", Path(plan["path"]).name]
        rest = run["argv"][i + 2 :]
        if run["projector"]:  # -hf would have fetched the repo's projector: given as a file
            assert plan["projector_bytes"] and "--no-mmproj" not in printed
            assert rest[:2] == ["--mmproj", run["projector"]]
            rest = rest[2:]
        assert rest == printed[i + 2 :]
    else:  # byte parts: the printed download, join and run; only the download was not run
        assert run["argv"] == printed
        assert [s["argv"][0] for s in run["steps"]] == ["hf", "cat"]
        assert run["steps"][0]["ran"] is False and run["steps"][1]["rc"] == 0
    assert len(steps) == len(run["steps"])


LOADED = [p for p in PLAN if RUNS[(p["query"], p["rank"])]["ready"]]
REFUSED = [p for p in PLAN if not RUNS[(p["query"], p["rank"])]["ready"]]


@pytest.mark.parametrize("plan", LOADED, ids=lambda p: f"{p['query']}-{p['rank']}")
def test_loaded_answered_and_used_the_memory_the_estimate_said(plan: dict[str, Any]) -> None:
    run = RUNS[(plan["query"], plan["rank"])]
    assert run["completion_status"] == 200 and run["predicted_n"] == 16 and run["rc"] == 0
    used = _used_mib(run) * MIB
    predicted = plan["total_bytes"]
    # The device bytes the server added (nvidia-smi) against the estimate's device total: the
    # tolerance of the memory fixtures (tests/unit/test_setups.py); here all within 2 %.
    assert abs(predicted - used) <= max(0.03 * used, 256 * MIB), (predicted / MIB, used / MIB)
    assert abs(predicted - used) <= 0.02 * used


def test_the_refused_rows_are_the_declared_but_missing_mtp_file_and_now_say_so() -> None:
    """The first pass found one bug: a file declaring an MTP layer without its tensors was
    called loadable and given a command; llama-server refused it."""
    assert {(p["repo"], p["path"]) for p in REFUSED} == {
        ("someone/Qwen3.6-27B-NoMTP-Q4_K_M-GGUF", "Qwen3.6-27B-Q4_K_M.gguf")
    }
    for p in REFUSED:
        run = RUNS[(p["query"], p["rank"])]
        assert p["mtp"]["state"] == "declared_missing" and p["loadable_by_mainline"] is True
        assert "tensor 'blk.64.attn_norm.weight' not found" in run["log_tail"]
    # Every other row loaded; tests/unit/test_profile.py holds the fixed verdict.
    assert LOADED and all(p["mtp"]["state"] != "declared_missing" for p in LOADED)


@pytest.mark.parametrize("plan", PLAN, ids=lambda p: f"{p['query']}-{p['rank']}")
def test_the_recorded_command_is_what_quants_prints_today(plan: dict[str, Any]) -> None:
    """The proof holds for today's emitter: the row's configuration, given to it again, prints
    the command that ran (a change to any flag fails here until the proof is run again)."""
    from crawler.fit import RunConfig
    from crawler.ranking.commands import llama_server_command

    cfg = RunConfig(
        ctx=plan["ctx"],
        type_k=plan["cache"]["type_k"],
        type_v=plan["cache"]["type_v"],
        flash_attn="on",
        n_gpu_layers=plan["n_gpu_layers"],
        cpu_moe=plan["tier"] == "experts_cpu",
    )
    # The repo's sibling files as the command names them (byte parts), else the file itself.
    printed = plan["command"].split()
    parts = [w for w in printed if ".gguf.part" in w]
    siblings = sorted(set(parts)) or [plan["path"]]
    again = llama_server_command(
        plan["repo"], plan["path"], plan["quant_label"], cfg, siblings,
        mmproj=plan["query"] == "vision",
    )  # fmt: skip
    assert again == plan["command"]
