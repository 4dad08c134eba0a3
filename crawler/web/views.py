"""What each page and API route shows, from the library calls the CLI makes.

No SQL and no ranking here: only the library's answers arranged for a template or a JSON body.
Details: docs/internals/web.md#views
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from crawler.base.budget import DEFAULT_HEADROOM_GIB, budget_json, usable_bytes
from crawler.base.units import GIB
from crawler.catalog.reader import Reader
from crawler.library.search_json import provenance_json
from crawler.profile.mtp_grade import mtp_grade

if TYPE_CHECKING:
    from crawler.catalog import Catalog
    from crawler.catalog.quant_detail import QuantDetail
    from crawler.library.search_request import SearchRequest

__all__ = ["model_view", "quant_view", "scans_view", "search_view"]

DEFAULT_BUDGET_GIB = 24.0
#: The model page's table and heatmap rows, and its scatter's points, at most.
MAX_ROWS = 100
MAX_POINTS = 2000


def search_view(reader: Reader, req: SearchRequest) -> dict[str, Any]:
    """``quants search --json``'s document for ``req`` (NothingFits / UsageError propagate)."""
    from crawler.library.search import search
    from crawler.library.search_json import search_json
    from crawler.schemas import versioned

    return versioned(search_json(search(reader, req)))


def model_view(reader: Reader, query: str, *, chart: bool) -> dict[str, Any]:
    """``quants compare --json`` for ``query``, plus (``chart``) the heatmap and the scatter.

    With ``chart`` (the model page) only the quants the page shows are turned into JSON and
    have their tensor groups loaded: a popular base model has thousands of quants, and loading
    every one's groups took most of the page's seconds on the 200k-quant benchmark catalog.
    """
    from crawler.catalog.comparison import comparison_json, load_comparison, with_groups

    comparison = load_comparison(reader, query, groups=not chart)
    if not chart:
        from crawler.schemas import versioned

        return versioned(comparison_json(comparison))
    from crawler.charts import ScatterPoint, heatmap_svg, quant_group_bits, scatter_svg

    # The page's table and heatmap keep the best estimated quants (still smallest first), the
    # scatter at most MAX_POINTS.
    quants = comparison.quants
    ranked = sorted(range(len(quants)), key=lambda i: -(quants[i].quality or -1.0))
    kept = with_groups(reader, [quants[i] for i in sorted(ranked[:MAX_ROWS])])
    doc = comparison_json(replace(comparison, quants=tuple(kept)))
    doc["total_quants"] = len(quants)
    rows = [
        (_quant_name(q.repo_id, q.quant_label, q.path),
         [(g.name, g.min_bits, g.max_bits) for g in q.groups])
        for q in kept
    ]  # fmt: skip
    doc["heatmap_svg"] = heatmap_svg(
        quant_group_bits(rows), title=f"Bits per tensor group: {comparison.base_model}",
        row_axis="quant (uploader/repo: label)",
    )  # fmt: skip
    points = [
        ScatterPoint(_quant_name(q.repo_id, q.quant_label, q.path), q.size_bytes, q.quality)
        for q in (quants[i] for i in sorted(ranked[:MAX_POINTS]))
        if q.quality is not None
    ]
    doc["scatter_svg"] = scatter_svg(
        points, title=f"Size vs estimated quality: {comparison.base_model}"
    )
    return doc


def _quant_name(repo_id: str, label: str | None, path: str) -> str:
    return f"{repo_id}: {label or path}"


