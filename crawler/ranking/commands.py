"""How to run a ranked quant: llama-server, Ollama and LM Studio command lines (pure: no I/O).

The llama.cpp flags were checked against llama.cpp's ``common/arg.cpp`` and ``common/download.cpp``
(the tree vendored by llama-cpp-python 0.3.36, ggml-org/llama.cpp ``0c1e57098``).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence

from crawler.fit import RunConfig, command_args

__all__ = [
    "hf_args",
    "is_model_file",
    "llama_server_command",
    "lmstudio_command",
    "ollama_command",
]


def hf_args(repo_id: str, path: str, label: str | None, siblings: Sequence[str]) -> list[str]:
    """``-hf`` arguments that make llama.cpp download exactly ``path``.

    llama.cpp (common/download.cpp ``find_best_model``) takes the first model file whose path
    matches ``LABEL[.-]`` case-insensitively. ``repo:LABEL`` is used only when no other model file
    of the repo matches; otherwise ``-hff PATH`` names the file (split files: the first shard).
    """
    if label and re.fullmatch(r"[A-Za-z0-9_-]+", label):
        pattern = re.compile(re.escape(label) + r"[.-]", re.IGNORECASE)
        if pattern.search(path) and not any(
            p != path and pattern.search(p) and is_model_file(p) for p in siblings
        ):
            return ["-hf", f"{repo_id}:{label}"]
    return ["-hf", repo_id, "-hff", path]


def is_model_file(path: str) -> bool:
    """common/download.cpp ``gguf_filename_is_model``, applied to a first shard."""
    name = path.rsplit("/", 1)[-1]
    if not name.endswith(".gguf"):
        return False
    if any(k in name for k in ("mmproj", "imatrix", "mtp-", "eagle3-", "dflash-", "dspark-")):
        return False
    m = re.search(r"-(\d{5})-of-\d{5}\.gguf$", name)
    return m is None or int(m.group(1)) == 1


def llama_server_command(
    repo_id: str, path: str, label: str | None, cfg: RunConfig, siblings: Sequence[str]
) -> str:
    """The ``llama-server`` command that downloads this quant and runs it exactly as ``cfg``.

    crawler.fit.command_args is the one source of the flags (checked against llama.cpp's
    common/arg.cpp); its ``-m PATH`` becomes the Hub download, plus ``--no-mmproj``: ``-hf``
    fetches a vision projector by default (arg.cpp ``--hf-repo`` help), which would use memory the
    estimate does not count.
    """
    args = command_args(cfg.replace(model_path="MODEL"))
    i = args.index("-m")
    args[i : i + 2] = [*hf_args(repo_id, path, label, siblings), "--no-mmproj"]
    return shlex.join(args)


#: Cache types Ollama's OLLAMA_KV_CACHE_TYPE accepts (one type for K and V; needs flash attention).
_OLLAMA_CACHE = ("f16", "q8_0", "q4_0")


def ollama_command(repo_id: str, label: str | None, cfg: RunConfig) -> str | None:
    """The Ollama equivalent, or None where Ollama cannot express ``cfg``.

    Ollama pulls Hub GGUFs as ``hf.co/OWNER/REPO:QUANT``; context and cache type are server
    settings (``OLLAMA_CONTEXT_LENGTH``, ``OLLAMA_KV_CACHE_TYPE`` with ``OLLAMA_FLASH_ATTENTION``).
    It has no MTP drafting, no per-K/V cache types and no expert offload flag, so those configs
    have no equivalent. Ollama runs its own engine: its memory use can differ from the estimate.
    """
    if not label or cfg.mtp or cfg.cpu_moe or cfg.n_cpu_moe:
        return None
    if cfg.type_k != cfg.type_v or cfg.type_k not in _OLLAMA_CACHE:
        return None
    env = [f"OLLAMA_CONTEXT_LENGTH={cfg.ctx}", "OLLAMA_FLASH_ATTENTION=1"]
    if cfg.type_k != "f16":
        env.append(f"OLLAMA_KV_CACHE_TYPE={cfg.type_k}")
    return f"{' '.join(env)} ollama serve & ollama run hf.co/{repo_id}:{shlex.quote(label)}"


def lmstudio_command(repo_id: str, cfg: RunConfig) -> str | None:
    """The LM Studio CLI equivalent (``lms``), or None where it cannot express ``cfg``.

    ``lms load`` takes ``--gpu max`` and ``--context-length`` (lmstudio.ai/docs/cli/load); cache
    quantization and MTP drafting are not ``lms`` flags, so only f16 caches without MTP apply.
    """
    if cfg.mtp or cfg.cpu_moe or cfg.n_cpu_moe or (cfg.type_k, cfg.type_v) != ("f16", "f16"):
        return None
    return (
        f"lms get {shlex.quote(repo_id)} && "
        f"lms load {shlex.quote(repo_id)} --gpu max --context-length {cfg.ctx}"
    )
