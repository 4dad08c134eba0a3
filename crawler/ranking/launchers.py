"""Launcher configs for ranked quants: a llama-swap model entry, an Ollama Modelfile, an LM
Studio model.yaml (pure: no I/O; quants search --emit writes them).
What a format cannot hold is returned as a note, never dropped silently.
Details: docs/internals/ranking.md#launchers
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from crawler.fit.estimate import DEFAULT_UBATCH
from crawler.fit.offload import n_slots
from crawler.ranking.model import Ranked

__all__ = ["FORMATS", "Emitted", "emit", "launcher_id", "llama_swap_config", "render"]

FORMATS = ("llama-swap", "ollama", "lmstudio")

#: Seconds a llama-swap model stays loaded without requests (its ttl; 0 would never unload).
LLAMA_SWAP_TTL = 300

#: What a Hub repo id and a quant label may hold (the Hub's own rules): anything else is not
#: written into a Modelfile, whose format documents no quoting.
_REPO = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*")
_LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_OLLAMA_CACHE = ("f16", "q8_0", "q4_0")  # what OLLAMA_KV_CACHE_TYPE accepts


@dataclass(frozen=True, slots=True)
class Emitted:
    """One result's launcher config: its id, a file name for it and what it left out."""

    rank: int
    id: str
    file_name: str
    document: Any  # a dict for the YAML formats, the Modelfile's text for Ollama
    notes: tuple[str, ...]


def launcher_id(r: Ranked) -> str:
    """The model id a launcher lists: ``repo:LABEL`` (the path when there is no label)."""
    c = r.candidate
    return f"{c.repo_id}:{c.quant_label or c.path}"


def _file_name(r: Ranked, suffix: str) -> str:
    """A file name that cannot leave the output folder: rank, then the id's safe characters."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", launcher_id(r)).strip("._-") or "model"
    return f"{r.rank:02d}-{slug[:120]}{suffix}"


def emit(fmt: str, results: Sequence[Ranked]) -> list[Emitted]:
    """The launcher configs of ``results`` in format ``fmt`` (one of FORMATS)."""
    if fmt == "llama-swap":
        return [_llama_swap(r) for r in results]
    if fmt == "ollama":
        return [_ollama(r) for r in results]
    if fmt == "lmstudio":
        return [_lmstudio(r) for r in results]
    raise ValueError(f"unknown launcher format {fmt!r}; known: {', '.join(FORMATS)}")


def _describe(r: Ranked) -> str:
    gib = r.estimate.total / 1024**3
    cfg = r.config
    return (
        f"quants search rank {r.rank}: {gib:.2f} GiB estimated at ctx {cfg.ctx},"
        f" cache K {cfg.type_k} / V {cfg.type_v}"
    )


# --- llama-swap ------------------------------------------------------------------------------


def _llama_swap(r: Ranked) -> Emitted:
    """The entry under ``models:``: llama-server as search printed it, on llama-swap's port."""
    args = shlex.split(r.command)
    # llama-swap starts the server on the port it assigns: the ${PORT} macro (config.example.yaml).
    cmd = shlex.join([*args, "--port", "${PORT}"])
    entry = {"name": launcher_id(r), "description": _describe(r), "cmd": cmd, "ttl": LLAMA_SWAP_TTL}
    return Emitted(r.rank, launcher_id(r), _file_name(r, ".yaml"), entry, ())


def llama_swap_config(emitted: Sequence[Emitted]) -> dict[str, Any]:
    """A whole llama-swap config: ``models:`` with one entry per result."""
    return {"models": {e.id: e.document for e in emitted}}


def _common_gaps(r: Ranked) -> list[str]:
    """What neither Ollama's Modelfile nor LM Studio's model.yaml is written with here."""
    cfg, out = r.config, []
    if cfg.ubatch != DEFAULT_UBATCH:
        out.append(f"-ub {cfg.ubatch} (physical batch) is not written")
    if r.devices:
        out.append(f"the layer split over {len(r.devices)} GPUs (-ts) is not written")
    return out


# --- Ollama ----------------------------------------------------------------------------------


