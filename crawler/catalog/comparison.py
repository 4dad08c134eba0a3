"""quants compare's read path: every quant of one base model, with its tensor groups.

Plain SQL through a Reader; an exact base model is answered without the fuzzy scan.
Details: docs/internals/catalog.md#comparison
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from crawler.catalog.candidates import VERDICT_COLUMNS, escape_like, load_groups, verdicts
from crawler.catalog.measured_rows import measured_values
from crawler.catalog.name_index import by_ids, name_candidates
from crawler.catalog.reader import Reader
from crawler.profile.groups import GroupStats
from crawler.profile.measured import MeasuredValue
from crawler.profile.mtp_grade import mtp_grade

if TYPE_CHECKING:
    from crawler.ranking.query import QueryMatcher

__all__ = ["ComparedQuant", "Comparison", "comparison_json", "load_comparison", "with_groups"]


@dataclass(frozen=True, slots=True)
class ComparedQuant:
    """One quant of a base model, for ``quants compare``."""

    repo_id: str
    author: str | None
    path: str
    quant_label: str | None
    size_bytes: int
    groups: tuple[GroupStats, ...]
    mtp_present: bool | None
    mtp_state: str | None
    mtp_preserved: bool | None
    mtp_min_bits: float | None
    attn_min_bits: float | None
    attn_preserved: bool | None
    loadable_by_mainline: bool | None
    quality: float | None = None  # the catalog's 0-100 estimate (quants.quality_score)
    quant_id: int = 0  # the catalog row (for with_groups)
    #: Quality the repo publishes for this file (crawler/profile/measured.py), beside ``quality``.
    measured: tuple[MeasuredValue, ...] = ()


@dataclass(frozen=True, slots=True)
class Comparison:
    """Every quant of one base model in the catalog, smallest first."""

    base_model: str
    quants: tuple[ComparedQuant, ...]


#: Columns of a compared quant: id, repo, author, path, label, arch, base, size, verdicts,
#: quality (see _compared).
_COLUMNS = (
    "q.id, r.repo_id, r.author, q.path, q.quant_label, q.architecture,"
    f" COALESCE(q.base_model, r.base_model), q.size_bytes, {VERDICT_COLUMNS}, q.quality_score"
)
_LIVE = "q.vanished_at IS NULL AND r.vanished_at IS NULL AND q.analysed_at IS NOT NULL"
_NO_BASE = " (no base model recorded)"
#: Most quants the name index may find for the fuzzy path to read only those.
_BY_NAME_MAX = 20000


def load_comparison(reader: Reader, query: str, *, groups: bool = True) -> Comparison:
    """The quants of the one base model ``query`` names (fuzzy, as ``search``).

    Quants without a recorded base model are grouped by repo. UsageError when nothing matches,
    or when several base models do and none is named exactly (the message lists them).
    ``groups=False`` leaves each quant's ``groups`` empty (with_groups loads them).
    """
    from crawler.base.errors import EmptyCatalog, UsageError
    from crawler.ranking.query import QueryMatcher

    matcher = QueryMatcher(query)
    found = _exact_base(reader, query, matcher)
    if found is None:
        rows = _fuzzy_rows(reader, matcher)
        by_base: dict[str, list[Any]] = {}
        for row in rows:
            by_base.setdefault(row[6] or f"{row[1]}{_NO_BASE}", []).append(row)
        if not by_base:
            from crawler.catalog.empty import EMPTY_CATALOG, FILL_CATALOG, catalog_is_empty

            if catalog_is_empty(reader):
                raise EmptyCatalog(EMPTY_CATALOG, hint=FILL_CATALOG)
            raise UsageError(f"no quant in the catalog matches {query!r}")
        key = _pick_base(query, sorted(by_base))
        found = key, by_base[key]
    key, chosen = found
    loaded = load_groups(reader, [row[0] for row in chosen]) if groups else {}
    quants = [_compared(row, loaded.get(row[0], ())) for row in chosen]
    found_measured = measured_values(reader, [(q.repo_id, q.path) for q in quants])
    quants = [replace(q, measured=found_measured.get((q.repo_id, q.path), ())) for q in quants]
    quants.sort(key=lambda c: (c.size_bytes, c.repo_id, c.path))
    return Comparison(base_model=key, quants=tuple(quants))


def with_groups(reader: Reader, quants: Sequence[ComparedQuant]) -> list[ComparedQuant]:
    """``quants`` with their tensor groups loaded (one query per 900 quants)."""
    loaded = load_groups(reader, [q.quant_id for q in quants])
    return [replace(q, groups=loaded.get(q.quant_id, ())) for q in quants]


def _compared(row: Sequence[Any], groups: tuple[GroupStats, ...]) -> ComparedQuant:
    return ComparedQuant(
        repo_id=row[1],
        author=row[2],
        path=row[3],
        quant_label=row[4],
        size_bytes=row[7],
        groups=groups,
        **verdicts(row, 8),
        quality=None if row[15] is None else float(row[15]),
        quant_id=row[0],
    )


def _fuzzy_rows(reader: Reader, matcher: QueryMatcher) -> list[Any]:
    """Every live analysed quant whose names match: the digit tokens filtered in SQL on
    ``quants.search_text`` (NULL only when too long to index: the matcher decides those),
    the rest by the matcher, on the same names ``quants search`` matches. Only the quants the
    name index finds are read, where it finds at most _BY_NAME_MAX."""
    where = [f"q.live = TRUE AND {_LIVE}"]
    params: dict[str, Any] = {}
    for i, tok in enumerate(matcher.required_substrings):
        where.append(f"(q.search_text LIKE :tok{i} ESCAPE '\\' OR q.search_text IS NULL)")
        params[f"tok{i}"] = f"%{escape_like(tok)}%"
    joined = "quants q JOIN repos r ON r.id = q.repo_pk"
    ids = name_candidates(reader, matcher, _BY_NAME_MAX)
    if ids is not None:
        joined, in_ids, id_params = by_ids(reader, joined, ids)
        where.append(in_ids)
        params.update(id_params)
    sql = f"SELECT {_COLUMNS} FROM {joined} WHERE "
    return [
        row
        for row in reader.rows(sql + " AND ".join(where), params)
        if matcher.matches_names(row[1], row[6], row[3], row[4], row[5])
    ]


def _exact_base(reader: Reader, query: str, matcher: QueryMatcher) -> tuple[str, list[Any]] | None:
    """``(base, rows)`` when ``query`` names exactly one base model of the catalog (as
    _pick_base tests it) whose names hold every query token; None otherwise (then the
    fuzzy scan decides: no such base, several, or a query this shortcut cannot prove).

    The answer is the fuzzy path's: every row of that base matches the query (its base model
    name alone holds each token), and no other base is an exact match, so _pick_base
    would choose it. ASCII only, so SQL's ``lower``/``LIKE`` and Python's agree.
    """
    wanted = query.strip().lower()
    if not wanted or not wanted.isascii() or _NO_BASE.strip() in wanted:
        return None
    names = reader.rows(
        "SELECT DISTINCT base_model FROM quants WHERE base_model IS NOT NULL"
        " UNION SELECT DISTINCT base_model FROM repos WHERE base_model IS NOT NULL"
    )
    exact = {
        str(b) for (b,) in names if b and (b.lower() == wanted or b.lower().endswith("/" + wanted))
    }
    if len(exact) != 1:
        return None
    base = exact.pop()
    if not base.isascii() or not matcher.matches_names("", base, "", None, None):
        return None
    rows = reader.rows(
        f"SELECT {_COLUMNS} FROM quants q JOIN repos r ON r.id = q.repo_pk"
        f" WHERE {_LIVE} AND q.base_model = :base"
        # Quants that inherit the repo's base model: SQLite keeps the left table of a CROSS
        # JOIN outermost (repos by their base-model index, then each repo's quants); without
        # it, it walks every live quant. PostgreSQL reads it as an inner join like any other.
        f" UNION ALL SELECT {_COLUMNS} FROM repos r CROSS JOIN quants q"
        f" WHERE q.repo_pk = r.id AND r.base_model = :base AND q.base_model IS NULL AND {_LIVE}",
        {"base": base},
    )
    return (base, rows) if rows else None


def _pick_base(query: str, bases: Sequence[str]) -> str:
    from crawler.base.errors import UsageError

    if len(bases) == 1:
        return bases[0]
    wanted = query.strip().lower()
    exact = [b for b in bases if b.lower() == wanted or b.lower().endswith("/" + wanted)]
    if len(exact) == 1:
        return exact[0]
    listed = "; ".join(bases[:10]) + (f" (+{len(bases) - 10} more)" if len(bases) > 10 else "")
    raise UsageError(f"{query!r} matches several base models: {listed}; name one of them")


def comparison_json(c: Comparison) -> dict[str, Any]:
    """``{base_model, quants: [...]}``; each quant as docs/search.md lists."""
    return {
        "base_model": c.base_model,
        "quants": [_quant_json(q) for q in c.quants],
    }


def _quant_json(q: ComparedQuant) -> dict[str, Any]:
    return {
        "repo": q.repo_id,
        "author": q.author,
        "path": q.path,
        "quant_label": q.quant_label,
        "size_bytes": q.size_bytes,
        "groups": {
            g.name: {"bpw": g.bpw, "min_bits": g.min_bits, "max_bits": g.max_bits} for g in q.groups
        },
        "mtp": {
            "present": q.mtp_present,
            "state": q.mtp_state,
            "preserved": q.mtp_preserved,
            "min_bits": q.mtp_min_bits,
            **mtp_grade(q.mtp_state, q.mtp_min_bits).to_json(),
        },
        "attention": {"min_bits": q.attn_min_bits, "preserved": q.attn_preserved},
        "loadable_by_mainline": q.loadable_by_mainline,
        "quality": q.quality,
        # Published measurements of this exact file, beside (never instead of) the estimate.
        "measured": [m.to_json() for m in q.measured],
    }
