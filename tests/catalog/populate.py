"""A small, hand-made catalog for the catalog and query tests (through the real ORM models)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from crawler.catalog import Catalog
from crawler.catalog.tables import (
    MemoryModel,
    Quant,
    QuantVersion,
    Repo,
    Scan,
    ScanError,
    TensorGroup,
)

T0 = datetime(2026, 11, 1, tzinfo=UTC)
GIB = 1024**3


def _quant(repo: Repo, path: str, label: str, **kw) -> Quant:
    base = {
        "revision": "a" * 40,
        "content_key": f"oid-{path}",
        "quant_label": label,
        "architecture": "qwen35",
        "shard_count": 1,
        "size_bytes": 10 * GIB,
        "n_tensors": 900,
        "n_params": 27_000_000_000,
        "bpw": 4.5,
        "mtp_present": True,
        "mtp_state": "present",
        "mtp_layers": 1,
        "mtp_min_bits": 8,
        "mtp_preserved": True,
        "attn_min_bits": 8,
        "attn_preserved": True,
        "dynamic": True,
        "loadable_by_mainline": True,
        "claims": [],
        "analysed_at": T0,
        "first_seen_at": T0,
    }
    base.update(kw)
    return Quant(repo_pk=repo.id, path=path, **base)


def populate(url: str) -> None:
    """Two uploaders, five quants (one vanished), groups, memory models, history, a scan."""
    with Catalog.open(url) as catalog, catalog.session() as s:
        unsloth = Repo(
            repo_id="unsloth/Qwen3.6-27B-GGUF",
            author="unsloth",
            sha="b" * 40,
            private=False,
            first_seen_at=T0,
            last_seen_at=T0,
            downloads=1000,
        )
        other = Repo(
            repo_id="someone/Qwen3.6-27B-GGUF",
            author="someone",
            sha="c" * 40,
            private=False,
            first_seen_at=T0,
            last_seen_at=T0,
            downloads=10,
        )
        s.add_all([unsloth, other])
        s.flush()
        ud3 = _quant(unsloth, "Qwen3.6-27B-UD-Q3_K_XL.gguf", "UD-Q3_K_XL", size_bytes=13 * GIB)
        ud4 = _quant(
            unsloth,
            "Qwen3.6-27B-UD-Q4_K_XL.gguf",
            "UD-Q4_K_XL",
            size_bytes=17 * GIB,
            attn_min_bits=4,
            attn_preserved=False,
            claims=["named UD but attention is 4-bit"],
        )
        q4 = _quant(
            other,
            "Qwen3.6-27B-Q4_K_M.gguf",
            "Q4_K_M",
            size_bytes=16 * GIB,
            mtp_min_bits=4,
            mtp_preserved=False,
            attn_min_bits=4,
            attn_preserved=False,
            dynamic=False,
        )
        fork = _quant(
            other,
            "Qwen3.6-27B-IQ4_KS.gguf",
            "IQ4_KS",
            size_bytes=15 * GIB,
            mtp_present=False,
            mtp_state="absent",
            mtp_min_bits=None,
            mtp_preserved=None,
            dynamic=False,
            loadable_by_mainline=False,
        )
        gone = _quant(
            other,
            "Qwen3.6-27B-Q2_K.gguf",
            "Q2_K",
            size_bytes=9 * GIB,
            mtp_min_bits=2,
            mtp_preserved=False,
            vanished_at=T0 + timedelta(days=1),
        )
        quants = [ud3, ud4, q4, fork, gone]
        s.add_all(quants)
        s.flush()
        for q in quants:
            s.add(
                TensorGroup(
                    quant_id=q.id,
                    group_name="attn",
                    n_tensors=64,
                    n_params=10**9,
                    n_bytes=10**9,
                    bpw=8.5 if q.attn_preserved else 4.5,
                    min_bits=q.attn_min_bits,
                    max_bits=8,
                    types={"Q8_0": 64},
                )
            )
            s.add(
                TensorGroup(
                    quant_id=q.id,
                    group_name="ffn",
                    n_tensors=192,
                    n_params=2 * 10**10,
                    n_bytes=q.size_bytes - 10**9,
                    bpw=3.5,
                    min_bits=3,
                    max_bits=4,
                    types={"Q3_K": 192},
                )
            )
            s.add(
                MemoryModel(
                    quant_id=q.id,
                    status="ok",
                    weights_bytes=q.size_bytes,
                    mtp_weights_bytes=0,
                    expert_bytes=0,
                    host_bytes=0,
                    kv_bytes_per_token_f16=16 * 4 * 256 * 2 * 2,
                    fixed_bytes_f16=150 * 1024**2,
                    coefficients={},
                )
            )
            s.add(
                QuantVersion(
                    quant_id=q.id,
                    revision="a" * 40,
                    content_key=q.content_key,
                    size_bytes=q.size_bytes,
                    profile={},
                    analysed_at=T0,
                )
            )
        # ud4 was re-uploaded: a second content under the same name.
        s.add(
            QuantVersion(
                quant_id=ud4.id,
                revision="d" * 40,
                content_key="oid-new",
                size_bytes=ud4.size_bytes,
                profile={},
                analysed_at=T0 + timedelta(days=2),
            )
        )
        scan = Scan(started_at=T0, finished_at=T0 + timedelta(minutes=5), status="ok", errors=2)
        s.add(scan)
        s.flush()
        s.add_all(
            [
                ScanError(
                    scan_id=scan.id,
                    repo_id="gated/Model-GGUF",
                    kind="gated",
                    message="403 gated",
                    at=T0,
                ),
                ScanError(
                    scan_id=scan.id,
                    repo_id="x/broken-GGUF",
                    path="broken.gguf",
                    kind="malformed_gguf",
                    message="bad magic",
                    at=T0,
                ),
            ]
        )


#: The repo add_newcomer writes.
NEWCOMER = "newcomer/Zeta-9.75B-GGUF"


def add_newcomer(url: str, **quant: object) -> tuple[int, int]:
    """A new repo (NEWCOMER) with one Q4_K_M quant, written and refreshed as a
    crawl does after populate; ``quant`` sets more of its columns. (repo pk, quant id)."""
    from sqlalchemy import select

    from crawler.catalog.search_index import refresh_live_rows

    with Catalog.open(url) as catalog, catalog.session() as s:
        unsloth = s.scalars(select(Repo).where(Repo.author == "unsloth")).one()
        repo = Repo(
            repo_id=NEWCOMER, author="newcomer", sha="e" * 40, private=False,
            first_seen_at=unsloth.first_seen_at, last_seen_at=unsloth.last_seen_at,
        )  # fmt: skip
        s.add(repo)
        s.flush()
        old = s.scalars(select(Quant).where(Quant.repo_pk == unsloth.id)).first()
        assert old is not None
        zeta = Quant(
            repo_pk=repo.id, path="Zeta-9.75B-Q4_K_M.gguf", revision="a" * 40,
            content_key="oid-zeta", quant_label="Q4_K_M", architecture="llama", shard_count=1,
            size_bytes=old.size_bytes, claims=[], first_seen_at=old.first_seen_at, **quant,
        )  # fmt: skip
        s.add(zeta)
        refresh_live_rows(s, [repo.id])
        s.flush()
        return repo.id, zeta.id
