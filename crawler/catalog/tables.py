"""SQLAlchemy 2.x models of the catalog, imported only by the catalog and the snapshot package.

Keyed by Hub revision and LFS oid; a crawl never deletes rows, it sets vanished_at.
Details: docs/internals/catalog.md#tables
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column

from crawler.catalog.orm import Base, StoredJSON

#: Longest ``quants.search_text`` kept: 4 bytes a character stays under PostgreSQL's 2704-byte
#: B-tree entry limit with the other columns of ``ix_quants_search_quality``.
SEARCH_TEXT_MAX = 512
#: Longest ``quants.search_shape``: 12 numbers of at most 24 characters and their separators.
SEARCH_SHAPE_MAX = 512


class Repo(Base):
    """One Hub model repo that holds (or held) GGUF files."""

    __tablename__ = "repos"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    repo_id: Mapped[str] = mapped_column(String(256), unique=True)
    author: Mapped[str | None] = mapped_column(String(128), index=True)
    sha: Mapped[str | None] = mapped_column(String(64))
    # sha whose files were all analysed; equal to ``sha`` when the repo is done (crash resume).
    scanned_sha: Mapped[str | None] = mapped_column(String(64))
    last_modified: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), index=True)
    created_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    downloads: Mapped[int | None] = mapped_column(BigInteger)
    likes: Mapped[int | None] = mapped_column(Integer)
    gated: Mapped[str | None] = mapped_column(String(16))
    private: Mapped[bool] = mapped_column(Boolean, default=False)
    base_model: Mapped[str | None] = mapped_column(String(256), index=True)
    tags: Mapped[list[Any] | None] = mapped_column(StoredJSON)
    card_data: Mapped[dict[str, Any] | None] = mapped_column(StoredJSON)
    first_seen_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    last_seen_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    scanned_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    vanished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class Quant(Base):
    """One quant: a single GGUF file, or the shards of one split model grouped."""

    __tablename__ = "quants"
    __table_args__ = (UniqueConstraint("repo_pk", "path"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    repo_pk: Mapped[int] = mapped_column(ForeignKey("repos.id", ondelete="CASCADE"), index=True)
    # The quant's key within the repo: the file path, or the first shard's path.
    path: Mapped[str] = mapped_column(String(1024))
    revision: Mapped[str | None] = mapped_column(String(64))
    # Content key: LFS oids of the shards joined; changes when any shard is re-uploaded.
    content_key: Mapped[str | None] = mapped_column(String(1024))
    quant_label: Mapped[str | None] = mapped_column(String(64), index=True)
    architecture: Mapped[str | None] = mapped_column(String(64), index=True)
    base_model: Mapped[str | None] = mapped_column(String(256), index=True)
    file_type: Mapped[int | None] = mapped_column(Integer)
    shard_count: Mapped[int] = mapped_column(Integer, default=1)
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    header_bytes: Mapped[int | None] = mapped_column(BigInteger)
    n_tensors: Mapped[int | None] = mapped_column(Integer)
    n_params: Mapped[int | None] = mapped_column(BigInteger)
    bpw: Mapped[float | None] = mapped_column(Float)
    mtp_present: Mapped[bool | None] = mapped_column(Boolean)
    mtp_state: Mapped[str | None] = mapped_column(String(32))
    mtp_layers: Mapped[int | None] = mapped_column(Integer)
    mtp_min_bits: Mapped[float | None] = mapped_column(Float)
    mtp_preserved: Mapped[bool | None] = mapped_column(Boolean)
    attn_min_bits: Mapped[float | None] = mapped_column(Float)
    attn_preserved: Mapped[bool | None] = mapped_column(Boolean)
    dynamic: Mapped[bool | None] = mapped_column(Boolean)
    loadable_by_mainline: Mapped[bool | None] = mapped_column(Boolean)
    claims: Mapped[list[Any] | None] = mapped_column(StoredJSON)
    # The full profile JSON (inspect's keys), for consumers that want more than the columns.
    profile: Mapped[dict[str, Any] | None] = mapped_column(StoredJSON)
    analysed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    first_seen_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    vanished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # Search columns (migration 0003), kept by crawler.catalog.store: ``live`` = neither this
    # quant nor its repo vanished; ``quality_score`` = estimate_quality's score
    # over the stored tensor groups (NULL when no group has known bits).
    live: Mapped[bool] = mapped_column(Boolean, default=False, server_default="0")
    quality_score: Mapped[float | None] = mapped_column(Float)
    # Copies of memory_models' prefilter columns, NULL unless its status is "ok", so the quality
    # index below answers the memory bound without reading another table.
    fit_weights_bytes: Mapped[int | None] = mapped_column(BigInteger)
    fit_expert_bytes: Mapped[int | None] = mapped_column(BigInteger)
    fit_mtp_bytes: Mapped[int | None] = mapped_column(BigInteger)
    fit_kv_per_token: Mapped[int | None] = mapped_column(BigInteger)
    fit_fixed_bytes: Mapped[int | None] = mapped_column(BigInteger)
    # Migration 0004, from the coefficient JSON (crawler.ranking.columns.fit_extras): the MTP draft
    # cache's f16 bytes per token (the --mtp bound), the fewest bytes a decoded token reads and
    # its MoE layers (the --sort speed bound), the trained context (the --sort ctx bound) ...
    fit_mtp_kv_per_token: Mapped[int | None] = mapped_column(BigInteger)
    fit_read_bytes: Mapped[int | None] = mapped_column(BigInteger)
    fit_moe_layers: Mapped[int | None] = mapped_column(BigInteger)
    fit_ctx_train: Mapped[int | None] = mapped_column(BigInteger)
    # ... and the compute and runtime bytes per ubatch token (crawler.fit.cuda's floor), so the
    # memory bound is within ~0.1 GiB of the estimate instead of ~1 GiB.
    fit_ubatch_bytes: Mapped[int | None] = mapped_column(BigInteger)
    # ... and what one MTP draft pass reads (its block and the output head: the speed bound).
    fit_draft_bytes: Mapped[int | None] = mapped_column(BigInteger)
    # ... and the MoE verify pass's extra experts (speed_bound.verify_experts_floor).
    fit_verify_experts: Mapped[float | None] = mapped_column(Float)
    # Migration 0013: the harmonic efficiency of the quant's weight types as the speed estimate
    # guesses them (crawler.ranking.evaluate.weight_type_efficiency): the --sort speed bound
    # reads its bytes at that rate, not at the fastest type's (NULL: the fastest type's).
    fit_type_eff: Mapped[float | None] = mapped_column(Float)
    # ... and the trunk layers (a platform's cost per layer: Metal's, in the same bound).
    fit_trunk_layers: Mapped[int | None] = mapped_column(BigInteger)
    # Migration 0014: the largest trunk layer's device bytes (weights, experts, recurrent state)
    # and K+V bytes per cell at f16, and the device weights no trunk layer holds
    # (crawler.ranking.partial_bound.slot_terms): the --tier partial margin bound.
    fit_slot_bytes: Mapped[int | None] = mapped_column(BigInteger)
    fit_slot_kv_per_token: Mapped[int | None] = mapped_column(BigInteger)
    fit_resident_bytes: Mapped[int | None] = mapped_column(BigInteger)
    # Migration 0016: the sliding-window layers' f16 K+V bytes per cell and the window's cells
    # (MemoryCoefficients.swa_bytes_per_cell_f16, swa_cells; both in fit_fixed_bytes): the
    # memory bound caps the window at the context's cells (crawler.ranking.bounds).
    fit_swa_kv_per_cell: Mapped[int | None] = mapped_column(BigInteger)
    fit_swa_cells: Mapped[int | None] = mapped_column(BigInteger)
    # Lowercased "repo_id base_model path quant_label architecture" that the search's name test
    # runs LIKE on (NULL when longer than SEARCH_TEXT_MAX: then only the Python matcher decides).
    search_text: Mapped[str | None] = mapped_column(String(SEARCH_TEXT_MAX))
    # Migration 0010: the quant's search columns as one text (crawler.catalog.search_index
    # .search_shape_sql, kept with ``live``): quants that share it (re-uploads and mirrors, one
    # recipe of one base across its fine-tunes) get one memory bound and one sort bound, so a
    # search computes those per shape, not per quant.
    search_shape: Mapped[str | None] = mapped_column(String(SEARCH_SHAPE_MAX))
    # Migration 0018: the copy class within a shape (crawler.ranking.columns.copy_key, written
    # with the search columns), and the repo's downloads (-1 for none: the search's order puts
    # them last), kept with ``live``: a class's best copies are the first entries of
    # ix_quants_copy_class (crawler.catalog.copy_walk).
    copy_key: Mapped[int | None] = mapped_column(BigInteger)
    repo_downloads: Mapped[int] = mapped_column(BigInteger, default=-1, server_default="-1")
    # Provenance (migration 0006): NULL when this catalog's crawl read the header itself, else
    # where an imported analysis came from ("dataset OWNER/NAME", "directory PATH") and that
    # source's revision (dataset commit, manifest sha256).
    source: Mapped[str | None] = mapped_column(String(512))
    source_revision: Mapped[str | None] = mapped_column(String(64))


class File(Base):
    """One file of a repo as listed by the tree API (GGUF shards, mmproj, sidecars, ...)."""

    __tablename__ = "files"
    __table_args__ = (UniqueConstraint("repo_pk", "path"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    repo_pk: Mapped[int] = mapped_column(ForeignKey("repos.id", ondelete="CASCADE"), index=True)
    quant_id: Mapped[int | None] = mapped_column(
        ForeignKey("quants.id", ondelete="SET NULL"), index=True
    )
    path: Mapped[str] = mapped_column(String(1024))
    # gguf | shard | part | mmproj | mtp_sidecar | other
    kind: Mapped[str] = mapped_column(String(16))
    shard_index: Mapped[int | None] = mapped_column(Integer)
    shard_count: Mapped[int | None] = mapped_column(Integer)
    size_bytes: Mapped[int | None] = mapped_column(BigInteger)
    lfs_oid: Mapped[str | None] = mapped_column(String(64), index=True)
    blob_id: Mapped[str | None] = mapped_column(String(64))
    # Revision at which this file's header was read; NULL until analysed.
    revision: Mapped[str | None] = mapped_column(String(64))
    analysed_oid: Mapped[str | None] = mapped_column(String(64))
    header_bytes: Mapped[int | None] = mapped_column(BigInteger)
    analysed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    first_seen_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    vanished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class TensorGroup(Base):
    """Per-quant aggregate of one coarse tensor group (``v_tensor_groups``)."""

    __tablename__ = "tensor_groups"
    quant_id: Mapped[int] = mapped_column(
        ForeignKey("quants.id", ondelete="CASCADE"), primary_key=True
    )
    group_name: Mapped[str] = mapped_column(String(32), primary_key=True)
    n_tensors: Mapped[int] = mapped_column(Integer)
    n_params: Mapped[int] = mapped_column(BigInteger)
    n_bytes: Mapped[int] = mapped_column(BigInteger)
    bpw: Mapped[float | None] = mapped_column(Float)
    min_bits: Mapped[float | None] = mapped_column(Float)
    max_bits: Mapped[float | None] = mapped_column(Float)
    types: Mapped[dict[str, Any] | None] = mapped_column(StoredJSON)


class TensorTable(Base):
    """The raw tensor table and small metadata of a quant, compressed, for ``quants reprofile``."""

    __tablename__ = "tensor_tables"
    quant_id: Mapped[int] = mapped_column(
        ForeignKey("quants.id", ondelete="CASCADE"), primary_key=True
    )
    revision: Mapped[str | None] = mapped_column(String(64))
    # Encoding of ``data``: "json+zlib/1" = zlib(JSON {"metadata": {...}, "tensors": [...]})
    encoding: Mapped[str] = mapped_column(String(32))
    n_tensors: Mapped[int] = mapped_column(Integer)
    data: Mapped[bytes] = mapped_column(LargeBinary)


class MemoryModel(Base):
    """Memory-model coefficients of a quant: any (ctx, cache types, parallel, MTP) follows."""

    __tablename__ = "memory_models"
    quant_id: Mapped[int] = mapped_column(
        ForeignKey("quants.id", ondelete="CASCADE"), primary_key=True
    )
    # "ok", or "unknown" when the architecture's memory rules are not modelled.
    status: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str | None] = mapped_column(Text)
    # Device weights without MTP block and routed experts; then those two apart.
    weights_bytes: Mapped[int | None] = mapped_column(BigInteger)
    mtp_weights_bytes: Mapped[int | None] = mapped_column(BigInteger)
    expert_bytes: Mapped[int | None] = mapped_column(BigInteger)
    host_bytes: Mapped[int | None] = mapped_column(BigInteger)
    # KV elements (K + V) per token of context over the layers whose cache grows with ctx, f16
    # bytes per token (for a cheap SQL prefilter), and fixed bytes at f16 (SWA, recurrent).
    kv_bytes_per_token_f16: Mapped[int | None] = mapped_column(BigInteger)
    fixed_bytes_f16: Mapped[int | None] = mapped_column(BigInteger)
    # The complete coefficient set, as serialised by crawler.fit.
    coefficients: Mapped[dict[str, Any] | None] = mapped_column(StoredJSON)
    # Copies of the coefficients the search reads before the exact estimate (migration 0003),
    # so the candidate query never parses the JSON above.
    n_expert: Mapped[int | None] = mapped_column(Integer)
    n_expert_used: Mapped[int | None] = mapped_column(Integer)
    n_embd: Mapped[int | None] = mapped_column(Integer)
    n_vocab: Mapped[int | None] = mapped_column(Integer)
    mtp_available: Mapped[bool | None] = mapped_column(Boolean)


class Scan(Base):
    """One crawl pass (manual or scheduled)."""

    __tablename__ = "scans"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # running | ok | failed | interrupted
    status: Mapped[str] = mapped_column(String(16))
    trigger: Mapped[str] = mapped_column(String(16), default="manual")
    endpoint: Mapped[str | None] = mapped_column(String(512))
    repos_seen: Mapped[int] = mapped_column(Integer, default=0)
    repos_new: Mapped[int] = mapped_column(Integer, default=0)
    repos_changed: Mapped[int] = mapped_column(Integer, default=0)
    repos_unchanged: Mapped[int] = mapped_column(Integer, default=0)
    quants_analysed: Mapped[int] = mapped_column(Integer, default=0)
    files_analysed: Mapped[int] = mapped_column(Integer, default=0)
    requests: Mapped[int] = mapped_column(Integer, default=0)
    bytes_fetched: Mapped[int] = mapped_column(BigInteger, default=0)
    errors: Mapped[int] = mapped_column(Integer, default=0)
    params: Mapped[dict[str, Any] | None] = mapped_column(StoredJSON)
    message: Mapped[str | None] = mapped_column(Text)


class ScanError(Base):
    """A failure during a scan: recorded, never fatal to the pass."""

    __tablename__ = "scan_errors"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    scan_id: Mapped[int] = mapped_column(ForeignKey("scans.id", ondelete="CASCADE"), index=True)
    repo_id: Mapped[str | None] = mapped_column(String(256), index=True)
    path: Mapped[str | None] = mapped_column(String(1024))
    # http_429 | http_5xx | reset | timeout | truncated | range_ignored | gated | private |
    # not_found | vanished | changed | malformed_gguf | budget | other
    kind: Mapped[str] = mapped_column(String(32))
    message: Mapped[str] = mapped_column(Text)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class CrawlState(Base):
    """Small key/value state of the crawler (listing cursors)."""

    __tablename__ = "crawl_state"
    key: Mapped[str] = mapped_column(String(128), primary_key=True)
    value: Mapped[str] = mapped_column(Text)


class QuantVersion(Base):
    """History: one row per analysis of a quant's content (re-uploads make new rows)."""

    __tablename__ = "quant_versions"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    quant_id: Mapped[int] = mapped_column(ForeignKey("quants.id", ondelete="CASCADE"), index=True)
    scan_id: Mapped[int | None] = mapped_column(
        ForeignKey("scans.id", ondelete="SET NULL"), index=True
    )
    revision: Mapped[str | None] = mapped_column(String(64))
    content_key: Mapped[str | None] = mapped_column(String(1024))
    size_bytes: Mapped[int | None] = mapped_column(BigInteger)
    # Summary the ``changes`` command diffs: the quant's profile JSON (inspect's keys).
    profile: Mapped[dict[str, Any] | None] = mapped_column(StoredJSON)
    analysed_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True)


