"""The search read path's SQL: filters, memory bound, sort bounds, and completing candidates.

Plain SQL through a :class:`~crawler.catalog.reader.Reader` (no SQLAlchemy: see its docstring).
The cheap, exact-safe part of the search runs in the database
(:mod:`crawler.catalog.ordered` puts it together per sort):

* the memory prefilter: :func:`crawler.rank.lower_bound_bytes` written in SQL over the quants'
  ``fit_*`` columns (weights + experts + MTP block and draft KV + KV per token x ctx + fixed +
  compute floor + CUDA constants <= budget). It is a lower bound of the exact estimate, so it
  never drops a quant that fits; the exact estimate in :func:`crawler.rank.rank_candidates`
  decides the rest;
* the column filters (architecture, author, base model, label, loadable, MTP, attention bits);
* for query tokens that contain a digit (which :class:`~crawler.rank.QueryMatcher` matches only
  exactly), a substring test, so "qwen3.6 27b" narrows the scan in SQL;
* the upper bounds ``--sort speed|margin|ctx`` stream by (:func:`speed_bound_sql`,
  :func:`bound_sql`, :func:`ctx_bound_sql`).

Rows become partial candidates; :func:`materializer` parses the coefficient JSON and loads the
tensor groups only for the candidates ranking estimates.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from crawler.catalog.reader import Reader, as_bool, as_datetime, placeholders
from crawler.fit import MemoryCoefficients
from crawler.rank import Budget, Candidate, Filters, GroupStats, RunSpec, prefilter_terms

__all__ = [
    "CANDIDATE_COLUMNS",
    "VERDICT_COLUMNS",
    "Where",
    "bound_sql",
    "candidate_from_row",
    "ctx_bound_sql",
    "filter_sql",
    "load_groups",
    "materializer",
    "sibling_lookup",
    "speed_bound_sql",
    "verdicts",
]

# Bind-parameter budget per IN (...) list; SQLite allows 32766 variables, PostgreSQL 65535.
_IN_CHUNK = 5000

#: The seven verdict columns search and compare select, in the order :func:`verdicts` reads.
VERDICT_COLUMNS = (
    "q.mtp_present, q.mtp_state, q.mtp_preserved, q.mtp_min_bits, q.attn_min_bits,"
    " q.attn_preserved, q.loadable_by_mainline"
)
#: The 20 leading columns every candidate query selects (see :func:`candidate_from_row`).
CANDIDATE_COLUMNS = (
    "q.id, r.repo_id, q.path, q.size_bytes, q.quant_label, q.architecture,"
    f" COALESCE(q.base_model, r.base_model), r.author, q.n_params, {VERDICT_COLUMNS},"
    " q.dynamic, r.downloads, r.likes, r.last_modified"
)
#: quants q, their repo r and memory model m.
JOINED = "quants q JOIN repos r ON r.id = q.repo_pk JOIN memory_models m ON m.quant_id = q.id"


@dataclass(slots=True)
class Where:
    """SQL conditions joined by AND, with their ``:name`` parameters."""

    parts: list[str] = field(default_factory=list)
    params: dict[str, Any] = field(default_factory=dict)
    repo: bool = False  # a condition reads the repos table (r)

    def add(self, sql: str, **params: Any) -> None:
        """One condition (its parameter names must be unique in this clause)."""
        self.parts.append(sql)
        self.params.update(params)

    @property
    def sql(self) -> str:
        """The conditions, parenthesised and joined by AND (TRUE when there are none)."""
        return " AND ".join(f"({p})" for p in self.parts) or "TRUE"


def _lower(col: str) -> str:
    return f"lower(COALESCE({col}, ''))"


def filter_sql(filters: Filters) -> Where:
    """SQL for :meth:`Filters.accepts` minus the fuzzy part (same semantics, case-insensitive)."""
    w = Where()
    # ``live`` (kept by crawler.catalog.store) = neither the quant nor its repo vanished; an
    # equality, so the search indexes can serve it (``IS TRUE`` is not indexable).
    w.add("q.live = TRUE")
    if filters.mtp:
        w.add("q.mtp_present = TRUE AND q.mtp_preserved = TRUE")
    if filters.min_attn_bits is not None:
        w.add("q.attn_min_bits >= :min_attn_bits", min_attn_bits=filters.min_attn_bits)
    if filters.arch:
        w.add(f"{_lower('q.architecture')} = :arch", arch=filters.arch.lower())
    if filters.author:
        w.repo = True
        w.add(f"{_lower('r.author')} = :author", author=filters.author.lower())
    if filters.base:
        b = filters.base.lower()
        w.repo = True
        base = _lower("COALESCE(q.base_model, r.base_model)")
        w.add(
            f"{base} = :base OR {base} LIKE :base_suffix ESCAPE '\\'",
            base=b,
            base_suffix=f"%/{escape_like(b)}",
        )
    if filters.label:
        w.add(f"{_lower('q.quant_label')} = :label", label=filters.label.lower())
    if filters.loadable:
        w.add("q.loadable_by_mainline = TRUE")
    if filters.vision:
        w.add(
            "EXISTS (SELECT 1 FROM files f WHERE f.repo_pk = q.repo_pk AND f.kind = 'mmproj'"
            " AND f.vanished_at IS NULL)"
        )
    matcher = filters.matcher()
    if matcher is not None:
        # quants.search_text (crawler.catalog.store.search_text_sql) is NULL only when too long
        # to index: those rows pass here and the Python matcher decides, as it does for all.
        for i, tok in enumerate(matcher.required_substrings):
            w.add(
                f"q.search_text LIKE :tok{i} ESCAPE '\\' OR q.search_text IS NULL",
                **{f"tok{i}": f"%{escape_like(tok)}%"},
            )
    return w


def escape_like(text: str) -> str:
    """``text`` as a literal inside a LIKE pattern with ``ESCAPE '\\'``."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def bound_sql(spec: RunSpec, budget: Budget) -> tuple[str, dict[str, Any]]:
    """(expression, params): :func:`crawler.rank.lower_bound_bytes` over the quants' ``fit_*``
    columns less its constant, which the condition ``expression <= :bound_limit`` accounts for.

    Those are copies of ``memory_models``' scalar columns, NULL unless its status is "ok", so the
    comparison is not true for unmodelled quants and the search indexes cover it. Floats on
    purpose: they keep SQLite and PostgreSQL integer rules out of the comparison.
    """
    t = prefilter_terms(spec)
    fixed, per_token, params = _bound_terms(spec)
    params.update(bound_ctx=float(t.ctx), bound_limit=float(budget.device_bytes - t.constant))
    return f"{fixed} + ({per_token}) * :bound_ctx", params