def _ollama(r: Ranked) -> Emitted:
    c, cfg = r.candidate, r.config
    notes: list[str] = []
    label = c.quant_label
    lines = [f"# {launcher_id(r)}", f"# {_describe(r)}"]
    if not label or not _REPO.fullmatch(c.repo_id) or not _LABEL.fullmatch(label):
        notes.append(
            "no Modelfile: Ollama names a Hub GGUF as hf.co/<repo>:<QUANT> and this quant has"
            " no label, or a repo id or label outside the Hub's characters"
        )
        return Emitted(r.rank, launcher_id(r), _file_name(r, ".Modelfile"), None, tuple(notes))
    body = [f"FROM hf.co/{c.repo_id}:{label}", f"PARAMETER num_ctx {cfg.ctx}"]
    if cfg.n_gpu_layers is not None:
        body.append(f"PARAMETER num_gpu {cfg.n_gpu_layers}")
    if (cfg.type_k, cfg.type_v) != ("f16", "f16"):
        if cfg.type_k == cfg.type_v and cfg.type_k in _OLLAMA_CACHE:
            notes.append(
                f"the {cfg.type_k} KV cache is not a Modelfile parameter: start the server with"
                f" OLLAMA_FLASH_ATTENTION=1 OLLAMA_KV_CACHE_TYPE={cfg.type_k} (every model)"
            )
        else:
            notes.append(
                f"the cache K {cfg.type_k} / V {cfg.type_v} cannot be set in Ollama (one"
                " server-wide type for K and V: f16, q8_0 or q4_0); it runs with a larger cache"
                " than estimated"
            )
    if cfg.mtp:
        notes.append("MTP drafting (--spec-type draft-mtp) has no Ollama equivalent")
    if cfg.cpu_moe or cfg.n_cpu_moe:
        notes.append("experts in host memory (--cpu-moe / --n-cpu-moe) have no Modelfile parameter")
    if cfg.parallel not in (None, 1):
        notes.append(f"{cfg.parallel} slots: OLLAMA_NUM_PARALLEL is a server setting")
    notes += _common_gaps(r)
    notes.append("Ollama runs its own engine: its memory use can differ from the estimate")
    lines += [f"# not expressed: {n}" for n in notes]
    text = "\n".join([*lines, *body]) + "\n"
    return Emitted(r.rank, launcher_id(r), _file_name(r, ".Modelfile"), text, tuple(notes))


# --- LM Studio -------------------------------------------------------------------------------


def _lmstudio(r: Ranked) -> Emitted:
    c, cfg = r.candidate, r.config
    owner, _, name = c.repo_id.partition("/")
    notes = [
        f"the sources name the repository: choose the file {c.path} when LM Studio asks (a"
        " model.yaml source has no documented file field)"
    ]
    fields: list[dict[str, Any]] = [
        {"key": "llm.load.llama.autoFit", "value": False},
        {"key": "llm.load.contextLength", "value": cfg.ctx},
        {"key": "llm.load.numParallelSessions", "value": cfg.parallel or 1},
    ]
    if cfg.flash_attn in ("on", "off"):  # auto: LM Studio's own choice, as llama.cpp's
        fields.append({"key": "llm.load.llama.flashAttention", "value": cfg.flash_attn == "on"})
    if (cfg.type_k, cfg.type_v) != ("f16", "f16"):
        fields += [
            {"key": "llm.load.llama.kCacheQuantizationType",
             "value": {"checked": True, "value": cfg.type_k}},
            {"key": "llm.load.llama.vCacheQuantizationType",
             "value": {"checked": True, "value": cfg.type_v}},
        ]  # fmt: skip
    if cfg.n_gpu_layers is not None:
        slots = n_slots(c.coefficients)
        fields.append(
            {"key": "llm.load.llama.acceleration.offloadRatio",
             "value": round(cfg.n_gpu_layers / slots, 4)}
        )  # fmt: skip
        notes.append(
            f"LM Studio offloads a fraction of the layers: -ngl {cfg.n_gpu_layers} of {slots}"
            " is written as that ratio"
        )
    if cfg.mtp:
        fields.append({"key": "llm.load.llama.speculativeDecoding.draftMtp", "value": True})
        if cfg.spec_draft_n_max != 3:
            notes.append(f"--spec-draft-n-max {cfg.spec_draft_n_max} is not set (LM Studio's own)")
    if cfg.cpu_moe or cfg.n_cpu_moe:
        notes.append(
            "experts in host memory (--cpu-moe / --n-cpu-moe): set LM Studio's expert offload"
            " by hand; it is not written"
        )
    notes += _common_gaps(r)
    notes.append("LM Studio runs its own llama.cpp build: memory can differ from the estimate")
    doc = {
        "model": f"{owner}/{name}-{c.quant_label or 'gguf'}".lower(),
        "base": [
            {
                "key": c.repo_id.lower(),
                "sources": [{"type": "huggingface", "user": owner, "repo": name}],
            }
        ],
        "config": {"load": {"fields": fields}},
    }
    return Emitted(r.rank, launcher_id(r), _file_name(r, ".model.yaml"), doc, tuple(notes))


# --- text ------------------------------------------------------------------------------------


def dump_yaml(document: Any) -> str:
    """YAML through PyYAML's serializer (never by hand): plain block style, keys in order,
    non-ASCII escaped so no control character reaches a terminal or a config raw."""
    import yaml

    return yaml.safe_dump(document, sort_keys=False, allow_unicode=False, width=100)


def render(fmt: str, emitted: Sequence[Emitted]) -> str:
    """All results as one text: a llama-swap config, Modelfiles one after another (each from
    its FROM comment header), or a stream of LM Studio model.yaml documents."""
    if fmt == "llama-swap":
        return dump_yaml(llama_swap_config(emitted))
    if fmt == "ollama":
        return "\n".join(e.document for e in emitted if e.document is not None)
    import yaml

    return yaml.safe_dump_all(
        [e.document for e in emitted], sort_keys=False, allow_unicode=False, width=100
    )
