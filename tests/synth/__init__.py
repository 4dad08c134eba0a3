"""Synthetic GGUF model builder: the files every other part of the test suite reads.

Writes real GGUF headers (gguf's GGUFWriter) whose metadata and tensor tables are exactly what
mainline llama.cpp needs to load the model, over a sparse all-zero data section (no weights are
written; a "real"-size 16 GiB file costs a few MB of disk). Test-only code: never imported by
``crawler``.

Public API (others code against it; keep it stable)::

    from tests.synth import (
        # specs: ModelSpec (frozen dataclass) with MoE / MLA / Hybrid / SWA parts
        llama, qwen3, qwen3moe, qwen35, qwen35moe, glm4moe, deepseek2, gemma3,
                                                  # each f(size="tiny"|"real") -> ModelSpec
        preset, PRESETS, ModelSpec, MoE, MLA, Hybrid, SWA, tensor_defs,
        # recipes: Recipe(label, file_type, choose, drop_mtp); choose(TensorSlot) -> type
        uniform, q8_0, bf16, q4_k_m_like, ud_q3_k_xl_like, ud_bad_mxfp4_attn,
        mtp_downgraded, mtp_graft, fork_type_252, ik_llama_mix, drop_mtp_tensors,
        type_id, type_name, tensor_nbytes, TYPE_SIZES, FORK_PXQ4, MAINLINE_TYPE_COUNT,
        # writing
        write_gguf, write_parts, write_mtp_sidecar, write_mmproj, header_bytes,
        layout, split_layouts, part_bounds, mmproj_layout, write_layout, shard_name,
        Layout, PlacedTensor,
        # uploader / lineage KV for metadata=: general.base_model.*, quantized_by, imatrix
        lineage, unsloth,
    )

    write_gguf(path, spec, recipe, *, split=None|N, metadata_only_first_shard=False,
               alignment=32, big_endian=False, version=3, metadata=None) -> list[Path]
    header_bytes(spec, recipe, *, alignment=32, big_endian=False, version=3, metadata=None)
        -> bytes  # the file's bytes [0, data_offset), padding included
    layout(spec, recipe, ...) -> Layout  # .header, .tensors (name, shape, type_id, nbytes,
        # offset, role, layer, kind), .data_offset, .size, .read_at(offset, length): the
        # file write_gguf writes, in memory (serve or parse a "15 GB" file without a file)
    split_layouts(spec, recipe, N, ...) -> list[Layout]   # the shards, in memory
    part_bounds(size, parts) -> [(a, b), ...]            # byte ranges of .partKofN files
    write_parts(path, spec, recipe, parts=2) -> [<name>.part1of2, <name>.part2of2]
    write_mtp_sidecar(path, spec, recipe) -> Path  # MTP blocks + token_embd/output(_norm)
    write_mmproj(path, n_embd_text=256) -> Path    # arch "clip"

Facts the specs encode (sources in spec.py / presets.py): shapes are ggml order (ne0 first);
``block_count`` includes the ``nextn_predict_layers`` MTP blocks; the MTP block carries an ordinary
full-attention layer plus ``nextn.eh_proj/enorm/hnorm/shared_head_norm`` (``mtp_full_head=True``
adds ``nextn.embed_tokens/shared_head_head``); 1-D tensors, norms, the router and ssm_conv1d stay
F32 whatever the recipe; a type whose block does not divide ne0 falls back like llama-quantize.
Use ``dataclasses.replace(spec, ...)`` for variants (e.g. ``n_nextn=0`` for a trunk-only file).

Checked against a CPU build of ggml-org/llama.cpp 0c1e57098 (2026-12-02, a probe program over
``llama.h``): every tiny preset x {Q4_K_M, Q8_0, BF16, UD-Q3_K_XL, MXFP4-attn, mtp_downgraded,
mtp_graft} loads, makes a context, tokenizes "hello\nworld" and decodes. qwen35, qwen35moe,
glm4moe and deepseek2 (n_nextn=1) also load with ``load_mtp`` and create an MTP context. Split
shards (also with an empty first shard), GGUF v2 and alignment 64 load; MTP sidecars load and
create an MTP context; every real preset loads with ``no_alloc`` (llama.cpp reports 8B, 27B,
30B.A3B, 35B.A3B, 106B.A12B, 16B, 12B). Refused, as on the Hub: type 252 and ik types ("invalid
ggml type 252. should be in [0, 43)"), big-endian on a little-endian host, a clip file as a
model, and qwen35 with ``drop_mtp_tensors`` ("tensor 'blk.4.attn_norm.weight' not found": qwen35
has no trunk-only fallback; glm4moe/deepseek2 load the trunk and abort only when MTP is asked).
"""

from __future__ import annotations

from .arch import TensorDef, tensor_defs
from .lineage import lineage, unsloth
from .mmproj import mmproj_layout, write_mmproj
from .presets import (
    PRESETS,
    deepseek2,
    gemma3,
    glm4moe,
    llama,
    preset,
    qwen3,
    qwen3moe,
    qwen35,
    qwen35moe,
)
from .recipe import (
    FORK_PXQ4,
    MAINLINE_TYPE_COUNT,
    TYPE_SIZES,
    Recipe,
    TensorSlot,
    bf16,
    drop_mtp_tensors,
    fork_type_252,
    ik_llama_mix,
    mtp_downgraded,
    mtp_graft,
    q4_k_m_like,
    q8_0,
    tensor_nbytes,
    type_id,
    type_name,
    ud_bad_mxfp4_attn,
    ud_q3_k_xl_like,
    uniform,
)
from .spec import MLA, SWA, Hybrid, ModelSpec, MoE
from .vocab import QWEN2_TOKEN_BYTES, Vocab, make_vocab, real_profile_tokenizer
from .write import (
    Layout,
    PlacedTensor,
    header_bytes,
    layout,
    part_bounds,
    shard_name,
    split_layouts,
    write_gguf,
    write_layout,
    write_mtp_sidecar,
    write_parts,
)

__all__ = [
    "FORK_PXQ4",
    "MAINLINE_TYPE_COUNT",
    "MLA",
    "PRESETS",
    "QWEN2_TOKEN_BYTES",
    "SWA",
    "TYPE_SIZES",
    "Hybrid",
    "Layout",
    "MoE",
    "ModelSpec",
    "PlacedTensor",
    "Recipe",
    "TensorDef",
    "TensorSlot",
    "Vocab",
    "bf16",
    "deepseek2",
    "drop_mtp_tensors",
    "fork_type_252",
    "gemma3",
    "glm4moe",
    "header_bytes",
    "ik_llama_mix",
    "layout",
    "lineage",
    "llama",
    "make_vocab",
    "mmproj_layout",
    "mtp_downgraded",
    "mtp_graft",
    "part_bounds",
    "preset",
    "q4_k_m_like",
    "q8_0",
    "qwen3",
    "qwen3moe",
    "qwen35",
    "qwen35moe",
    "real_profile_tokenizer",
    "shard_name",
    "split_layouts",
    "tensor_defs",
    "tensor_nbytes",
    "type_id",
    "type_name",
    "ud_bad_mxfp4_attn",
    "ud_q3_k_xl_like",
    "uniform",
    "unsloth",
    "write_gguf",
    "write_layout",
    "write_mmproj",
    "write_mtp_sidecar",
    "write_parts",
]