def ctx_bound_sql(spec: RunSpec, budget: Budget) -> tuple[str, dict[str, Any]]:
    """(expression, params): an upper bound of the largest context that fits
    (:func:`crawler.rank._with_max_ctx`), for ``--sort ctx``.

    At the largest context ``n`` that fits, the lower bound is within the budget:
    ``fixed + n * (per_token + mask) <= budget - constants`` once ``n >= 512`` (the FA mask
    counts from there), so ``n <= max(512, room / (per_token + mask))``; and ``n`` is capped
    at the trained context (1 Mi tokens when unknown) or the requested one, whichever is larger.
    """
    t = prefilter_terms(spec)
    fixed, per_token, params = _bound_terms(spec)
    cfg_ctx = float(t.ctx)
    params.update(
        ctx_room=float(budget.device_bytes - t.base_constant),
        ctx_mask=float(t.mask_per_token),
        ctx_cfg=cfg_ctx,
        ctx_untrained=max(float(1 << 20), cfg_ctx),
    )
    room = f"(:ctx_room - ({fixed})) / ({per_token} + :ctx_mask)"
    cap = (
        "CASE WHEN COALESCE(q.fit_ctx_train, 0) <= 0 THEN :ctx_untrained"
        " WHEN q.fit_ctx_train < :ctx_cfg THEN :ctx_cfg"
        " ELSE CAST(q.fit_ctx_train AS DOUBLE PRECISION) END"
    )
    return (
        f"CASE WHEN {room} < 512.0 THEN 512.0 WHEN {room} < {cap} THEN {room} ELSE {cap} END",
        params,
    )


