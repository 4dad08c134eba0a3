"""llama.cpp's flags (and --gpu), declared once without typer (crawler.cli._options): names, short
flags, help and bounds as in https://github.com/ggml-org/llama.cpp common/arg.cpp. Each alias is
generic in its value type, so a command keeps its own default: ParallelOpt[int] = 1."""

from __future__ import annotations

from typing import Annotated, TypeVar

from crawler.cli._options import Option

__all__ = [
    "CacheTypeKOpt",
    "CacheTypeVOpt",
    "CpuMoeOpt",
    "FlashAttnOpt",
    "GpusOpt",
    "NCpuMoeOpt",
    "NGpuLayersOpt",
    "ParallelOpt",
    "SpecDraftNMaxOpt",
    "TensorSplitOpt",
    "UbatchOpt",
]

T = TypeVar("T")

_CACHE_TYPES = "f32, f16, bf16, q8_0, q5_1, q5_0, q4_1, q4_0, iq4_nl"

CacheTypeKOpt = Annotated[
    T,
    Option(
        "--cache-type-k",
        "-ctk",
        help=f"K cache type: {_CACHE_TYPES} (search: without it, per quant, see --auto-cache).",
    ),
]
CacheTypeVOpt = Annotated[
    T,
    Option(
        "--cache-type-v",
        "-ctv",
        help=f"V cache type: {_CACHE_TYPES} (search: without it, per quant, see --auto-cache).",
    ),
]
FlashAttnOpt = Annotated[
    T,
    Option("--flash-attn", "-fa", help="on, off or auto (llama.cpp -fa; auto is on with CUDA)."),
]
ParallelOpt = Annotated[
    T,
    Option(
        "--parallel",
        "-np",
        min=-1,
        help="Server slots (llama.cpp -np); -1 = llama-server's default (4 slots, unified cache).",
    ),
]
UbatchOpt = Annotated[
    T,
    Option("--ubatch-size", "-ub", "--ubatch", min=1, help="Physical batch (llama.cpp -ub)."),
]
SpecDraftNMaxOpt = Annotated[
    T,
    Option(
        "--spec-draft-n-max",
        min=0,
        help="MTP draft tokens per step (llama.cpp). search: without it, per result the length"
        " (1-5) with the best predicted tok/s; the command carries it.",
    ),
]
CpuMoeOpt = Annotated[
    T, Option("--cpu-moe", help="All routed experts in host memory (llama.cpp flag).")
]
NCpuMoeOpt = Annotated[
    T,
    Option("--n-cpu-moe", min=0, help="The experts of the first N layers in host memory."),
]
NGpuLayersOpt = Annotated[
    T,
    Option(
        "--n-gpu-layers",
        "-ngl",
        "--gpu-layers",
        help="Layers on the GPU (blocks + output layer, from the last): N (pinned), all, or auto"
        " (the most that fit the budget; search: --tier partial).",
    ),
]
TensorSplitOpt = Annotated[
    T,
    Option(
        "--tensor-split",
        "-ts",
        help="Proportions per GPU, e.g. 3,1 (llama.cpp -ts); with --vram: --vram per device.",
    ),
]
GpusOpt = Annotated[
    T,
    Option(
        "--gpu",
        help="GPU name (fuzzy): its memory is the budget (search: its bandwidth gives tok/s)."
        " Several GPUs (layer split, modelled from llama.cpp's source, not measured): repeat it"
        " or write '2x 3090'.",
    ),
]
