"""Hand-built candidates for the ranking tests: real-model dimensions, no catalog, no files.

Dims follow the models' config.json (Qwen3.6-27B: 64 trunk layers, 16 with
full attention of 4 KV heads x 256, 48 Gated-DeltaNet layers, one MTP block) and the Qwen3.5-35B-A3B
layout of its config.json (40 layers, 256 experts, 8 used).
"""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime

from crawler.fit import KVGroup, MemoryCoefficients
from crawler.profile.analysis import MemoryRecord
from crawler.profile.groups import GroupStats
from crawler.ranking.columns import search_columns
from crawler.ranking.model import Candidate

GIB = 1024**3


def dense_hybrid(weights_gib: float, *, mtp: bool = True, ctx_train: int = 262144):
    """Qwen3.6-27B-like coefficients with ``weights_gib`` of device weights."""
    return MemoryCoefficients(
        status="ok",
        architecture="qwen35",
        n_layer=64,
        n_nextn=1,
        n_embd=5120,
        n_vocab=248320,
        n_head=24,
        n_ff=17408,
        n_ctx_train=ctx_train,
        weights_bytes=int(weights_gib * GIB),
        mtp_weights_bytes=int(0.29e9) if mtp else 0,
        host_bytes=int(0.7e9),
        kv_groups=(KVGroup(16, 1024, 1024, False, 256, 256),),
        mtp_kv_groups=(KVGroup(1, 1024, 1024, False, 256, 256),) if mtp else (),
        v_width_max=1024,
        recurrent_layers=48,
        recurrent_r=30720,
        recurrent_s=786432,
        rs_rollback=True,
        conv_dim=10240,
        mtp_available=mtp,
    )


def moe(weights_gib: float, experts_gib: float):
    """Qwen3.5-35B-A3B-like MoE coefficients (routed experts apart, 40 MoE layers)."""
    per_layer = int(experts_gib * GIB / 40)
    return MemoryCoefficients(
        status="ok",
        architecture="qwen35moe",
        n_layer=40,
        n_nextn=0,
        n_embd=2048,
        n_vocab=248320,
        n_head=16,
        n_ff=0,
        n_ff_exp=512,
        n_expert=256,
        n_expert_used=8,
        n_ctx_train=262144,
        weights_bytes=int(weights_gib * GIB),
        expert_bytes=per_layer * 40,
        host_bytes=int(0.5e9),
        expert_layers=tuple((il, per_layer, per_layer) for il in range(40)),
        kv_groups=(KVGroup(10, 512, 512, False, 256, 256),),
        v_width_max=512,
        recurrent_layers=30,
        recurrent_r=3 * 8192,
        recurrent_s=128 * 4096,
        rs_rollback=True,
        conv_dim=8192,
    )


def groups(attn_bits: float, ffn_bits: float, *, mtp_bits: float = 8.5, n_ffn: float = 20e9):
    """Tensor groups of a 27B dense model at the given bits."""

    def g(name: str, n: float, bits: float) -> GroupStats:
        return GroupStats(name, int(n), int(n * bits / 8), bits, bits, bits)

    return (
        g("attn", 2.0e9, attn_bits),
        g("ffn", n_ffn, ffn_bits),
        g("linear_attn", 2.5e9, attn_bits),
        g("output", 1.27e9, 6.5625),
        g("token_embd", 1.27e9, 4.5),
        g("mtp", 0.3e9, mtp_bits),
    )


def candidate(
    qid: int,
    label: str,
    weights_gib: float,
    *,
    repo: str = "unsloth/Qwen3.6-27B-MTP-GGUF",
    attn_bits: float = 8.5,
    ffn_bits: float = 4.5,
    mtp: bool = True,
    mtp_bits: float = 8.5,
    coefficients: MemoryCoefficients | None = None,
    **kw,
) -> Candidate:
    """A Qwen3.6-27B quant named ``Qwen3.6-27B-{label}.gguf``."""
    co = coefficients or dense_hybrid(weights_gib, mtp=mtp)
    fields = {
        "quant_label": label,
        "architecture": co.architecture,
        "base_model": "Qwen/Qwen3.6-27B",
        "author": repo.split("/")[0],
        "n_params": 27_000_000_000,
        "mtp_present": mtp,
        "mtp_state": "present" if mtp else "absent",
        "mtp_preserved": mtp and mtp_bits >= 6,
        "mtp_min_bits": mtp_bits if mtp else None,
        "attn_min_bits": attn_bits,
        "attn_preserved": attn_bits >= 6,
        "loadable_by_mainline": True,
        "downloads": 1000,
        "last_modified": datetime(2026, 11, 1, tzinfo=UTC),
        "groups": groups(attn_bits, ffn_bits, mtp_bits=mtp_bits),
    }
    fields.update(kw)
    return Candidate(
        quant_id=qid,
        repo_id=repo,
        path=f"Qwen3.6-27B-{label}.gguf",
        size_bytes=int(weights_gib * GIB) + 700_000_000,
        coefficients=co,
        **fields,
    )


def stored_row(co: MemoryCoefficients, label: str = "Q4_K_M", gs=None) -> dict:
    """The search columns the catalog stores for a quant of ``co`` (crawler.ranking.columns),
    with ``gs`` as its tensor groups (default: 6.5-bit attention, 4.5-bit FFN)."""
    memory = MemoryRecord(
        status="ok",
        weights_bytes=co.weights_bytes,
        mtp_weights_bytes=co.mtp_weights_bytes,
        expert_bytes=co.expert_bytes,
        kv_bytes_per_token_f16=co.kv_bytes_per_token_f16,
        fixed_bytes_f16=co.fixed_bytes_f16,
        coefficients=co.to_json(),
    )
    return dict(search_columns(groups(6.5, 4.5) if gs is None else gs, memory, label))


def sql_value(expr: str, params: dict, row: dict) -> float:
    """``expr`` (a bound's SQL) evaluated by SQLite on ``row`` as table ``quants q``."""
    conn = sqlite3.connect(":memory:")
    try:
        cols = sorted(row)
        conn.execute(f"CREATE TABLE quants ({', '.join(cols)})")
        conn.execute(
            f"INSERT INTO quants VALUES ({', '.join('?' for _ in cols)})", [row[c] for c in cols]
        )
        (value,) = conn.execute(f"SELECT {expr} FROM quants q", params).fetchone()
        return float(value)
    finally:
        conn.close()