def speed_bound_sql(spec: RunSpec, budget: Budget) -> tuple[str, dict[str, Any]]:
    """(expression, params): :meth:`crawler.speed.SpeedBound.tok_s` over the quants' columns,
    an upper bound of the estimated tok/s, for ``--sort speed`` (needs the GPU's bandwidth)."""
    if budget.bandwidth_gb_s is None:
        raise ValueError("--sort speed needs the GPU's bandwidth")
    if spec.mtp_auto and not spec.mtp:
        # MTP may be on or off per quant (crawler.fit.choose): the larger of both bounds.
        on, on_params = _speed_bound_sql(dataclasses.replace(spec, mtp=True), budget, "_on")
        off, off_params = _speed_bound_sql(spec, budget, "")
        return f"(CASE WHEN {on} > {off} THEN {on} ELSE {off} END)", {**off_params, **on_params}
    return _speed_bound_sql(spec, budget, "")


def _speed_bound_sql(spec: RunSpec, budget: Budget, sfx: str) -> tuple[str, dict[str, Any]]:
    from crawler.speed import MOE_BOUND_SLACK, VERIFY_EXPERTS_K, speed_bound

    assert budget.bandwidth_gb_s is not None
    b = speed_bound(
        budget.bandwidth_gb_s,
        mtp=spec.mtp,
        draft_n_max=spec.spec_draft_n_max,
        experts_on_host=spec.cpu_moe,
    )
    rb, layers = "COALESCE(q.fit_read_bytes, 0)", "COALESCE(q.fit_moe_layers, 0)"
    seconds = f"({rb} / :speed_bw{sfx} + {layers} * :speed_tau{sfx})"
    cost = (
        f"(:speed_base{sfx} + :speed_k{sfx} * COALESCE(q.fit_draft_bytes, 0) / ({rb} + 1.0)"
        f" + :speed_verify{sfx} * COALESCE(q.fit_verify_experts, 0.0))"
    )
    slack = f"CASE WHEN {layers} > 0 THEN :speed_slack{sfx} ELSE 1.0 END"
    expr = (
        f"CASE WHEN {seconds} <= 0 THEN 1e300"
        f" ELSE (:speed_expected{sfx} / {cost}) / {seconds} * {slack} END"
    )
    return expr, {
        f"speed_bw{sfx}": b.bw,
        f"speed_tau{sfx}": b.moe_layer_seconds,
        f"speed_base{sfx}": b.base_cost,
        f"speed_k{sfx}": float(b.draft_n_max),
        f"speed_verify{sfx}": 1.0 if b.draft_n_max >= VERIFY_EXPERTS_K else 0.0,
        f"speed_expected{sfx}": b.expected,
        f"speed_slack{sfx}": MOE_BOUND_SLACK,
    }


def _bound_terms(spec: RunSpec) -> tuple[str, str, dict[str, Any]]:
    """(context-independent bytes, bytes per context token, params) of the lower bound."""
    t = prefilter_terms(spec)
    if spec.tier == "partial":  # crawler.rank.lower_bound_bytes: only the compute floor
        # (q.fit_weights_bytes * 0 keeps the bound NULL for unmodelled quants, as below)
        fixed_sql = "q.fit_weights_bytes * 0.0 + COALESCE(q.fit_ubatch_bytes, 0) * :bound_ubatch"
        return fixed_sql, "0.0", {"bound_ubatch": float(t.ubatch)}
    fixed = ["q.fit_weights_bytes"]
    per_token = ["COALESCE(q.fit_kv_per_token, 0) * :bound_kv"]
    params: dict[str, Any] = {"bound_kv": float(t.kv_ratio), "bound_fixed": float(t.fixed_ratio)}
    if not spec.cpu_moe and spec.tier == "gpu":
        fixed.append("COALESCE(q.fit_expert_bytes, 0)")
    if spec.mtp:
        fixed.append("COALESCE(q.fit_mtp_bytes, 0)")
        per_token.append("COALESCE(q.fit_mtp_kv_per_token, 0) * :bound_mtp")
        params["bound_mtp"] = float(t.mtp_kv_ratio)
    fixed.append("COALESCE(q.fit_fixed_bytes, 0) * :bound_fixed")
    fixed.append("COALESCE(q.fit_ubatch_bytes, 0) * :bound_ubatch")
    params["bound_ubatch"] = float(t.ubatch)
    return " + ".join(fixed), " + ".join(per_token), params


