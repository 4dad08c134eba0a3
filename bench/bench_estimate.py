"""crawler.fit against llama.cpp on an H200: the README's "Estimate vs llama.cpp" tables.

Reads ``tests/fixtures/llamacpp/measurements*.jsonl`` (made by ``tools/measure_llamacpp.py`` on
the device), rebuilds each synthetic model's header, estimates every measured configuration and
prints Markdown: exactness of weights / KV + recurrent / MTP KV, and total device memory
predicted vs measured (MiB).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

MiB = 1024 * 1024
CACHES = ("f16/f16", "q8_0/q8_0", "q4_0/f16", "q4_0/q4_0")
TINY = ("llama", "qwen3", "gemma3", "qwen35", "deepseek2", "glm4moe")


def _extras(c: dict[str, Any]) -> str:
    parts = []
    if c.get("fa") in ("off", "auto"):
        note = ", full ctx" if c.get("fill") else ", 512-token prompt (bound)"
        parts.append(f"FA {c['fa']}" + (note if c["fa"] == "off" else ""))
    elif c.get("fill"):
        parts.append("full ctx")
    if c.get("unified"):
        parts.append("np auto (4, unified)")
    elif c.get("np", 1) != 1:
        parts.append(f"-np {c['np']}")
    if c.get("mtp"):
        parts.append(
            f"MTP n_max {c.get('draft', 3)}, draft {c.get('ctkd', 'f16')}/{c.get('ctvd', 'f16')}"
        )
    if c.get("ub"):
        parts.append(f"-ub {c['ub']}")
    if c.get("ncmoe") == -1:
        parts.append("--cpu-moe")
    elif c.get("ncmoe"):
        parts.append(f"--n-cpu-moe {c['ncmoe']}")
    return ", ".join(parts)


def rows() -> list[dict[str, Any]]:
    """One dict per successful measured run: config, exactness, totals."""
    from crawler.fit import coefficients, estimate
    from tests.fixtures.llamacpp.models import config_of, load_rows, measured, model_header

    out = []
    coeffs: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for row in load_rows():
            if row["rc"] != 0:
                continue
            name = row["config"]["model"]
            if name not in coeffs:
                coeffs[name] = coefficients(model_header(name, Path(tmp)))
            est = estimate(coeffs[name], config_of(row))
            got = measured(row)
            exact = (
                est.weights == got["weights"]
                and est.kv + est.recurrent == got["context"]
                and est.mtp_kv == got["mtp_kv"]
            )
            out.append(
                {
                    "config": row["config"],
                    "exact": exact,
                    "weights": got["weights"],
                    "kv_rs": got["context"] + got["mtp_kv"],
                    "used": got["used"],
                    "pred": est.total,
                }
            )
    return out


def main(argv: list[str]) -> None:
    """Print the two Markdown tables and a summary line."""
    data = rows()
    exact = sum(r["exact"] for r in data)
    # FA off with a 512-token prompt: the estimate is for a full context (upper bound).
    bound = [r for r in data if r["config"].get("fa") == "off" and not r["config"].get("fill")]
    same = [r for r in data if r not in bound]
    worst = max(abs(r["pred"] - r["used"]) / max(0.03 * r["used"], 256 * MiB) for r in same)
    within_3pct = sum(abs(r["pred"] - r["used"]) <= 0.03 * r["used"] for r in same)
    print(f"{len(data)} runs; weights, KV + recurrent and MTP KV byte-exact in {exact}.")
    print(
        f"Total device memory: worst error {worst:.2f} x tolerance (3% or 256 MiB) over"
        f" {len(same)} runs, {within_3pct} within 3%; {len(bound)} FA-off runs with a short"
        f" prompt are upper bounds ({sum(r['pred'] >= r['used'] for r in bound)} hold).\n"
    )
    print("| arch | ctx | " + " | ".join(CACHES) + " |")
    print("|---|---:|" + "---:|" * len(CACHES))
    grid = {
        (r["config"]["model"], r["config"]["ctx"], f"{r['config']['ctk']}/{r['config']['ctv']}"): r
        for r in data
        if set(r["config"]) == {"model", "ctx", "ctk", "ctv"}
    }
    for arch in TINY:
        for ctx in (4096, 32768, 131072, 262144):
            cells = []
            for cache in CACHES:
                r = grid.get((arch, ctx, cache))
                cells.append(
                    "refused (MLA)"
                    if r is None
                    else f"{r['pred'] / MiB:.0f} / {r['used'] / MiB:.0f}"
                )
            print(f"| {arch} | {ctx} | " + " | ".join(cells) + " |")
    print()
    print(
        "| model | ctx | K/V | options | weights MiB | KV+RS MiB | exact"
        " | predicted | measured | error |"
    )
    print("|---|---:|---|---|---:|---:|---|---:|---:|---:|")
    for r in data:
        c = r["config"]
        if set(c) == {"model", "ctx", "ctk", "ctv"} and c["model"] in TINY:
            continue
        err = (r["pred"] - r["used"]) / r["used"] * 100
        print(
            f"| {c['model']} | {c['ctx']} | {c['ctk']}/{c['ctv']} | {_extras(c)} "
            f"| {r['weights'] / MiB:.2f} | {r['kv_rs'] / MiB:.2f}"
            f" | {'yes' if r['exact'] else 'NO'} "
            f"| {r['pred'] / MiB:.0f} | {r['used'] / MiB:.0f} | {err:+.1f}% |"
        )


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