def quant_view(
    reader: Reader,
    repo_id: str,
    path: str,
    *,
    vram_gib: float | None,
    ctx: int | None,
    chart: bool,
    headroom_gib: float = DEFAULT_HEADROOM_GIB,
) -> dict[str, Any] | None:
    """One quant: ``inspect``-like profile, per-layer bits, memory curves, versions; None if
    the catalog has no such live quant."""
    from crawler.catalog.quant_detail import load_quant
    from crawler.charts import heatmap_svg, layer_group_bits, memory_curves, memory_svg

    q = load_quant(reader, repo_id, path)
    if q is None:
        return None
    # The budget line is drawn where search draws it: the memory less the headroom.
    vram = int((vram_gib if vram_gib is not None else DEFAULT_BUDGET_GIB) * GIB)
    headroom = int(headroom_gib * GIB)
    budget = usable_bytes(vram, headroom)
    layers = layer_group_bits(_tensor_rows(q))
    doc = _quant_json(q)
    doc["layers"] = layers.to_json()
    memory: dict[str, Any] = {
        "status": q.memory_status,
        "reason": q.memory_reason,
        "budget_bytes": budget,
        "budget": budget_json(vram, headroom),
        "curves": [],
    }
    curves = []
    if q.coefficients is not None:
        from crawler.base.errors import InvalidConfig
        from crawler.fit import RunConfig, estimate

        base = RunConfig(ctx=ctx or 4096, flash_attn="on")
        curves = memory_curves(q.coefficients, base, budget_bytes=budget)
        memory["curves"] = [c.to_json() for c in curves]
        if ctx is not None:
            try:
                memory["at_ctx"] = {"ctx": ctx, **estimate(q.coefficients, base).bytes_dict()}
            except InvalidConfig as exc:
                memory["at_ctx"] = {"ctx": ctx, "error": str(exc)}
    doc["memory"] = memory
    if chart:
        name = _quant_name(q.repo_id, q.quant_label, q.path)
        doc["layers_svg"] = (
            heatmap_svg(layers, title=f"Bits per layer and group: {name}", row_axis="layer")
            if layers.row_labels
            else None
        )
        doc["memory_svg"] = (
            memory_svg(curves, budget_bytes=budget, title=f"Device memory vs context: {name}")
            if curves
            else None
        )
    return doc


def _tensor_rows(q: QuantDetail) -> tuple[Any, ...]:
    """The quant's tensors with group, layer and bits: its stored headers profiled again by
    crawler.profile.build.build_profile (what the crawl ran on them)."""
    from crawler.base.errors import QuantsError
    from crawler.profile.build import build_profile, merge_headers

    if not q.shards:
        return ()
    headers = [s.header for s in q.shards]
    try:
        header = headers[0] if len(headers) == 1 else merge_headers(headers)
        return build_profile(header, file_name=q.path, repo_id=q.repo_id).tensors
    except (QuantsError, ValueError, KeyError):  # a table today's rules cannot read
        return ()


def _quant_json(q: QuantDetail) -> dict[str, Any]:
    v = q.verdicts
    return {
        "repo": q.repo_id,
        "author": q.author,
        "path": q.path,
        "revision": q.revision,
        "quant_label": q.quant_label,
        "architecture": q.architecture,
        "base_model": q.base_model,
        "size_bytes": q.size_bytes,
        "n_params": q.n_params,
        "bpw": q.bpw,
        "quality": q.quality,
        "loadable_by_mainline": v["loadable_by_mainline"],
        "groups": {
            g.name: {
                "n_params": g.n_params,
                "n_bytes": g.n_bytes,
                "bpw": g.bpw,
                "min_bits": g.min_bits,
                "max_bits": g.max_bits,
            }
            for g in q.groups
        },
        "mtp": {
            "present": v["mtp_present"],
            "state": v["mtp_state"],
            "preserved": v["mtp_preserved"],
            "min_bits": v["mtp_min_bits"],
            **mtp_grade(v["mtp_state"], v["mtp_min_bits"]).to_json(),
        },
        "attention": {"min_bits": v["attn_min_bits"], "preserved": v["attn_preserved"]},
        "claims": list(q.claims),
        "provenance": provenance_json(q.source, q.source_revision),
        "unreadable": list(q.unreadable),
        "versions": [
            {
                "revision": ver.revision,
                "size_bytes": ver.size_bytes,
                "analysed_at": ver.analysed_at.isoformat() if ver.analysed_at else None,
                "scan_id": ver.scan_id,
                "changes": list(ver.changes),
            }
            for ver in q.versions
        ],
    }


def scans_view(catalog: Catalog, reader: Reader, *, limit: int) -> dict[str, Any]:
    """Scan history, errors by kind and the newest errors, the latest scan's changes, watches."""
    from crawler.catalog.changes import changes_since
    from crawler.catalog.history import list_scans
    from crawler.catalog.scan_errors import error_counts, recent_errors
    from crawler.catalog.watches import list_watches, recent_hits

    return {
        "scans": [s.to_json() for s in list_scans(catalog, limit=limit)],
        "errors_by_kind": error_counts(reader),
        "errors": [e.to_json() for e in recent_errors(reader, limit=limit)],
        "changes": changes_since(catalog).to_json(),
        "watches": [w.to_json() for w in list_watches(catalog)],
        "watch_hits": [h.to_json() for h in recent_hits(catalog, limit=limit)],
    }