def bounded(filters: Filters, spec: RunSpec, budget: Budget) -> Where:
    """The filters and the memory bound."""
    w = filter_sql(filters)
    expr, params = bound_sql(spec, budget)
    w.add(f"{expr} <= :bound_limit", **params)
    return w


def count_left_out(
    reader: Reader, spec: RunSpec, budget: Budget, filters: Filters
) -> tuple[int, int]:
    """(too big by the SQL bound, memory rules not modelled) among the filtered quants."""
    w = filter_sql(filters)
    expr, params = bound_sql(spec, budget)
    kind = (
        "CASE WHEN m.status <> 'ok' THEN 'unknown'"
        f" WHEN {expr} <= :bound_limit THEN 'candidate' ELSE 'too_big' END"
    )
    rows = reader.rows(
        f"SELECT {kind}, COUNT(*) FROM {JOINED} WHERE {w.sql} GROUP BY 1", {**w.params, **params}
    )
    counts = {str(k): int(n) for k, n in rows}
    return counts.get("too_big", 0), counts.get("unknown", 0)


def candidate_from_row(
    row: Sequence[Any],
    *,
    coefficients: MemoryCoefficients,
    groups: tuple[GroupStats, ...] = (),
    quality_hint: float | None = None,
    bound_hint: float | None = None,
) -> Candidate:
    """A Candidate from a row that starts with :data:`CANDIDATE_COLUMNS`."""
    return Candidate(
        quant_id=row[0],
        repo_id=row[1],
        path=row[2],
        size_bytes=row[3],
        quant_label=row[4],
        architecture=row[5],
        base_model=row[6],
        author=row[7],
        n_params=row[8],
        **verdicts(row, 9),
        dynamic=as_bool(row[16]),
        downloads=row[17],
        likes=row[18],
        last_modified=as_datetime(row[19]),
        coefficients=coefficients,
        groups=groups,
        quality_hint=quality_hint,
        bound_hint=bound_hint,
    )


def verdicts(row: Sequence[Any], start: int) -> dict[str, Any]:
    """The :data:`VERDICT_COLUMNS` of ``row`` from index ``start``, by field name (SQLite's 0/1
    booleans as bools)."""
    present, state, preserved, mtp_bits, attn_bits, attn_ok, loadable = row[start : start + 7]
    return {
        "mtp_present": as_bool(present),
        "mtp_state": state,
        "mtp_preserved": as_bool(preserved),
        "mtp_min_bits": mtp_bits,
        "attn_min_bits": attn_bits,
        "attn_preserved": as_bool(attn_ok),
        "loadable_by_mainline": as_bool(loadable),
    }


def _coefficients(value: Any) -> MemoryCoefficients:
    return MemoryCoefficients.from_json(json.loads(value or "{}"))


