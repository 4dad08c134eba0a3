"""The search --json document (schema crawler/schemas/search.v1.json), from a SearchResult.

Shared by quants search, the API, saved searches and quants serve's JSON API.
Details: docs/internals/base.md#search_json
"""

from __future__ import annotations

from typing import Any

from crawler.base.budget import budget_json
from crawler.fit.devices import DeviceShare
from crawler.fit.tiers import tier_of
from crawler.library.search import SearchResult, backend_note
from crawler.profile.mtp_grade import mtp_grade
from crawler.ranking.model import Ranked

__all__ = ["provenance_json", "result_json", "search_json"]


def _device_json(d: DeviceShare) -> dict[str, Any]:
    return {
        "device": d.index,
        "slots": [d.first, d.last],
        "total_bytes": d.total,
        "budget_bytes": d.budget,
        "margin_bytes": d.margin,
    }


def result_json(r: Ranked) -> dict[str, Any]:
    """One result in the documented ``search --json`` shape."""
    c, cfg, est = r.candidate, r.config, r.estimate
    return {
        "rank": r.rank,
        "repo": c.repo_id,
        "path": c.path,
        "quant_label": c.quant_label,
        "architecture": c.architecture,
        "base_model": c.base_model,
        "author": c.author,
        "size_bytes": c.size_bytes,
        "total_bytes": est.total,
        "margin_bytes": r.margin_bytes,
        "host_bytes": est.host_bytes,
        "bytes": est.bytes_dict(),
        "ctx": cfg.ctx,
        "max_ctx": r.max_ctx,
        "cache": {"type_k": cfg.type_k, "type_v": cfg.type_v},
        "tier": tier_of(cfg),
        "projector_bytes": c.projector_bytes,
        "n_gpu_layers": cfg.n_gpu_layers,
        # Several GPUs: each device's slots and bytes (the tightest decides the margin).
        "devices": [_device_json(d) for d in r.devices] or None,
        "mtp": {
            "present": c.mtp_present,
            "preserved": c.mtp_preserved,
            "state": c.mtp_state,
            "min_bits": c.mtp_min_bits,
            "enabled": cfg.mtp,
            # MTP auto left a head that fits off: its predicted speed-up (below 1), else null.
            "declined_speedup": None if r.mtp_declined is None else round(r.mtp_declined, 3),
            # The graded reading with its evidence (crawler/profile/mtp_grade.py); "preserved" stays
            # the 6-bit check that --mtp and MTP auto use.
            **mtp_grade(c.mtp_state, c.mtp_min_bits).to_json(),
        },
        "attention": {"min_bits": c.attn_min_bits, "preserved": c.attn_preserved},
        "loadable_by_mainline": c.loadable_by_mainline,
        "quality": round(r.quality.score, 2) if r.quality else None,
        "quality_detail": r.quality.to_json() if r.quality else None,
        # Published measurements of this exact file, beside (never instead of) the estimate.
        "measured": [m.to_json() for m in r.measured],
        "tok_s": round(r.speed.tok_s, 1) if r.speed else None,
        "speed": r.speed.to_json() if r.speed else None,
        "downloads": c.downloads,
        "last_modified": c.last_modified.isoformat() if c.last_modified else None,
        "command": r.command,
        "ollama": r.ollama,
        "lm_studio": r.lm_studio,
        "provenance": provenance_json(c.source, c.source_revision),
    }


def provenance_json(source: str | None, revision: str | None) -> dict[str, Any]:
    """Where a row's analysis came from: this catalog's crawl, or an import (and which)."""
    if source is None:
        return {"from": "crawl"}
    return {"from": "import", "source": source, "revision": revision}


def search_json(res: SearchResult) -> dict[str, Any]:
    """The whole ``search --json`` document."""
    req, b, o = res.request, res.budget, res.outcome
    gpu = None
    if res.gpu is not None:
        g = res.gpu.gpu
        gpu = {
            "query": res.gpu.query,
            "name": g.name,
            "memory_gib": g.memory_gib,
            "bandwidth_gb_s": g.bandwidth_gb_s,
            "fp32_tflops": g.fp32_tflops,
            "unified": g.unified,
            "source": g.source,
            # Unified memory (Apple, Strix Halo): the budget is the working-set share; the
            # estimate is CUDA's (crawler.fit.apple).
            "note": backend_note(g.kind) if g.unified else None,
        }
    return {
        "request": {
            "query": req.filters.query,
            "ctx": req.spec.ctx,
            "cache_type_k": None if req.spec.auto_cache else req.spec.type_k,
            "cache_type_v": None if req.spec.auto_cache else req.spec.type_v,
            "auto_cache": req.spec.auto_cache,
            "mtp": req.spec.mtp,
            "mtp_auto": req.spec.mtp_auto,
            "cpu_moe": req.spec.cpu_moe,
            "tier": req.spec.tier,
            "vision": req.spec.vision,
            "sort": req.sort,
            "limit": req.limit,
        },
        "budget": {
            **budget_json(b.vram_bytes, b.headroom_bytes),
            "device_bytes": b.device_bytes,
            "ram_bytes": b.ram_bytes,
            "devices": list(b.devices) or None,
            "tensor_split": list(b.split) or None,
        },
        "gpu": gpu,
        "counts": {
            "considered": o.considered,
            "fitting": res.fit_count,
            "fitting_exact": res.fit_count_exact,
            "too_big": o.too_big + res.prefiltered_out,
            "unknown_memory": res.unknown_memory,
            "invalid_config": o.invalid_config,
            "unevaluated": o.unevaluated,
            "unreadable": len(res.unreadable),
        },
        "unreadable": list(res.unreadable),
        "results": [result_json(r) for r in o.results],
    }
