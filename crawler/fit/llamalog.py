"""Read a llama-server / llama-cli log: the run's configuration and the buffers it allocated (pure).

llama.cpp's own log is the strongest evidence of a run's cost; parsing is linear in its size.
Details: docs/internals/fit.md#llamalog
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO

from crawler.base.errors import QuantsError
from crawler.base.units import MIB

__all__ = [
    "MAX_LINE",
    "RERUN_HINT",
    "LogConfig",
    "LogError",
    "LoggedBuffer",
    "ParsedLog",
    "parse_log",
    "read_log_lines",
]

#: Characters of one log line kept (llama.cpp's lines are under 1 KB; a model path under 4 KB).
MAX_LINE = 16 * 1024
#: Characters a pattern may see on either side of its literal.
_WINDOW = 512

RERUN_HINT = (
    "rerun llama-server with -lv 4 (llama-cli: -lv 4) and keep the whole log, from start to exit:"
    " llama-server -m MODEL.gguf ... -lv 4 2>&1 | tee server.log"
)

_LOADED_HEAD = re.compile(r"loaded meta data with \d+ key-value pairs and \d+ tensors from ")
_LOADING = re.compile(r"load_model: loading model '(.+)'")
_OFFLOADED = re.compile(r"offloaded (\d+)/(\d+) layers to GPU")
_PARAM = re.compile(
    r"llama_context: (n_seq_max|n_ctx|n_batch|n_ubatch|flash_attn|kv_unified)\s+= (\S+)"
)
# tools/server: "common_params_print_info: verbosity = %d" and "llama_server: model loaded".
_VERBOSITY = re.compile(r"verbosity = (\d+)")
_MODEL_LOADED = re.compile(r"srv +\S+: model loaded|main: model loaded")
# src/llama-model-loader.cpp (LLAMA_LOG_DEBUG, so -lv 4): "tensor %s (%zu MiB %s) buffer type
# overridden to %s" -- what --cpu-moe / --n-cpu-moe (common/arg.cpp: one override per layer's
# ffn_*_exps) and -ot did.
_OVERRIDE = re.compile(
    r"tensor blk\.(\d+)\.ffn_\w*_?(?:ch)?exps\.\w+ \(.*\) buffer type overridden to (\S+)"
)
# src/llama-context.cpp: "n_ctx_seq (%u) > n_ctx_train (%u) -- possible training context overflow"
_OVERFLOW = re.compile(r"n_ctx_seq \((\d+)\) > n_ctx_train \((\d+)\)")
_FA_AUTO = re.compile(r"Flash Attention was auto, set to (enabled|disabled)")
_KV_SIZE = re.compile(r"llama_kv_cache(?:_\w+)?: size = .*?K \((\w+)\):.*?V \((\w+)\):")
_BUFFER = re.compile(r"(\w+): +(\S+) +(model|KV|RS|compute|output) buffer size = +([\d.]+) MiB")
# tools/mtmd/clip.cpp logs the projector's (mmproj) compute buffers from these functions: memory
# of the multimodal projector, which the estimate does not model.
_CLIP_FUNCS = {"reserve_compute_meta", "alloc_compute_meta"}
_BREAKDOWN_DEV = re.compile(
    r"memory_breakdown_print: \|\s+- (\S+)(?: \(([^)]*)\))?\s+\|\s+(\d+) = +(\d+) \+ \(\s*(\d+) ="
    r" +(\d+) \+ +(\d+) \+ +(\d+)\) \+ +(\d+) \|"
)
_BREAKDOWN_HOST = re.compile(
    r"memory_breakdown_print: \|\s+- (\S+)\s+\|\s+(\d+) = +(\d+) \+ +(\d+) \+ +(\d+)\s+\|"
)


class LogError(QuantsError):
    """The log cannot be read as a llama.cpp run (unknown, cut, or without buffer sizes)."""


@dataclass(frozen=True, slots=True)
class LoggedBuffer:
    """One buffer as logged: ``kind`` model|kv|rs|compute|output (or ``breakdown_*``), the
    buffer's device name (``CUDA0``, ``CUDA_Host``, ``CPU_Mapped``) and its size."""

    kind: str
    device: str
    mib: float

    @property
    def bytes(self) -> int:
        """The logged MiB in bytes (printed with 2 decimals: +-5 KiB)."""
        return round(self.mib * MIB)

    @property
    def on_host(self) -> bool:
        """Host memory (CPU, CPU_Mapped, CUDA_Host pinned, the breakdown's Host row)."""
        return (
            self.device.startswith("CPU")
            or self.device.endswith("_Host")
            or (self.device == "Host")
        )


