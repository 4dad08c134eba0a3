"""The search columns of a quant, computed from its analysis (pure: no I/O).

Narrow columns let the database filter and order without JSON; the catalog only writes them.
Details: docs/internals/ranking.md#columns
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from crawler.fit import MemoryCoefficients
from crawler.fit.cuda import context_floor_per_ubatch
from crawler.profile.analysis import MemoryRecord
from crawler.profile.groups import GroupStats
from crawler.ranking.evaluate import weight_type_efficiency
from crawler.ranking.partial_bound import slot_terms
from crawler.ranking.quality import QualityInputs, estimate_quality
from crawler.ranking.speed_bound import read_bytes_floor, verify_experts_floor

__all__ = [
    "FIT_EXTRAS",
    "SEARCH_SCALARS",
    "copy_key",
    "draft_head_bytes",
    "fit_extras",
    "quality_score_of",
    "search_columns",
    "search_scalars",
    "stored_columns",
]

#: The coefficients the search reads before the exact estimate, copied into scalar columns.
SEARCH_SCALARS = ("n_expert", "n_expert_used", "n_embd", "n_vocab")

#: The ``quants`` columns fit_extras fills (migration 0004; fit_type_eff, fit_trunk_layers: 0013;
#: fit_slot_bytes, fit_slot_kv_per_token, fit_resident_bytes: 0014; fit_swa_kv_per_cell,
#: fit_swa_cells: 0016).
FIT_EXTRAS = (
    "fit_mtp_kv_per_token",
    "fit_read_bytes",
    "fit_moe_layers",
    "fit_ctx_train",
    "fit_ubatch_bytes",
    "fit_draft_bytes",
    "fit_verify_experts",
    "fit_type_eff",
    "fit_trunk_layers",
    "fit_slot_bytes",
    "fit_slot_kv_per_token",
    "fit_resident_bytes",
    "fit_swa_kv_per_cell",
    "fit_swa_cells",
)


def _opt_int(value: Any) -> int | None:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def search_scalars(coefficients: Mapping[str, Any] | None) -> dict[str, Any]:
    """``memory_models``' copies of the coefficients the search needs before estimating.

    Missing keys are 0 / False, as crawler.fit.MemoryCoefficients.from_json defaults.
    """
    co = coefficients or {}
    out: dict[str, Any] = {k: _opt_int(co.get(k)) or 0 for k in SEARCH_SCALARS}
    out["mtp_available"] = bool(co.get("mtp_available", False))
    return out


def quality_score_of(
    groups: Iterable[tuple[str, int, int, float | None]], coefficients: Mapping[str, Any] | None
) -> float | None:
    """The stored ``quants.quality_score``: crawler.ranking.quality.estimate_quality's score.

    ``groups`` are (name, n_params, n_bytes, bpw) as ``tensor_groups`` stores them, in
    ``group_name`` order (the order ranking loads them in, so the float sums are identical);
    ``coefficients`` the memory model's JSON. Ranking recomputes the same function for the
    quants it returns (crawler.ranking.rank.rank_candidates); a test checks they agree.
    """
    stats = tuple(GroupStats(n, p, b, bpw) for n, p, b, bpw in groups)
    if not stats:
        return None
    co = search_scalars(coefficients)
    est = estimate_quality(
        QualityInputs(
            groups=stats,
            n_expert=co["n_expert"],
            n_expert_used=co["n_expert_used"],
            n_embd=co["n_embd"],
            n_vocab=co["n_vocab"],
        )
    )
    return est.score if est is not None else None


def draft_head_bytes(groups: Iterable[tuple[str, int]]) -> int:
    """Bytes of the head an MTP draft pass reads: the ``output`` group, else ``token_embd``
    (tied embeddings), as ranking gives the speed estimate; ``groups`` are
    (group_name, n_bytes)."""
    found = dict(groups)
    return int(found.get("output") or found.get("token_embd") or 0)


def copy_key(
    groups: Iterable[tuple[str, int, int, float | None]],
    status: str,
    coefficients: Mapping[str, Any] | None,
    label: str | None,
    quality: float | None,
) -> int | None:
    """``quants.copy_key``: a 64-bit digest of what ranking's estimates and quality read from a
    quant beside its shape (crawler.catalog.search_index.search_shape_sql, which holds the MTP
    verdicts): its tensor groups (name, n_params, n_bytes, bpw), memory model (status,
    coefficient JSON), quant label and quality score. Quants of one shape with equal keys are
    copies: equal estimates, sort values and quality whatever the request
    (crawler.ranking.copies.copy_class_sql's classes, finer). None (never taken for a copy)
    without a quality score, as ranking keeps those.

    Two different quants share a key with probability 2**-64 a pair (BLAKE2b truncated to 8
    bytes; https://www.rfc-editor.org/rfc/rfc7693)."""
    if quality is None:
        return None
    text = json.dumps(
        [
            # Sorted here: a database's collation may order the names otherwise.
            sorted([name, n_params, n_bytes, bpw] for name, n_params, n_bytes, bpw in groups),
            status,
            coefficients,
            label,
            quality,
        ],
        sort_keys=True,
        separators=(",", ":"),
    )
    digest = hashlib.blake2b(text.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)  # a BIGINT on both databases


def fit_extras(
    coefficients: Mapping[str, Any] | None,
    draft_head: int = 0,
    *,
    label: str | None,
    groups: Iterable[GroupStats],
) -> dict[str, float | None]:
    """FIT_EXTRAS from a memory model's coefficient JSON, draft_head_bytes, the quant label and
    its tensor groups in name order (None for all when there is no JSON: memory rules not
    modelled)."""
    if not coefficients:
        return dict.fromkeys(FIT_EXTRAS)
    co = MemoryCoefficients.from_json(dict(coefficients))
    slots = slot_terms(co)
    read = read_bytes_floor(
        co.weights_bytes, co.expert_bytes, co.n_expert, co.n_expert_used, co.recurrent_bytes_per_seq
    )
    return {
        "fit_mtp_kv_per_token": co.mtp_kv_bytes_per_token_f16,
        "fit_read_bytes": read,
        # The MoE layers estimate_speed charges a fixed cost for (as ranking's _speed counts).
        "fit_moe_layers": sum(1 for il, _d, _h in co.expert_layers if il < co.n_layer),
        "fit_ctx_train": co.n_ctx_train or None,
        "fit_ubatch_bytes": context_floor_per_ubatch(co),
        # What one MTP draft pass reads (speed_bound.SpeedBound): the MTP block and the head.
        "fit_draft_bytes": co.mtp_weights_bytes + draft_head,
        "fit_verify_experts": verify_experts_floor(
            read, co.expert_bytes, co.n_expert, co.n_expert_used
        ),
        # The weight types' rate the speed estimate reads at (speed_bound.SpeedBound.rate).
        "fit_type_eff": weight_type_efficiency(label, groups),
        # The trunk layers estimate_speed charges a platform's per-layer cost for (Metal).
        "fit_trunk_layers": co.n_layer,
        # The largest trunk layer and what no layer holds (the --tier partial margin bound,
        # crawler.ranking.partial_bound).
        "fit_slot_bytes": slots.slot_bytes,
        "fit_slot_kv_per_token": slots.slot_kv_per_token,
        "fit_resident_bytes": slots.resident_bytes,
        # The sliding-window cache apart (part of fit_fixed_bytes): the memory bound caps its
        # cells at the context's (crawler.ranking.bounds.swa_surplus_bytes).
        "fit_swa_kv_per_cell": co.swa_bytes_per_cell_f16,
        "fit_swa_cells": co.swa_cells,
    }


def stored_columns(
    groups: Sequence[tuple[str, int, int, float | None]],
    status: str,
    coefficients: Mapping[str, Any] | None,
    label: str | None,
) -> dict[str, Any]:
    """``quality_score``, ``copy_key`` and FIT_EXTRAS of a stored quant, from its
    ``tensor_groups`` rows (name, n_params, n_bytes, bpw; in name order), its memory model and
    its quant label: what the catalog's upgrade back-fills after the migrations that add these
    columns."""
    head = draft_head_bytes((name, n_bytes) for name, _p, n_bytes, _b in groups)
    stats = [GroupStats(name, n_params, n_bytes, bpw) for name, n_params, n_bytes, bpw in groups]
    quality = quality_score_of(groups, coefficients)
    return {
        "quality_score": quality,
        "copy_key": copy_key(groups, status, coefficients, label, quality),
        **fit_extras(coefficients if status == "ok" else None, head, label=label, groups=stats),
    }


def search_columns(
    groups: Sequence[GroupStats], memory: MemoryRecord, label: str | None
) -> dict[str, Any]:
    """Every ``quants`` search column of one analysed quant: ``quality_score``, ``copy_key``
    and ``fit_*``.

    ``groups`` are its tensor groups (any order), ``label`` its quant label; the ``fit_*``
    copies of the prefilter terms are NULL unless the memory rules are modelled (status "ok").
    """
    ordered = sorted(groups, key=lambda g: g.name)
    ok = memory.status == "ok"
    head = draft_head_bytes((g.name, g.n_bytes) for g in ordered)
    rows = [(g.name, g.n_params, g.n_bytes, g.bpw) for g in ordered]
    quality = quality_score_of(rows, memory.coefficients)
    return {
        "quality_score": quality,
        "copy_key": copy_key(rows, memory.status, memory.coefficients, label, quality),
        "fit_weights_bytes": memory.weights_bytes if ok else None,
        "fit_expert_bytes": memory.expert_bytes if ok else None,
        "fit_mtp_bytes": memory.mtp_weights_bytes if ok else None,
        "fit_kv_per_token": memory.kv_bytes_per_token_f16 if ok else None,
        "fit_fixed_bytes": memory.fixed_bytes_f16 if ok else None,
        **fit_extras(memory.coefficients if ok else None, head, label=label, groups=ordered),
    }