class Watch(Base):
    """A saved search, evaluated after every scan."""

    __tablename__ = "watches"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    # The search options by name, a JSON object ({"vram": 24.0, "ctx": 262144}; argv before
    # revision 0009, which converted it).
    args: Mapped[dict[str, Any]] = mapped_column(StoredJSON)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    last_evaluated_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class WatchHit(Base):
    """A result a watch has already reported (so it fires once per new or improved result)."""

    __tablename__ = "watch_hits"
    __table_args__ = (UniqueConstraint("watch_id", "result_key"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    watch_id: Mapped[int] = mapped_column(ForeignKey("watches.id", ondelete="CASCADE"), index=True)
    # repo:path@content_key; an improved (re-uploaded) result has a new key.
    result_key: Mapped[str] = mapped_column(String(1400))
    scan_id: Mapped[int | None] = mapped_column(ForeignKey("scans.id", ondelete="SET NULL"))
    payload: Mapped[dict[str, Any] | None] = mapped_column(StoredJSON)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


Index("ix_quants_live", Quant.vanished_at, Quant.size_bytes)
# Migration 0011: the quants a name query's substring index cannot see (search_text too long),
# which the search always reads; and, outside this metadata (so Alembic's comparison leaves them
# alone), the substring index itself (crawler.catalog.name_index, crawler.catalog.orm).
Index(
    "ix_quants_search_text_null",
    Quant.id,
    sqlite_where=Quant.search_text.is_(None),
    postgresql_where=Quant.search_text.is_(None),
)
#: What the memory bound reads (crawler.ranking.bounds.bound_sql), and the name test's text.
_BOUND_COLUMNS = (
    Quant.fit_weights_bytes,
    Quant.fit_expert_bytes,
    Quant.fit_mtp_bytes,
    Quant.fit_kv_per_token,
    Quant.fit_fixed_bytes,
    Quant.fit_ubatch_bytes,
    Quant.fit_mtp_kv_per_token,
    Quant.fit_swa_kv_per_cell,
    Quant.fit_swa_cells,
    Quant.search_text,
)
# Search (migration 0003, redefined in 0004): `--sort quality` walks live quants in score order
# through this index and stops after a page; the memory bound and the name test are run on the
# index entries (covering), so quants that cannot fit or do not match are skipped without
# reading a table row. `--sort size` walks the second the same way.
Index("ix_quants_search_quality", Quant.live, Quant.quality_score, *_BOUND_COLUMNS)
Index("ix_quants_search_size", Quant.live, Quant.size_bytes, *_BOUND_COLUMNS)
# `--sort speed|margin|ctx` compute their bounds on this index's entries (it covers all they read).
# (Not led by quality_score: the quality order must keep walking its own, narrower index.)
Index(
    "ix_quants_search_computed",
    Quant.live,
    Quant.fit_read_bytes,
    Quant.fit_moe_layers,
    Quant.fit_draft_bytes,
    Quant.fit_verify_experts,
    Quant.fit_type_eff,
    Quant.fit_trunk_layers,
    Quant.fit_slot_bytes,
    Quant.fit_slot_kv_per_token,
    Quant.fit_resident_bytes,
    Quant.fit_ctx_train,
    Quant.quality_score,
    *_BOUND_COLUMNS,
)
Index("ix_repos_downloads", Repo.downloads)
# The distinct shapes of live quants, one index seek each, and each shape's quants (0010), in
# size order with their repo for --sort size (0012), and on PostgreSQL their ids (0017: SQLite's
# entries hold the rowid).
Index(
    "ix_quants_search_shape",
    Quant.live,
    Quant.search_shape,
    Quant.size_bytes,
    Quant.quality_score,
    Quant.repo_pk,
    postgresql_include=["id"],
)
# Each shape's copy classes, one seek each, and a class's quants best first (0018).
Index(
    "ix_quants_copy_class",
    Quant.live,
    Quant.search_shape,
    Quant.copy_key,
    Quant.size_bytes,
    Quant.repo_downloads,
)


class RepoClaim(Base):
    """A crawl process's claim on one repo it is reading (migration 0005; catalog/claims.py).

    Several crawlers sharing one catalog skip a repo another holds; a killed crawler's claims
    lapse at ``expires_at``.
    """

    __tablename__ = "repo_claims"
    repo_id: Mapped[str] = mapped_column(String(256), primary_key=True)
    owner: Mapped[str] = mapped_column(String(64))
    claimed_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True)


class MeasuredQuality(Base):
    """A quality figure a repo publishes for one of its quants (crawler/profile/measured.py).

    Keyed to the quant by path and size and to the revision whose artifact was read; replaced
    whenever the repo is written with a file listing. Never merged into ``quality_score``.
    """

    __tablename__ = "measured_quality"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    repo_pk: Mapped[int] = mapped_column(ForeignKey("repos.id", ondelete="CASCADE"), index=True)
    quant_path: Mapped[str] = mapped_column(String(1024))
    file_name: Mapped[str] = mapped_column(String(1024))
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    revision: Mapped[str] = mapped_column(String(64))
    metric: Mapped[str] = mapped_column(String(32))
    value: Mapped[float] = mapped_column(Float)
    corpus: Mapped[str | None] = mapped_column(String(256))
    reference: Mapped[str | None] = mapped_column(String(256))
    artifact: Mapped[str] = mapped_column(String(1024))
    fmt: Mapped[str] = mapped_column(String(32))
    source_url: Mapped[str] = mapped_column(Text)
    read_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class TokenizerTemplateRow(Base):
    """A tokenizer block read once in full (migration 0007; crawler/gguf/tokenizer_template.py):
    any file, in any repo, whose first bytes show it is read around it."""

    __tablename__ = "tokenizer_templates"
    fingerprint: Mapped[str] = mapped_column(String(64), primary_key=True)
    lookup: Mapped[str] = mapped_column(String(64), index=True)
    model: Mapped[str | None] = mapped_column(String(128))
    pre: Mapped[str | None] = mapped_column(String(128))
    #: [[key, item type, count], ...] of the block's arrays.
    keys: Mapped[Any] = mapped_column(JSON)
    #: zlib of the block's bytes.
    block: Mapped[bytes] = mapped_column(LargeBinary)
    block_bytes: Mapped[int] = mapped_column(BigInteger)
    source: Mapped[str] = mapped_column(Text)
    block_start: Mapped[int] = mapped_column(BigInteger)
    after_bytes: Mapped[int] = mapped_column(BigInteger)
    after_keys: Mapped[int] = mapped_column(Integer)
    header_bytes: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class TokenizerTemplateScope(Base):
    """Which repos and base models used which template: sizes their files' first request."""

    __tablename__ = "tokenizer_template_scopes"
    scope: Mapped[str] = mapped_column(String(320), primary_key=True)
    fingerprint: Mapped[str] = mapped_column(String(64), primary_key=True)