@dataclass(frozen=True, slots=True)
class LogConfig:
    """The run's configuration as the log states it (None where the log does not say)."""

    model_path: str | None = None
    ctx: int | None = None
    type_k: str | None = None
    type_v: str | None = None
    flash_attn: str | None = None  # "on" | "off" | "auto" (auto only when not resolved)
    n_seq: int | None = None
    kv_unified: bool | None = None
    batch: int | None = None
    ubatch: int | None = None
    n_gpu_layers: int | None = None
    n_layers: int | None = None
    #: Blocks whose routed experts the log shows overridden to a host buffer (--n-cpu-moe).
    expert_host_layers: tuple[int, ...] = ()
    #: llama.cpp warned "tensor overrides to CPU are used" (--cpu-moe, --n-cpu-moe, -ot).
    cpu_overrides: bool = False
    #: The model's trained context when llama.cpp warned that n_ctx_seq exceeds it.
    n_ctx_train: int | None = None
    #: How many contexts the log created (2 with an MTP / draft context).
    n_contexts: int = 0


@dataclass(frozen=True, slots=True)
class ParsedLog:
    """What parse_log found."""

    config: LogConfig
    #: ``... buffer size = X MiB`` lines, in log order.
    buffers: tuple[LoggedBuffer, ...] = ()
    #: The memory breakdown at exit as buffers (``model``/``context``/``compute`` per device).
    breakdown: tuple[LoggedBuffer, ...] = field(default=())


def _fa(value: str) -> str:
    v = value.lower()
    if v in ("1", "enabled", "on", "true"):
        return "on"
    if v in ("0", "disabled", "off", "false"):
        return "off"
    return "auto" if v == "auto" else v


def _lines(text: str | Iterable[str]) -> Iterator[str]:
    source = text.splitlines() if isinstance(text, str) else text
    for line in source:
        yield line[:MAX_LINE]


def _near(pattern: re.Pattern[str], line: str, key: str) -> re.Match[str] | None:
    """``pattern`` searched only within _WINDOW characters around the first ``key`` in ``line``
    (every pattern below contains its key): linear in the line, whatever the pattern."""
    i = line.find(key)
    if i < 0:
        return None
    return pattern.search(line, max(0, i - _WINDOW), i + len(key) + _WINDOW)


def _model_path(line: str) -> str | None:
    """The model path of a "loaded meta data ... from PATH (version" or _LOADING line, found
    with str.find (a path may be long)."""
    key = "tensors from "
    i = line.find(key)
    if i >= 0 and _near(_LOADED_HEAD, line, key):
        end = line.find(" (version", i + len(key))
        if end > i + len(key):
            return line[i + len(key) : end].strip()
    key = "load_model: loading model '"
    i = line.find(key)
    if i >= 0:
        end = line.rfind("'")
        if end > i + len(key):
            return line[i + len(key) : end].strip()
    return None


def read_log_lines(fh: IO[bytes], *, chunk: int = 1 << 20) -> Iterator[str]:
    """The lines of a binary log stream, decoded as UTF-8 (bad bytes replaced), each cut at
    MAX_LINE characters, reading ``chunk`` bytes at a time: memory stays bounded whatever the
    file's size or its longest line."""
    import codecs

    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    carry = ""
    skipping = False  # inside a line already cut at MAX_LINE: drop until its end
    while True:
        block = fh.read(chunk)
        text = decoder.decode(block, final=not block)
        parts = (carry + text).split("\n")
        carry = parts.pop()
        for part in parts:
            if not skipping:
                yield part.rstrip("\r")[:MAX_LINE]
            skipping = False
        if len(carry) > MAX_LINE:
            if not skipping:
                yield carry[:MAX_LINE]
            skipping, carry = True, ""
        if not block:
            break
    if carry and not skipping:
        yield carry.rstrip("\r")


