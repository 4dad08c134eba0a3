"""A quant's analysis in the catalog: profile columns, tensor groups, memory model, search columns,
tensor table and history rows, written together; and the stored headers reprofile reads back.
The search columns come computed; this module only writes them.
Details: docs/internals/catalog.md#analyses
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import delete, select

from crawler.catalog import Catalog
from crawler.catalog.search_index import refresh_live_rows
from crawler.catalog.tables import (
    File,
    MemoryModel,
    Quant,
    QuantVersion,
    Repo,
    TensorGroup,
    TensorTable,
)
from crawler.catalog.tensor_tables import (
    TENSOR_TABLE_ENCODING,
    TensorTableError,
    decode_tensor_table,
    encode_tensor_table,
)
from crawler.profile.analysis import AnalysedShard, MemoryRecord, QuantAnalysis, StoredProfile

__all__ = [
    "QuantRow",
    "StoredQuantTables",
    "iter_tensor_tables",
    "update_analysis",
    "write_analyses",
]


@dataclass(frozen=True, slots=True)
class QuantRow:
    """One analysed quant as the crawl hands it over: the analysis and its search columns
    (``quants.quality_score``, ``quants.fit_*``) and ``memory_models`` scalars, computed by the
    crawl with ranking's functions. The catalog writes them as they are."""

    analysis: QuantAnalysis
    columns: Mapping[str, Any]
    scalars: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class StoredQuantTables:
    """A stored quant's raw headers, for ``quants reprofile``."""

    quant_id: int
    repo_id: str
    path: str
    revision: str | None
    size_bytes: int
    repo_files: tuple[str, ...]
    shards: tuple[AnalysedShard, ...]
    #: Why the stored table could not be decoded (then ``shards`` is empty), else None.
    unreadable: str | None = None


def _apply_profile(q: Quant, p: StoredProfile) -> None:
    q.quant_label = p.quant_label
    q.architecture = p.architecture
    q.n_tensors = p.n_tensors
    q.n_params = p.n_params
    q.bpw = p.bpw
    q.mtp_present = p.mtp_present
    q.mtp_state = p.mtp_state
    q.mtp_layers = p.mtp_layers
    q.mtp_min_bits = p.mtp_min_bits
    q.mtp_preserved = p.mtp_preserved
    q.attn_min_bits = p.attn_min_bits
    q.attn_preserved = p.attn_preserved
    q.dynamic = p.dynamic
    q.loadable_by_mainline = p.loadable_by_mainline
    q.claims = list(p.claims)
    q.profile = dict(p.json)


def _group_rows(quant_id: int, p: StoredProfile) -> list[TensorGroup]:
    return [
        TensorGroup(
            quant_id=quant_id,
            group_name=g.name,
            n_tensors=g.n_tensors,
            n_params=g.n_params,
            n_bytes=g.n_bytes,
            bpw=g.bpw,
            min_bits=g.min_bits,
            max_bits=g.max_bits,
            types=dict(g.types),
        )
        for g in p.groups
    ]


def _apply_search_columns(q: Quant, columns: Mapping[str, Any]) -> None:
    for name, value in columns.items():
        setattr(q, name, value)


def _memory_row(quant_id: int, m: MemoryRecord, scalars: Mapping[str, Any]) -> MemoryModel:
    return MemoryModel(
        **scalars,
        quant_id=quant_id,
        status=m.status,
        reason=m.reason,
        weights_bytes=m.weights_bytes,
        mtp_weights_bytes=m.mtp_weights_bytes,
        expert_bytes=m.expert_bytes,
        host_bytes=m.host_bytes,
        kv_bytes_per_token_f16=m.kv_bytes_per_token_f16,
        fixed_bytes_f16=m.fixed_bytes_f16,
        coefficients=dict(m.coefficients) if m.coefficients is not None else None,
    )


def _replace_children(s: Any, quant_ids: list[int], tables: Sequence[Any]) -> None:
    # One DELETE per table for all the repo's re-analysed quants (no per-row merge/SELECT).
    for model in tables:
        s.execute(delete(model).where(model.quant_id.in_(quant_ids)))