def materializer(
    reader: Reader, *, vision: bool = False
) -> Callable[[Sequence[Candidate]], list[Candidate]]:
    """Complete partial candidates (full coefficients, tensor groups) with two queries a batch.

    Identical coefficient JSON (re-uploads and mirrors of one file) is parsed once and shared,
    so ranking estimates it once (:func:`crawler.rank.rank_candidates` keys on the object).
    """
    parsed: dict[str, MemoryCoefficients] = {}

    def coefficients(text: Any) -> MemoryCoefficients:
        key = text or "{}"
        co = parsed.get(key)
        if co is None:
            co = parsed[key] = _coefficients(key)
        return co

    def complete(batch: Sequence[Candidate]) -> list[Candidate]:
        text: dict[int, Any] = {}
        for chunk in _chunks([c.quant_id for c in batch]):
            marks, params = placeholders("id", chunk)
            text.update(
                reader.rows(
                    "SELECT quant_id, CAST(coefficients AS TEXT) FROM memory_models"
                    f" WHERE quant_id IN ({marks})",
                    params,
                )
            )
        missing = [c.quant_id for c in batch if not c.groups]
        found = load_groups(reader, missing) if missing else {}
        projectors = _projectors(reader, sorted({c.repo_id for c in batch})) if vision else {}
        return [
            dataclasses.replace(
                c,
                coefficients=coefficients(text.get(c.quant_id)),
                groups=c.groups or found.get(c.quant_id, ()),
                projector_bytes=projectors.get(c.repo_id, c.projector_bytes),
            )
            for c in batch
        ]

    return complete


def _projectors(reader: Reader, repo_ids: Sequence[str]) -> dict[str, int]:
    """repo_id -> bytes of its smallest present projector file (``files.kind = 'mmproj'``)."""
    out: dict[str, int] = {}
    for chunk in _chunks(repo_ids):
        marks, params = placeholders("repo", chunk)
        rows = reader.rows(
            "SELECT r.repo_id, MIN(f.size_bytes) FROM files f JOIN repos r ON r.id = f.repo_pk"
            f" WHERE f.kind = 'mmproj' AND f.vanished_at IS NULL AND r.repo_id IN ({marks})"
            " GROUP BY r.repo_id",
            params,
        )
        out.update((str(r), int(n)) for r, n in rows if n is not None)
    return out


def _chunks(ids: Sequence[Any]) -> Iterator[Sequence[Any]]:
    for i in range(0, len(ids), _IN_CHUNK):
        yield ids[i : i + _IN_CHUNK]


def load_groups(reader: Reader, ids: Sequence[int]) -> dict[int, tuple[GroupStats, ...]]:
    """The tensor groups of the quants ``ids``, in ``group_name`` order."""
    found: dict[int, list[GroupStats]] = {}
    for chunk in _chunks(ids):
        marks, params = placeholders("id", chunk)
        rows = reader.rows(
            "SELECT quant_id, group_name, n_params, n_bytes, bpw, min_bits, max_bits"
            f" FROM tensor_groups WHERE quant_id IN ({marks}) ORDER BY quant_id, group_name",
            params,
        )
        for qid, name, n_params, n_bytes, bpw, lo, hi in rows:
            found.setdefault(qid, []).append(GroupStats(name, n_params, n_bytes, bpw, lo, hi))
    return {k: tuple(v) for k, v in found.items()}


def sibling_lookup(reader: Reader) -> Callable[[Sequence[str]], dict[str, tuple[str, ...]]]:
    """``repo_ids -> {repo_id: paths of the repo's present files}``, one query per call.

    Ranking calls it once with the repos of the rows it returns, for the ``-hf`` choice.
    """

    def lookup(repo_ids: Sequence[str]) -> dict[str, tuple[str, ...]]:
        found: dict[str, set[str]] = {r: set() for r in repo_ids}
        if not repo_ids:
            return {}
        # Repo keys first: a join lets the planner scan the quants' vanished_at index.
        marks, params = placeholders("repo", list(found))
        pks = dict(reader.rows(f"SELECT id, repo_id FROM repos WHERE repo_id IN ({marks})", params))
        if not pks:
            return dict.fromkeys(repo_ids, ())
        marks, params = placeholders("pk", list(pks))
        for table in ("files", "quants"):
            # vanished_at tested here, not in SQL: with it in the WHERE clause SQLite walks
            # ix_quants_live (every live quant) instead of the few rows of these repos.
            rows = reader.rows(
                f"SELECT repo_pk, path, vanished_at FROM {table} WHERE repo_pk IN ({marks})",
                params,
            )
            for repo_pk, path, vanished_at in rows:
                if vanished_at is None:
                    found[pks[repo_pk]].add(path)
        return {r: tuple(sorted(paths)) for r, paths in found.items()}

    return lookup
