"""A quant with sliding-window layers that fits by less than its window's surplus cells is
listed, on SQLite and PostgreSQL: the catalog's memory prefilter counts the SWA cells llama.cpp
allocates at the requested context (crawler/ranking/bounds.py), not the full window's.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from crawler.catalog import Catalog
from crawler.catalog.reader import Reader
from crawler.catalog.store import refresh_live
from crawler.catalog.tables import MemoryModel, Quant, Repo, TensorGroup
from crawler.cli.search_cmd import request_from_argv
from crawler.fit import KVGroup, MemoryCoefficients
from crawler.fit.estimate import estimate
from crawler.library.search import search
from crawler.profile.analysis import MemoryRecord
from crawler.profile.groups import GroupStats
from crawler.ranking.columns import search_columns, search_scalars
from crawler.ranking.model import RunSpec
from tests.pg import BOTH_DATABASES, built_catalog

T0 = datetime(2026, 11, 1, tzinfo=UTC)
GIB = 1024**3
#: Gemma 2 9B's cache layout (config.json: 42 layers alternating sliding-window and global
#: attention, 8 KV heads of 256, a 4096-token window).
GEMMA2 = MemoryCoefficients(
    status="ok", architecture="gemma2", n_layer=42, n_embd=3584, n_vocab=256000, n_head=16,
    n_ff=14336, n_ctx_train=8192, weights_bytes=5 * GIB, host_bytes=GIB,
    kv_groups=(KVGroup(21, 2048, 2048, True, 256, 256), KVGroup(21, 2048, 2048, False, 256, 256)),
    n_swa=4096, v_width_max=2048, q_dim=4096, kv_layer_group=(0, 1) * 21,
)  # fmt: skip
#: Cells of its SWA cache at long contexts: pad(n_swa + ubatch 512, 256).
WINDOW = 4608
#: Bytes of one SWA cell at f16 (21 layers of K and V, 2048 elements each).
SWA_CELL = 2 * 21 * (2048 + 2048)


def _total(ctx: int) -> int:
    return estimate(GEMMA2, RunSpec(ctx=ctx).base_config()).total


@pytest.fixture(scope="module", params=BOTH_DATABASES)
def url(request, tmp_path_factory) -> Iterator[str]:
    with built_catalog(request.param, tmp_path_factory.mktemp("swa"), "quants_swa",
                       _build) as built:  # fmt: skip
        yield built


def _build(url: str) -> None:
    with Catalog.open(url) as catalog, catalog.session() as s:
        repo = Repo(repo_id="someone/gemma-2-9b-it-GGUF", author="someone", sha="b" * 40,
                    private=False, first_seen_at=T0, last_seen_at=T0, downloads=10)  # fmt: skip
        s.add(repo)
        s.flush()
        stats = [
            GroupStats("attn", 10**9, 10**9, 8.0),
            GroupStats("ffn", 8 * 10**9, 4 * 10**9, 4.0),
        ]
        memory = MemoryRecord(
            status="ok",
            weights_bytes=GEMMA2.weights_bytes,
            mtp_weights_bytes=0,
            expert_bytes=0,
            host_bytes=GEMMA2.host_bytes,
            kv_bytes_per_token_f16=GEMMA2.kv_bytes_per_token_f16,
            fixed_bytes_f16=GEMMA2.fixed_bytes_f16,
            coefficients=GEMMA2.to_json(),
        )
        q = Quant(
            repo_pk=repo.id, path="gemma-2-9b-it-Q4_K_M.gguf", revision="a" * 40,
            content_key="oid-1", quant_label="Q4_K_M", architecture="gemma2", shard_count=1,
            size_bytes=6 * GIB, n_tensors=464, n_params=9 * 10**9, bpw=4.8, mtp_present=False,
            mtp_state="absent", attn_min_bits=8, attn_preserved=True, dynamic=True,
            loadable_by_mainline=True, claims=[], analysed_at=T0, first_seen_at=T0,
            **search_columns(stats, memory, "Q4_K_M"),
        )  # fmt: skip
        s.add(q)
        s.flush()
        for g in stats:
            s.add(TensorGroup(quant_id=q.id, group_name=g.name, n_tensors=10, n_params=g.n_params,
                              n_bytes=g.n_bytes, bpw=g.bpw, min_bits=g.bpw, max_bits=g.bpw,
                              types={}))  # fmt: skip
        s.add(
            MemoryModel(
                quant_id=q.id, status="ok", weights_bytes=memory.weights_bytes,
                mtp_weights_bytes=0, expert_bytes=0, host_bytes=memory.host_bytes,
                kv_bytes_per_token_f16=memory.kv_bytes_per_token_f16,
                fixed_bytes_f16=memory.fixed_bytes_f16, coefficients=memory.coefficients,
                **search_scalars(memory.coefficients),
            )
        )  # fmt: skip
    with Catalog.open(url) as catalog:
        refresh_live(catalog)


@pytest.mark.parametrize("ctx", [1024, 4096])
@pytest.mark.parametrize("sort", ["quality", "size", "margin", "ctx"])
def test_a_sliding_window_quant_that_fits_by_less_than_its_surplus_cells_is_listed(url, ctx, sort):
    # Below n_swa + 512 tokens llama.cpp's SWA cache holds the context's cells; a GPU the quant
    # fits by half of what the window's other cells would take must list it.
    total, surplus = _total(ctx), (WINDOW - ctx) * SWA_CELL
    assert estimate(GEMMA2, RunSpec(ctx=ctx).base_config()).swa_cells == ctx
    vram = (total + surplus // 2) / GIB
    argv = ["--vram", f"{vram:.12f}", "--headroom", "0", "--ctx", str(ctx), "--sort", sort,
            "-ctk", "f16", "-ctv", "f16"]  # fmt: skip
    with Reader.open(url) as reader:
        results = search(reader, request_from_argv(argv)).outcome.results
    assert [r.candidate.path for r in results] == ["gemma-2-9b-it-Q4_K_M.gguf"]
    assert results[0].estimate.total == total
    assert 0 <= results[0].margin_bytes < surplus
