"""A small vision projector file (``general.architecture = clip``), as shipped beside models.

Keys and tensor names follow tools/mtmd/clip-impl.h (gemma3 projector). Not load-checked: mtmd
is not part of the check, and llama.cpp refuses a clip file as a main model ("CLIP cannot be used
as main model"); it exists so crawler code can tell an mmproj file apart from a model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gguf.constants import GGUF_DEFAULT_ALIGNMENT

from .arch import TensorDef
from .recipe import F16, F32
from .spec import GLOBAL
from .write import Layout, build_layout, write_layout


def mmproj_layout(n_embd_text: int = 256, *, n_block: int = 2, n_embd: int = 128) -> Layout:
    """A gemma3-style projector: ``n_block`` ViT blocks of width ``n_embd``, projecting to
    ``n_embd_text``."""
    a = "clip"
    meta: dict[str, Any] = {
        "general.type": "mmproj",
        "general.name": "Synth-mmproj",
        "general.file_type": 1,
        f"{a}.has_vision_encoder": True,
        f"{a}.projector_type": "gemma3",
        f"{a}.vision.image_size": 224,
        f"{a}.vision.patch_size": 14,
        f"{a}.vision.embedding_length": n_embd,
        f"{a}.vision.feed_forward_length": 2 * n_embd,
        f"{a}.vision.block_count": n_block,
        f"{a}.vision.attention.head_count": 4,
        f"{a}.vision.attention.layer_norm_epsilon": 1e-6,
        f"{a}.vision.projection_dim": n_embd_text,
        f"{a}.vision.image_mean": [0.5, 0.5, 0.5],
        f"{a}.vision.image_std": [0.5, 0.5, 0.5],
    }
    e, n_pos = n_embd, (224 // 14) ** 2
    defs: list[tuple[TensorDef, int]] = []

    def add(name: str, tid: int, *shape: int) -> None:
        defs.append((TensorDef(name, shape, name.removesuffix(".weight"), None, GLOBAL), tid))

    add("v.patch_embd.weight", F16, 14, 14, 3, e)
    add("v.patch_embd.bias", F32, e)
    add("v.position_embd.weight", F16, e, n_pos)
    for i in range(n_block):
        for t in ("attn_q", "attn_k", "attn_v", "attn_out"):
            add(f"v.blk.{i}.{t}.weight", F16, e, e)
            add(f"v.blk.{i}.{t}.bias", F32, e)
        for t in ("ln1", "ln2"):
            add(f"v.blk.{i}.{t}.weight", F32, e)
            add(f"v.blk.{i}.{t}.bias", F32, e)
        add(f"v.blk.{i}.ffn_up.weight", F16, e, 2 * e)
        add(f"v.blk.{i}.ffn_up.bias", F32, 2 * e)
        add(f"v.blk.{i}.ffn_down.weight", F16, 2 * e, e)
        add(f"v.blk.{i}.ffn_down.bias", F32, e)
    add("v.post_ln.weight", F32, e)
    add("v.post_ln.bias", F32, e)
    add("mm.input_projection.weight", F16, e, n_embd_text)
    add("mm.soft_emb_norm.weight", F32, e)
    return build_layout(a, meta, defs, GGUF_DEFAULT_ALIGNMENT, False, 3)


def write_mmproj(path: str | Path, n_embd_text: int = 256) -> Path:
    """Write mmproj_layout to ``path``."""
    return write_layout(path, mmproj_layout(n_embd_text))
