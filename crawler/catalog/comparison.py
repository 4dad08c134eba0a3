"""``quants compare``'s read path: every quant of one base model, with its tensor groups.

Plain SQL through a :class:`~crawler.catalog.reader.Reader`; returns frozen dataclasses.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from crawler.catalog.candidates import VERDICT_COLUMNS, escape_like, load_groups, verdicts
from crawler.catalog.reader import Reader
from crawler.group_stats import GroupStats

__all__ = ["ComparedQuant", "Comparison", "comparison_json", "load_comparison"]


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


@dataclass(frozen=True, slots=True)
class Comparison:
    """Every quant of one base model in the catalog, smallest first."""

    base_model: str
    quants: tuple[ComparedQuant, ...]


def load_comparison(reader: Reader, query: str) -> Comparison:
    """The quants of the one base model ``query`` names (fuzzy, as ``search``).

    Quants without a recorded base model are grouped by repo. UsageError when nothing matches,
    or when several base models do and none is named exactly (the message lists them).
    """
    from crawler.errors import UsageError
    from crawler.query import QueryMatcher

    matcher = QueryMatcher(query)
    names = "lower(COALESCE(r.repo_id, '') || ' ' || COALESCE(q.base_model, r.base_model, '')"
    names += " || ' ' || COALESCE(q.path, ''))"
    like = [f"{names} LIKE :tok{i} ESCAPE '\\'" for i in range(len(matcher.required_substrings))]
    params = {f"tok{i}": f"%{escape_like(t)}%" for i, t in enumerate(matcher.required_substrings)}
    sql = (
        "SELECT q.id, r.repo_id, r.author, q.path, q.quant_label, q.architecture,"
        f" COALESCE(q.base_model, r.base_model), q.size_bytes, {VERDICT_COLUMNS}"
        " FROM quants q JOIN repos r ON r.id = q.repo_pk"
        " WHERE q.vanished_at IS NULL AND r.vanished_at IS NULL AND q.analysed_at IS NOT NULL"
    )
    rows = [
        row
        for row in reader.rows(" AND ".join([sql, *like]), params)
        if matcher.matches_names(row[1], row[6], row[3], row[4], row[5])
    ]
    by_base: dict[str, list[Any]] = {}
    for row in rows:
        by_base.setdefault(row[6] or f"{row[1]} (no base model recorded)", []).append(row)
    if not by_base:
        raise UsageError(f"no quant in the catalog matches {query!r}")
    key = _pick_base(query, sorted(by_base))
    chosen = by_base[key]
    groups = load_groups(reader, [row[0] for row in chosen])
    quants = [
        ComparedQuant(
            repo_id=row[1],
            author=row[2],
            path=row[3],
            quant_label=row[4],
            size_bytes=row[7],
            groups=groups.get(row[0], ()),
            **verdicts(row, 8),
        )
        for row in chosen
    ]
    quants.sort(key=lambda c: (c.size_bytes, c.repo_id, c.path))
    return Comparison(base_model=key, quants=tuple(quants))


def _pick_base(query: str, bases: Sequence[str]) -> str:
    from crawler.errors import UsageError

    if len(bases) == 1:
        return bases[0]
    wanted = query.strip().lower()
    exact = [b for b in bases if b.lower() == wanted or b.lower().endswith("/" + wanted)]
    if len(exact) == 1:
        return exact[0]
    listed = "; ".join(bases[:10]) + (f" (+{len(bases) - 10} more)" if len(bases) > 10 else "")
    raise UsageError(f"{query!r} matches several base models: {listed}; name one of them")


def comparison_json(c: Comparison) -> dict[str, Any]:
    """``{base_model, quants: [...]}``; each quant as DESIGN.md section 3 lists."""
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
        },
        "attention": {"min_bits": q.attn_min_bits, "preserved": q.attn_preserved},
        "loadable_by_mainline": q.loadable_by_mainline,
    }