def parse_log(text: str | Iterable[str]) -> ParsedLog:
    """Parse a llama-server / llama-cli log (its text, or its lines one by one); raise LogError
    (one line) when it is not a llama.cpp log, ends before its context was created, or carries
    no buffer sizes."""
    model = None
    offl: tuple[int, int] | None = None
    params: dict[str, str] = {}
    n_contexts = 0
    fa_resolved = None
    types: tuple[str, str] | None = None
    buffers: list[LoggedBuffer] = []
    reserved: dict[str, int] = {}  # device -> index in buffers of this context's compute buffer
    breakdown: list[LoggedBuffer] = []
    seen_llama = False
    verbosity: int | None = None
    n_ctx_train: int | None = None
    expert_layers: set[int] = set()
    cpu_overrides = False
    loaded = False
    for line in _lines(text):
        if m := _near(_VERBOSITY, line, "verbosity = "):
            verbosity = int(m.group(1))
        if _near(_MODEL_LOADED, line, ": model loaded"):
            loaded = True
        if not any(
            w in line for w in ("llama", "buffer size", "load_", "memory_breakdown", "overridden")
        ):
            continue
        if (path := _model_path(line)) is not None:
            model = model or path
            seen_llama = True
        elif m := _near(_OFFLOADED, line, "offloaded "):
            offl = offl or (int(m.group(1)), int(m.group(2)))
        elif m := _near(_PARAM, line, "llama_context: "):
            key, value = m.group(1), m.group(2)
            if key == "n_seq_max":
                n_contexts += 1
            # The first context is the target; an MTP / draft context follows with its own.
            if n_contexts <= 1:
                params.setdefault(key, value)
            seen_llama = True
        elif "tensor overrides to CPU" in line:
            cpu_overrides = True
        elif m := _near(_OVERRIDE, line, " buffer type overridden to "):
            if m.group(2).startswith("CPU") or m.group(2).endswith("_Host"):
                expert_layers.add(int(m.group(1)))
        elif m := _near(_OVERFLOW, line, "n_ctx_seq ("):
            n_ctx_train = n_ctx_train or int(m.group(2))
        elif m := _near(_FA_AUTO, line, "Flash Attention was auto"):
            fa_resolved = fa_resolved or _fa(m.group(1))
        elif m := _near(_KV_SIZE, line, "llama_kv_cache"):
            types = types or (m.group(1).lower(), m.group(2).lower())
        elif m := _near(_BUFFER, line, " buffer size = "):
            kind = m.group(3).lower()
            if m.group(1) in _CLIP_FUNCS:
                kind = "mmproj_" + kind
            buf = LoggedBuffer(kind, m.group(2), float(m.group(4)))
            if kind != "compute":
                reserved = {}
            elif (i := reserved.get(buf.device)) is not None:
                # The same context reserving again (the MTP draft context does, for its second
                # graph): ggml_gallocr_reserve_n re-sizes the one buffer, it does not add one.
                buffers[i] = max(buffers[i], buf, key=lambda b: b.mib)
                continue
            else:
                reserved[buf.device] = len(buffers)
            buffers.append(buf)
        elif m := _near(_BREAKDOWN_DEV, line, "memory_breakdown_print: |"):
            dev = m.group(1)
            for kind, mib in zip(("model", "context", "compute"), m.group(6, 7, 8), strict=True):
                breakdown.append(LoggedBuffer(kind, dev, float(mib)))
        elif m := _near(_BREAKDOWN_HOST, line, "memory_breakdown_print: |"):
            dev = m.group(1)
            for kind, mib in zip(("model", "context", "compute"), m.group(3, 4, 5), strict=True):
                breakdown.append(LoggedBuffer(kind, dev, float(mib)))
    if not seen_llama and (buffers or breakdown):
        raise LogError(
            "the log lacks its beginning (no 'loading model' or 'llama_context: n_ctx' lines, only"
            " buffer sizes): pass the whole log, from the start of the run"
        )
    if not seen_llama:
        raise LogError(
            "not a llama.cpp log: no 'loaded meta data ... from MODEL' or 'llama_context: n_ctx'"
            " lines; pass the log of llama-server or llama-cli"
        )
    quiet = verbosity is not None and verbosity < 4
    if "n_ctx" not in params and not buffers and (quiet or loaded):
        # A whole run at the default verbosity (3): llama-server ran, but printed neither the
        # context parameters nor any buffer (they are trace-level).
        level = f" (it was run at verbosity {verbosity})" if quiet else ""
        raise LogError(f"the log has no buffer sizes and no memory breakdown{level}; {RERUN_HINT}")
    if "n_ctx" not in params:
        raise LogError(
            "the log ends before llama.cpp created its context (no 'llama_context: n_ctx' line):"
            " the run failed or the log is cut; pass the whole log"
        )
    if not buffers and not breakdown:
        raise LogError(f"the log has no buffer sizes and no memory breakdown; {RERUN_HINT}")

    def num(key: str) -> int | None:
        value = params.get(key, "")
        return int(value) if value.isdigit() else None

    fa = _fa(params["flash_attn"]) if "flash_attn" in params else None
    if fa == "auto" and fa_resolved:
        fa = fa_resolved
    unified = params.get("kv_unified")
    config = LogConfig(
        model_path=model,
        ctx=num("n_ctx"),
        type_k=types[0] if types else None,
        type_v=types[1] if types else None,
        flash_attn=fa,
        n_seq=num("n_seq_max"),
        kv_unified=None if unified is None else unified == "true",
        batch=num("n_batch"),
        ubatch=num("n_ubatch"),
        n_gpu_layers=offl[0] if offl else None,
        n_layers=offl[1] if offl else None,
        n_ctx_train=n_ctx_train,
        expert_host_layers=tuple(sorted(expert_layers)),
        cpu_overrides=cpu_overrides or bool(expert_layers),
        n_contexts=n_contexts,
    )
    return ParsedLog(config, tuple(buffers), tuple(breakdown))
