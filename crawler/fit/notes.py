"""Plain-words notes and warnings around an estimate (pure): what each number is made of.

Kept apart from the arithmetic so that the CLI and the web app say the same thing.
Details: docs/internals/fit.md#notes
"""

from __future__ import annotations

from collections.abc import Callable

from crawler.fit.coefficients import MemoryCoefficients
from crawler.fit.estimate import FitEstimate, RunConfig
from crawler.gguf.parse import GGUFHeader

__all__ = ["estimate_warnings", "host_note", "kv_note"]


def host_note(c: MemoryCoefficients, est: FitEstimate, fmt: Callable[[int], str]) -> str:
    """``host: 178.50 MiB = input embedding 170.00 MiB + pinned compute/output buffers 8.50 MiB``.

    The input embedding (and experts kept on the CPU) are tensor bytes; the pinned CUDA_Host
    buffers are the host side of each context's compute and output buffers.
    """
    embedding = c.host_bytes
    experts = est.host_bytes - est.host_buffers - embedding
    parts = [f"input embedding {fmt(embedding)}"]
    if experts > 0:
        parts.append(f"experts {fmt(experts)}")
    parts.append(f"pinned compute/output buffers {fmt(est.host_buffers)}")
    return f"host: {fmt(est.host_bytes)} = " + " + ".join(parts)


def kv_note(c: MemoryCoefficients, est: FitEstimate) -> str:
    """Layers and cells of the KV cache, full-attention and sliding-window layers apart:
    ``3 layers x 4096 cells + 15 SWA layers x 1024 cells x 1 stream(s), K f16 / V f16``."""
    cfg = est.config
    full = sum(g.count for g in c.kv_groups if not g.swa)
    swa = sum(g.count for g in c.kv_groups if g.swa)
    parts = []
    if full or not swa:
        parts.append(f"{full} layers x {est.kv_cells} cells")
    if swa:
        parts.append(f"{swa} SWA layers x {est.swa_cells} cells")
    return " + ".join(parts) + f" x {est.n_stream} stream(s), K {cfg.type_k} / V {cfg.type_v}"


def estimate_warnings(header: GGUFHeader, c: MemoryCoefficients, cfg: RunConfig) -> list[str]:
    """Things the user should know before trusting the numbers (printed on stderr)."""
    out: list[str] = []
    train = c.n_ctx_train
    if train and cfg.ctx > train:
        # src/llama-context.cpp (llama_context constructor): LLAMA_LOG_WARN "n_ctx_seq (%u) >
        # n_ctx_train (%u) -- possible training context overflow"; the cache is still allocated
        # for the full n_ctx. tools/server/server-context.cpp (load_model): "the slot context
        # (%d) exceeds the training context of the model (%d) - capping", n_ctx_slot = n_ctx_train.
        out.append(
            f"--ctx {cfg.ctx} is above the model's trained context ({train}): llama.cpp warns"
            f" 'possible training context overflow' and still allocates the KV cache for"
            f" {cfg.ctx} tokens (this estimate), but llama-server caps each slot at {train}"
            " tokens; quality past the trained context is not assured without rope scaling"
        )
    offsets = [t for t in header.tensors if not t.size_from_type and t.n_bytes is not None]
    if offsets:
        ids = ", ".join(str(i) for i in sorted({t.type_id for t in offsets}))
        out.append(
            f"{len(offsets)} tensor(s) use type ids mainline llama.cpp cannot load ({ids}); their"
            " bytes come from the file's offsets, so this estimate is for a fork that loads them"
        )
    if header.data_truncated:
        out.append("the file is truncated after its header; the estimate uses the header only")
    return out