def write_analyses(
    s: Any,
    items: Sequence[tuple[Quant, QuantRow, str]],
    revision: str | None,
    scan_id: int | None,
    now: datetime,
) -> None:
    if not items:
        return
    ids = [q.id for q, _, _ in items]
    with s.no_autoflush:
        _replace_children(s, ids, (TensorGroup, MemoryModel, TensorTable))
        # Ordered by id, so each quant's entry ends as its latest version's key.
        last_key: dict[int, str | None] = {
            row.quant_id: row.content_key
            for row in s.execute(
                select(QuantVersion.quant_id, QuantVersion.content_key)
                .where(QuantVersion.quant_id.in_(ids))
                .order_by(QuantVersion.id)
            )
        }
        rows: list[Any] = []
        for q, row, content_key in items:
            a = row.analysis
            _apply_profile(q, a.profile)
            q.revision = revision
            q.base_model = a.base_model
            q.file_type = a.file_type
            q.header_bytes = sum(sh.header_bytes for sh in a.shards)
            q.analysed_at = now
            q.content_key = content_key
            # Read by this catalog's crawl: no longer an imported analysis (it outranks them).
            q.source = None
            q.source_revision = None
            group_rows = _group_rows(q.id, a.profile)
            _apply_search_columns(q, row.columns)
            rows += group_rows
            rows.append(_memory_row(q.id, a.memory, row.scalars))
            rows.append(
                TensorTable(
                    quant_id=q.id,
                    revision=revision,
                    encoding=TENSOR_TABLE_ENCODING,
                    n_tensors=sum(len(sh.header.tensors) for sh in a.shards),
                    data=encode_tensor_table(a.shards),
                )
            )
            # History: a row per distinct content (a re-upload under the same name adds one).
            if last_key.get(q.id) != content_key:
                rows.append(
                    QuantVersion(
                        quant_id=q.id,
                        scan_id=scan_id,
                        revision=revision,
                        content_key=content_key,
                        size_bytes=q.size_bytes,
                        profile=dict(a.profile.json),
                        analysed_at=now,
                    )
                )
        s.add_all(rows)


def iter_tensor_tables(catalog: Catalog) -> list[StoredQuantTables]:
    """Every live quant's stored headers (decoded), with its repo's live GGUF file names."""
    out: list[StoredQuantTables] = []
    with catalog.session() as s:
        files_by_repo: dict[int, list[str]] = {}
        for repo_pk, path in s.execute(
            select(File.repo_pk, File.path).where(File.vanished_at.is_(None))
        ):
            files_by_repo.setdefault(repo_pk, []).append(path)
        rows = s.execute(
            select(Quant, Repo.repo_id, TensorTable)
            .join(Repo, Quant.repo_pk == Repo.id)
            .join(TensorTable, TensorTable.quant_id == Quant.id)
            .where(Quant.vanished_at.is_(None))
            .order_by(Repo.repo_id, Quant.path)
        )
        for q, repo_id, table in rows:
            unreadable = None
            try:
                shards = tuple(decode_tensor_table(table.data, table.encoding))
            except TensorTableError as exc:  # a bad stored row: skipped and counted, not fatal
                shards, unreadable = (), str(exc)
            out.append(
                StoredQuantTables(
                    quant_id=q.id,
                    repo_id=repo_id,
                    path=q.path,
                    revision=q.revision,
                    size_bytes=q.size_bytes,
                    repo_files=tuple(sorted(files_by_repo.get(q.repo_pk, []))),
                    shards=shards,
                    unreadable=unreadable,
                )
            )
    return out


def update_analysis(catalog: Catalog, quant_id: int, row: QuantRow) -> bool:
    """Replace a quant's profile columns, groups and memory model (``quants reprofile``).

    Returns True when the profile changed. History gets no row: the content did not change.
    """
    with catalog.session() as s:
        q = s.get(Quant, quant_id)
        if q is None:
            return False
        profile = row.analysis.profile
        changed = (q.profile or {}) != dict(profile.json)
        _apply_profile(q, profile)
        _replace_children(s, [q.id], (TensorGroup, MemoryModel))
        group_rows = _group_rows(q.id, profile)
        _apply_search_columns(q, row.columns)
        s.add_all([*group_rows, _memory_row(q.id, row.analysis.memory, row.scalars)])
        refresh_live_rows(s, [q.repo_pk])  # label and architecture may have changed
        return changed
