"""One quant as the catalog knows it, for quants serve's quant page and /api/quant.

Read path only, through a Reader (plain SQL); the catalog computes nothing.
Details: docs/internals/catalog.md#quant_detail
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from crawler.catalog.candidates import VERDICT_COLUMNS, load_groups, verdicts
from crawler.catalog.reader import Reader, as_datetime, placeholders

if TYPE_CHECKING:
    from crawler.fit import MemoryCoefficients
    from crawler.profile.analysis import AnalysedShard

__all__ = ["QuantDetail", "QuantVersionRecord", "load_quant", "quality_scores"]


@dataclass(frozen=True, slots=True)
class QuantVersionRecord:
    """One analysed content of the quant (a re-upload adds one), with what changed from the last."""

    revision: str | None
    size_bytes: int | None
    analysed_at: datetime | None
    scan_id: int | None
    changes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class QuantDetail:
    """A live quant: catalog columns, groups, memory model, tensors and versions."""

    repo_id: str
    author: str | None
    path: str
    revision: str | None
    quant_label: str | None
    architecture: str | None
    base_model: str | None
    size_bytes: int
    n_params: int | None
    bpw: float | None
    quality: float | None
    claims: tuple[str, ...]
    verdicts: dict[str, Any]
    groups: tuple[Any, ...]  # GroupStats, as crawler.catalog.candidates.load_groups gives them
    memory_status: str | None
    memory_reason: str | None
    coefficients: MemoryCoefficients | None
    shards: tuple[AnalysedShard, ...]  # empty when no tensor table is stored
    versions: tuple[QuantVersionRecord, ...]
    #: Where the analysis came from (None: this catalog's crawl), as quants.source says.
    source: str | None = None
    source_revision: str | None = None
    #: Stored parts that could not be read and are shown as absent ("memory model", ...).
    unreadable: tuple[str, ...] = ()


def _json(value: Any, unreadable: list[str] | None = None, what: str = "") -> Any:
    """SQLite hands back the JSON column as text; psycopg decodes it. Text that is not JSON
    reads as None (and ``what`` is added to ``unreadable``): one bad row never fails a page."""
    if not isinstance(value, str | bytes):
        return value
    try:
        return json.loads(value)
    except (ValueError, RecursionError):
        if unreadable is not None:
            unreadable.append(what)
        return None


def load_quant(reader: Reader, repo_id: str, path: str) -> QuantDetail | None:
    """The live, analysed quant ``repo_id``/``path``, or None when the catalog has none."""
    from crawler.fit import MemoryCoefficients

    rows = reader.rows(
        "SELECT q.id, r.author, q.revision, q.quant_label, q.architecture,"
        " COALESCE(q.base_model, r.base_model), q.size_bytes, q.n_params, q.bpw,"
        f" q.quality_score, q.claims, {VERDICT_COLUMNS}, q.source, q.source_revision"
        " FROM quants q JOIN repos r ON r.id = q.repo_pk"
        " WHERE r.repo_id = :repo AND q.path = :path AND q.vanished_at IS NULL"
        " AND r.vanished_at IS NULL AND q.analysed_at IS NOT NULL",
        {"repo": repo_id, "path": path},
    )
    if not rows:
        return None
    row = rows[0]
    qid = row[0]
    memory = reader.rows(
        "SELECT status, reason, coefficients FROM memory_models WHERE quant_id = :q", {"q": qid}
    )
    status = reason = coeffs = None
    unreadable: list[str] = []
    if memory:
        status, reason, raw = memory[0]
        if status == "ok" and raw is not None:
            data = _json(raw, unreadable, "memory model")
            try:
                coeffs = MemoryCoefficients.from_json(data) if data is not None else None
            except (TypeError, ValueError, KeyError):
                unreadable.append("memory model")
    claims = _json(row[10], unreadable, "claims")
    return QuantDetail(
        repo_id=repo_id,
        author=row[1],
        path=path,
        revision=row[2],
        quant_label=row[3],
        architecture=row[4],
        base_model=row[5],
        size_bytes=row[6],
        n_params=row[7],
        bpw=row[8],
        quality=row[9],
        claims=tuple(str(c) for c in claims) if isinstance(claims, list) else (),
        verdicts=verdicts(row, 11),
        groups=load_groups(reader, [qid]).get(qid, ()),
        memory_status=status,
        memory_reason=reason,
        coefficients=coeffs,
        shards=_shards(reader, qid, unreadable),
        versions=_versions(reader, qid),
        source=row[18],
        source_revision=row[19],
        unreadable=tuple(dict.fromkeys(unreadable)),
    )


def _shards(reader: Reader, qid: int, unreadable: list[str]) -> tuple[AnalysedShard, ...]:
    """The quant's stored header shards (empty if none, or unreadable: then noted)."""
    from crawler.catalog.tensor_tables import decode_tensor_table

    rows = reader.rows("SELECT encoding, data FROM tensor_tables WHERE quant_id = :q", {"q": qid})
    if not rows:
        return ()
    try:
        return tuple(decode_tensor_table(bytes(rows[0][1]), rows[0][0]))
    except ValueError:
        unreadable.append("tensor table")
        return ()


def _versions(reader: Reader, qid: int) -> tuple[QuantVersionRecord, ...]:
    from crawler.profile.diff import describe_change

    out: list[QuantVersionRecord] = []
    before: tuple[Any, Any] | None = None
    for revision, size, profile, at, scan_id in reader.rows(
        "SELECT revision, size_bytes, profile, analysed_at, scan_id FROM quant_versions"
        " WHERE quant_id = :q ORDER BY id",
        {"q": qid},
    ):
        profile = _json(profile)
        if not isinstance(profile, dict):
            profile = None
        changes: tuple[str, ...] = ()
        if before is not None and before[0] is not None and profile is not None:
            changes = tuple(describe_change(before[0], profile, old_size=before[1], new_size=size))
        out.append(QuantVersionRecord(revision, size, as_datetime(at), scan_id, changes))
        before = (profile, size)
    return tuple(reversed(out))  # newest first


def quality_scores(reader: Reader, keys: Sequence[tuple[str, str]]) -> dict[tuple[str, str], float]:
    """The catalog's quality estimate (0-100) of the quants ``(repo_id, path)`` that have one."""
    repos = sorted({repo for repo, _ in keys})
    if not repos:
        return {}
    marks, params = placeholders("r", repos)
    wanted = set(keys)
    return {
        (repo, path): float(score)
        for repo, path, score in reader.rows(
            "SELECT r.repo_id, q.path, q.quality_score FROM quants q"
            f" JOIN repos r ON r.id = q.repo_pk WHERE r.repo_id IN ({marks})"
            " AND q.vanished_at IS NULL AND q.quality_score IS NOT NULL",
            params,
        )
        if (repo, path) in wanted
    }
