"""How to run a ranked quant: llama-server, Ollama and LM Studio command lines (pure: no I/O).

Every command is a quoted argv list: published names must never run anything.
Details: docs/internals/ranking.md#commands
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence

from crawler.fit import RunConfig, command_args
from crawler.profile.quant_files import byte_parts, llama_cpp_model_file, loaded_name, shard_info
from crawler.ranking.shell import UnsafeArgument, check_argument, shell_join

__all__ = [
    "hf_args",
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
            p != path and pattern.search(p) and llama_cpp_model_file(p) for p in siblings
        ):
            return ["-hf", f"{repo_id}:{label}"]
    return ["-hf", repo_id, "-hff", path]


def llama_server_command(
    repo_id: str,
    path: str,
    label: str | None,
    cfg: RunConfig,
    siblings: Sequence[str],
    *,
    mmproj: bool = False,
    split: Sequence[float] = (),
) -> str | None:
    """The ``llama-server`` command that downloads this quant and runs it exactly as ``cfg``.

    crawler.fit.command_args is the one source of the flags (checked against llama.cpp's
    common/arg.cpp); its ``-m PATH`` becomes the Hub download, plus ``--no-mmproj`` unless
    ``mmproj``: ``-hf`` fetches a vision projector by default (arg.cpp ``--hf-repo`` help), which
    would use memory the estimate does not count. ``split`` is the ``-ts`` layer split.

    A byte-cut quant (``X.gguf.part1of2``) cannot come through ``-hf``: llama.cpp picks only
    paths ending in ``.gguf`` (download.cpp ``gguf_filename_is_model``). Its command downloads
    the parts (``hf download``, huggingface_hub's CLI), joins them and runs the joined file
    (None with ``mmproj``: which projector ``-hf`` would have fetched is not known here).
    """
    args = command_args(cfg.replace(model_path="MODEL"))
    i = args.index("-m")
    info = shard_info(path)
    parts = byte_parts(path, siblings) if info is not None and info[0] == "part" else []
    if parts and mmproj:
        return None
    joined = loaded_name(path)
    source = ["-m", joined] if parts else hf_args(repo_id, path, label, siblings)
    args[i : i + 2] = [*source, *([] if mmproj or parts else ["--no-mmproj"])]
    if split:
        args += ["-ts", ",".join(f"{x:g}" for x in split)]
    try:
        if not parts:
            return shell_join(args)
        n = len(parts)
        fetch = shell_join(
            ["hf", "download", repo_id, *parts, "--local-dir", "."], positional=range(2, n + 3)
        )
        cat = shell_join(["cat", *parts], positional=range(1, n + 1))
        return f"{fetch} && {cat} > {shlex.quote(check_argument(joined))} && {shell_join(args)}"
    except UnsafeArgument:
        return None


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
    env = {"OLLAMA_CONTEXT_LENGTH": str(cfg.ctx), "OLLAMA_FLASH_ATTENTION": "1"}
    if cfg.type_k != "f16":
        env["OLLAMA_KV_CACHE_TYPE"] = cfg.type_k
    try:
        serve = shell_join(["ollama", "serve"], env=env)
        run = shell_join(["ollama", "run", f"hf.co/{repo_id}:{label}"], positional=(2,))
    except UnsafeArgument:
        return None
    return f"{serve} & {run}"


def lmstudio_command(repo_id: str, cfg: RunConfig) -> str | None:
    """The LM Studio CLI equivalent (``lms``), or None where it cannot express ``cfg``.

    ``lms load`` takes ``--gpu max`` and ``--context-length`` (lmstudio.ai/docs/cli/load); cache
    quantization and MTP drafting are not ``lms`` flags, so only f16 caches without MTP apply.
    """
    if cfg.mtp or cfg.cpu_moe or cfg.n_cpu_moe or (cfg.type_k, cfg.type_v) != ("f16", "f16"):
        return None
    try:
        get = shell_join(["lms", "get", repo_id], positional=(2,))
        load = shell_join(
            ["lms", "load", repo_id, "--gpu", "max", "--context-length", str(cfg.ctx)],
            positional=(2,),
        )
    except UnsafeArgument:
        return None
    return f"{get} && {load}"
