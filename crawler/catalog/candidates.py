"""The search read path's SQL: filters, memory bound, sort bounds, and completing candidates.

Plain SQL through a Reader; the cheap, exact-safe part of the search runs in the database.
Details: docs/internals/catalog.md#candidates
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from crawler.base.records import replaced
from crawler.catalog.name_index import by_ids, escape_like, name_candidates
from crawler.catalog.reader import Reader, as_bool, as_datetime, placeholders
from crawler.fit import MemoryCoefficients
from crawler.profile.groups import GroupStats
from crawler.ranking.bounds import bound_sql
from crawler.ranking.model import HEAD_MAY_DRAFT_SQL, Budget, Candidate, Filters, RunSpec

__all__ = [
    "CANDIDATE_COLUMNS",
    "PARTIAL_COLUMNS",
    "SHAPE_COLUMNS",
    "STREAM_CHUNK",
    "VERDICT_COLUMNS",
    "Where",
    "candidate_from_row",
    "desc_key",
    "escape_like",
    "filter_sql",
    "load_groups",
    "materializer",
    "partial_candidate",
    "sibling_lookup",
    "verdicts",
]

#: The columns a quant's search shape is made of: the stored quality score and every column a
#: memory or sort bound reads (crawler.ranking.bounds: the ``fit_*`` copies, and the MTP verdicts
#: the speed bound tests). Quants with equal values get one shape (migrations 0010, 0013, 0014
#: and 0016 keep their own copies of this list; crawler.catalog.search_index writes it).
SHAPE_COLUMNS = (
    "quality_score",
    "fit_weights_bytes",
    "fit_expert_bytes",
    "fit_mtp_bytes",
    "fit_kv_per_token",
    "fit_fixed_bytes",
    "fit_ubatch_bytes",
    "fit_mtp_kv_per_token",
    "fit_read_bytes",
    "fit_moe_layers",
    "fit_draft_bytes",
    "fit_verify_experts",
    "fit_type_eff",
    "fit_trunk_layers",
    "fit_slot_bytes",
    "fit_slot_kv_per_token",
    "fit_resident_bytes",
    "fit_ctx_train",
    "mtp_present",
    "mtp_preserved",
    "fit_swa_kv_per_cell",
    "fit_swa_cells",
)

# Bind-parameter budget per IN (...) list; SQLite allows 32766 variables, PostgreSQL 65535.
_IN_CHUNK = 5000

#: The seven verdict columns search and compare select, in the order verdicts reads.
VERDICT_COLUMNS = (
    "q.mtp_present, q.mtp_state, q.mtp_preserved, q.mtp_min_bits, q.attn_min_bits,"
    " q.attn_preserved, q.loadable_by_mainline"
)
#: The 20 leading columns every candidate query selects (see candidate_from_row).
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
    """SQL for Filters.accepts minus the fuzzy part (same semantics, case-insensitive)."""
    w = Where()
    # ``live`` (kept by crawler.catalog.store) = neither the quant nor its repo vanished; an
    # equality, so the search indexes can serve it (``IS TRUE`` is not indexable).
    w.add("q.live = TRUE")
    if filters.mtp:
        w.add(HEAD_MAY_DRAFT_SQL)
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
        # quants.search_text (crawler.catalog.search_index.search_text_sql) is NULL only when too
        # long to index: those rows pass here and the Python matcher decides, as it does for all.
        for i, tok in enumerate(matcher.required_substrings):
            w.add(
                f"q.search_text LIKE :tok{i} ESCAPE '\\' OR q.search_text IS NULL",
                **{f"tok{i}": f"%{escape_like(tok)}%"},
            )
    return w


def bounded(filters: Filters, spec: RunSpec, budget: Budget) -> Where:
    """The filters and the memory bound."""
    w = filter_sql(filters)
    expr, params = bound_sql(spec, budget)
    w.add(f"{expr} <= :bound_limit", **params)
    return w


#: Most quants a name query's index may find for count_left_out to read only those.
_COUNT_BY_NAME_MAX = 20000


def count_left_out(
    reader: Reader, spec: RunSpec, budget: Budget, filters: Filters, *, by_name: bool = True
) -> tuple[int, int]:
    """(too big by the SQL bound, memory rules not modelled) among the filtered quants.

    A query's fuzzy part is not SQL: its rows are counted after the query's own matcher, so a
    count never includes quants of another model; those the name index finds (at most
    _COUNT_BY_NAME_MAX; ``by_name`` False: never) are the only rows read.
    """
    w = filter_sql(filters)
    expr, params = bound_sql(spec, budget)
    kind = (
        "CASE WHEN m.status <> 'ok' THEN 'unknown'"
        f" WHEN {expr} <= :bound_limit THEN 'candidate' ELSE 'too_big' END"
    )
    matcher = filters.matcher()
    counts: dict[str, int] = {}
    if matcher is None:
        rows = reader.rows(
            f"SELECT {kind}, COUNT(*) FROM {JOINED} WHERE {w.sql} GROUP BY 1",
            {**w.params, **params},
        )
        counts = {str(k): int(n) for k, n in rows}
    else:
        joined = JOINED
        id_params: dict[str, Any] = {}
        ids = name_candidates(reader, matcher, _COUNT_BY_NAME_MAX) if by_name else None
        if ids is not None:
            joined, in_ids, id_params = by_ids(reader, JOINED, ids)
            w.add(in_ids)
        names = "r.repo_id, COALESCE(q.base_model, r.base_model), q.path, q.quant_label"
        for k, repo_id, base, path, label, arch in reader.stream(
            f"SELECT {kind}, {names}, q.architecture FROM {joined} WHERE {w.sql}",
            {**w.params, **params, **id_params},
        ):
            if matcher.matches_names(repo_id, base, path, label, arch):
                counts[str(k)] = counts.get(str(k), 0) + 1
    return counts.get("too_big", 0), counts.get("unknown", 0)


def candidate_from_row(
    row: Sequence[Any],
    *,
    coefficients: MemoryCoefficients,
    groups: tuple[GroupStats, ...] = (),
    quality_hint: float | None = None,
    bound_hint: float | None = None,
) -> Candidate:
    """A Candidate from a row that starts with CANDIDATE_COLUMNS."""
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
    """The VERDICT_COLUMNS of ``row`` from index ``start``, by field name (SQLite's 0/1
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


#: What a stored coefficient text that is not one raises while parsed (old data, a bug).
UNREADABLE = (ValueError, TypeError, KeyError, RecursionError)


def materializer(
    reader: Reader, *, vision: bool = False, unreadable: list[str] | None = None
) -> Callable[[Sequence[Candidate]], list[Candidate]]:
    """Complete partial candidates (full coefficients, tensor groups, provenance) with two
    queries a batch.

    Identical coefficient JSON (re-uploads and mirrors of one file) is parsed once and shared,
    so ranking estimates it once (crawler.ranking.rank.rank_candidates keys on the object). A
    candidate whose stored coefficients cannot be read is left out and its ``repo/path`` added
    to ``unreadable``: one bad row never takes the search down.
    """
    parsed: dict[str, MemoryCoefficients | None] = {}
    skipped = unreadable if unreadable is not None else []

    def coefficients(text: Any) -> MemoryCoefficients | None:
        key = text or "{}"
        if key in parsed:
            return parsed[key]
        try:
            co: MemoryCoefficients | None = _coefficients(key)
        except UNREADABLE:
            co = None
        parsed[key] = co
        return co

    def complete(batch: Sequence[Candidate]) -> list[Candidate]:
        text: dict[int, tuple[Any, Any, Any]] = {}
        for chunk in _chunks([c.quant_id for c in batch]):
            marks, params = placeholders("id", chunk)
            for qid, coeffs, source, revision in reader.rows(
                "SELECT q.id, CAST(m.coefficients AS TEXT), q.source, q.source_revision"
                " FROM quants q LEFT JOIN memory_models m ON m.quant_id = q.id"
                f" WHERE q.id IN ({marks})",
                params,
            ):
                text[qid] = (coeffs, source, revision)
        missing = [c.quant_id for c in batch if not c.groups]
        found = load_groups(reader, missing) if missing else {}
        projectors = _projectors(reader, sorted({c.repo_id for c in batch})) if vision else {}
        out: list[Candidate] = []
        for c in batch:
            coeffs, source, revision = text.get(c.quant_id, (None, None, None))
            co = coefficients(coeffs)
            if co is None:
                skipped.append(f"{c.repo_id}/{c.path}")
                continue
            out.append(
                replaced(
                    c,
                    coefficients=co,
                    groups=c.groups or found.get(c.quant_id, ()),
                    projector_bytes=projectors.get(c.repo_id, c.projector_bytes),
                    source=source,
                    source_revision=revision,
                )
            )
        return out

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
    """The tensor groups of the quants ``ids``, in ``group_name`` order.

    Equal rows (re-uploads and mirrors of one file, the quants of one recipe) share one frozen
    GroupStats: a base model's thousands of quants build far fewer objects.
    """
    found: dict[int, list[GroupStats]] = {}
    shared: dict[tuple[Any, ...], GroupStats] = {}
    # In id order: each chunk then reads a narrower stretch of the index (~25% faster for the
    # thousands of quants of one base model), and an id given twice is read once.
    for chunk in _chunks(sorted(set(ids))):
        marks, params = placeholders("id", chunk)
        rows = reader.rows(
            "SELECT quant_id, group_name, n_params, n_bytes, bpw, min_bits, max_bits"
            f" FROM tensor_groups WHERE quant_id IN ({marks}) ORDER BY quant_id, group_name",
            params,
        )
        for row in rows:
            stats = row[1:]
            group = shared.get(stats)
            if group is None:
                group = shared[stats] = GroupStats(*stats)
            found.setdefault(row[0], []).append(group)
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


#: Rows read from the database at a time when streaming.
STREAM_CHUNK = 256
#: The columns of a partial candidate (partial_candidate): a candidate's own, the memory
#: model's scalars the search reads before the exact estimate, the stored quality score.
PARTIAL_COLUMNS = (
    f"SELECT {CANDIDATE_COLUMNS}, m.n_expert, m.n_expert_used, m.n_embd, m.n_vocab,"
    " m.mtp_available, q.quality_score"
)


def desc_key(value: Any) -> tuple[bool, float]:
    """Descending, missing last (as the ORDER BY ... DESC NULLS LAST of the reads)."""
    return (value is None, 0.0 if value is None else -float(value))


def partial_candidate(row: tuple[Any, ...], bound_hint: float | None) -> Candidate:
    """A candidate from a PARTIAL_COLUMNS row, its coefficients only the scalars ranking reads
    before it completes the candidate (materializer); ``bound_hint``: its sort bound."""
    n_expert, n_used, n_embd, n_vocab, mtp = row[20:25]
    coefficients = MemoryCoefficients(
        status="ok",
        n_expert=int(n_expert or 0),
        n_expert_used=int(n_used or 0),
        n_embd=int(n_embd or 0),
        n_vocab=int(n_vocab or 0),
        mtp_available=bool(mtp),
    )
    hint = None if row[25] is None else float(row[25])
    return candidate_from_row(
        row, coefficients=coefficients, quality_hint=hint, bound_hint=bound_hint
    )
