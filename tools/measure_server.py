"""Measure the real ``llama-server`` on synthetic real-size GGUFs: ground truth for setups.

What ``tools/measure_llamacpp.py`` does for the library (one probe process per configuration),
this does for the server binary users run, in the setups the library probe cannot show:
partial offload (``-ngl N``), experts in RAM (``--n-cpu-moe N`` / ``--cpu-moe``), a vision
projector (``--mmproj``), several GPUs (``-ts``), and llama.cpp's own log at ``-lv 4``.

* ``prepare SDIST OUT.tar.xz``: trim llama.cpp's tree out of the llama-cpp-python source
  distribution (it vendors llama.cpp) down to what the server target needs (a few MB, so it can
  travel to the GPU machine).
* ``build SRC BUILD``: CMake Release, CUDA (sm_90), static libraries, target ``llama-server``.
* ``run SERVER OUT --grid NAME``: write the models (``tests/synth`` presets at real size, zero
  sparse data; a real-size Gemma-3 vision projector), then per configuration start the server,
  wait for ``/health``, send one short ``/completion`` (so the compute buffers are really used),
  read the device memory (``nvidia-smi``: per GPU and, where the container shows it, per process)
  and the server's RSS (``/proc/PID/status``), stop it with SIGTERM (it prints
  ``common_memory_breakdown_print`` on the way out), and append one JSON line to
  ``OUT/server-measurements.jsonl``. Every server log goes into ``OUT/logs.tar.gz``.

Nothing here is imported by the library; tests read the fixture it produced.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import os
import re
import signal
import struct
import subprocess
import sys
import tarfile
import time
import urllib.error
import urllib.request
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

#: Model name -> (tests/synth preset, recipe). Real sizes (the presets' "real" dims).
SYNTH_MODELS: dict[str, tuple[str, str]] = {
    "llama8b": ("llama", "q4_k_m_like"),  # Meta-Llama-3-8B, 32 layers, dense
    "qwen36-27b": ("qwen35", "ud_q3_k_xl_like"),  # Qwen3.6-27B hybrid, 64 + 1 MTP block
    "qwen36-35b-a3b": ("qwen35moe", "q4_k_m_like"),  # Qwen3.6-35B-A3B MoE, 40 + 1 MTP block
    "gemma3-12b": ("gemma3", "q4_k_m_like"),  # gemma-3-12b-it, 48 layers, SWA
}

#: The projector that goes with gemma3-12b (SigLIP-So400m as in Gemma 3's mmproj files).
MMPROJ = "gemma3-12b-mmproj"
MARKER = "<__media__>"


def _cfg(model: str, ctx: int, ctk: str = "f16", ctv: str = "f16", **kw: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"model": model, "ctx": ctx, "ctk": ctk, "ctv": ctv}
    out.update(kw)
    return out


#: One GPU: partial offload, experts in RAM, vision, and -lv 4 logs. Most important first (the
#: run stops at its deadline). ``log``: keep this run's log among the committed fixtures.
SINGLE: tuple[dict[str, Any], ...] = (
    _cfg("llama8b", 32768, ngl=-1, log=1),
    _cfg("llama8b", 32768, ngl=16, log=1),
    _cfg("qwen36-35b-a3b", 32768, ncmoe=20, log=1),
    _cfg("gemma3-12b", 32768, mmproj=1, image=1, log=1),
    _cfg("qwen36-27b", 65536, "q4_0", "q4_0", ngl=32, log=1),
    _cfg("llama8b", 32768, ngl=0, log=1),
    _cfg("qwen36-35b-a3b", 32768, cpumoe=1, log=1),
    _cfg("llama8b", 32768, ngl=24),
    _cfg("llama8b", 32768, ngl=8),
    _cfg("qwen36-35b-a3b", 32768),
    _cfg("qwen36-35b-a3b", 32768, ncmoe=10),
    _cfg("qwen36-35b-a3b", 32768, ncmoe=30),
    _cfg("gemma3-12b", 32768),
    _cfg("gemma3-12b", 32768, mmproj=1),
    _cfg("qwen36-27b", 65536, "q4_0", "q4_0"),
    _cfg("qwen36-27b", 65536, "q4_0", "q4_0", ngl=48),
    _cfg("qwen36-27b", 65536, "q4_0", "q4_0", ngl=16),
    _cfg("qwen36-27b", 65536, "q4_0", "q4_0", ngl=0),
    _cfg("llama8b", 131072, "q8_0", "q8_0", ngl=16),
    _cfg("qwen36-35b-a3b", 131072, "q8_0", "q8_0", ncmoe=20),
    _cfg("qwen36-35b-a3b", 32768, ngl=20),
    _cfg("gemma3-12b", 131072, "q8_0", "q8_0", mmproj=1, image=1),
    _cfg("gemma3-12b", 32768, mmproj=1, image=1, ngl=24, log=1),
    _cfg("qwen36-27b", 262144, "q4_0", "q4_0", ngl=48),
    _cfg("llama8b", 32768, ngl=16, np=4),
    # Pass 2 additions: the output-layer boundary, vision with the model on the CPU, 262K.
    _cfg("llama8b", 32768, ngl=32),
    _cfg("llama8b", 32768, ngl=33),
    _cfg("gemma3-12b", 32768, mmproj=1, image=1, ngl=0),
    _cfg("qwen36-27b", 262144, "q4_0", "q4_0", log=1),
    _cfg("qwen36-27b", 131072, "q8_0", "q8_0"),
    _cfg("qwen36-35b-a3b", 131072, "q4_0", "q4_0", cpumoe=1),
    _cfg("qwen36-35b-a3b", 262144, "q4_0", "q4_0", ncmoe=20, ngl=30),
    _cfg("llama8b", 32768, ngl=16, ub=2048),
    _cfg("gemma3-12b", 32768, "q8_0", "q8_0", mmproj=1, image=1, ngl=36, np=2),
)

#: A few runs for the log format of another llama.cpp version (check-log).
LOGS: tuple[dict[str, Any], ...] = (
    _cfg("llama8b", 32768, ngl=-1, log=1),
    _cfg("llama8b", 32768, ngl=16, log=1),
    _cfg("qwen36-35b-a3b", 32768, ncmoe=20, log=1),
    _cfg("gemma3-12b", 32768, mmproj=1, image=1, ngl=24, log=1),
    _cfg("qwen36-27b", 65536, "q4_0", "q4_0", ngl=32, log=1),
    _cfg("llama8b", 32768, ngl=16, lv=3, log=1),
)

#: Two GPUs: dense, hybrid with MTP, MoE x even / uneven split x 2 contexts x 2 caches.
X2: tuple[dict[str, Any], ...] = tuple(
    _cfg(m, ctx, k, k, ts=ts, **({"log": 1} if ctx == 32768 and k == "f16" else {}))
    for m in ("llama8b", "qwen36-27b", "qwen36-35b-a3b")
    for ts in ("1,1", "3,1")
    for ctx in (32768, 131072)
    for k in ("f16", "q4_0")
)

#: Vision with an image really encoded (pass 3, after the F32-embedding fix of the projector).
VISION: tuple[dict[str, Any], ...] = (
    _cfg("gemma3-12b", 32768, mmproj=1, image=1, log=1),
    _cfg("gemma3-12b", 32768, mmproj=1, image=1, ngl=24, log=1),
    _cfg("gemma3-12b", 32768, mmproj=1, image=1, ngl=0),
    _cfg("gemma3-12b", 131072, "q8_0", "q8_0", mmproj=1, image=1),
    _cfg("gemma3-12b", 32768, "q8_0", "q8_0", mmproj=1, image=1, ngl=36, np=2),
    _cfg("gemma3-12b", 32768, mmproj=1),
    _cfg("gemma3-12b", 32768, mmproj=1, image=1, lv=3),
)

#: MTP drafting (``--spec-type draft-mtp``) through the server: the seed question's setup
#: (Qwen3.6-27B-shaped, 262K, q4_0 cache, MTP), then MTP with partial offload (``-ngl 1``: the
#: output layer only, the nextn block on the CPU; ``-ngl 2``: the nextn block too) and with
#: experts in RAM.
MTP: tuple[dict[str, Any], ...] = (
    _cfg("qwen36-27b", 262144, "q4_0", "q4_0", mtp=1, log=1),
    _cfg("qwen36-27b", 65536, mtp=1),
    _cfg("qwen36-27b", 65536, "q4_0", "q4_0", mtp=1, ngl=1, log=1),
    _cfg("qwen36-27b", 65536, "q4_0", "q4_0", mtp=1, ngl=2),
    _cfg("qwen36-27b", 65536, "q4_0", "q4_0", mtp=1, ngl=32, log=1),
    _cfg("qwen36-35b-a3b", 131072, "q8_0", "q8_0", mtp=1),
    _cfg("qwen36-35b-a3b", 131072, "q4_0", "q4_0", mtp=1, ncmoe=20, log=1),
    _cfg("qwen36-35b-a3b", 32768, mtp=1, ngl=20),
    _cfg("qwen36-27b", 262144, "q4_0", "q4_0", mtp=1, ctkd="q4_0", ctvd="q4_0"),
    _cfg("qwen36-27b", 131072, "q8_0", "q8_0", mtp=1, np=2),
)

#: The MTP block on the CPU (``-ngl 0``/``1``) at several draft-cache sizes: what the draft
#: context's GPU compute buffer copies when its block lives in host memory.
MTP_HOST: tuple[dict[str, Any], ...] = (
    _cfg("qwen36-27b", 262144, "q4_0", "q4_0", mtp=1, ngl=1),
    _cfg("qwen36-27b", 32768, mtp=1, ngl=1),
    _cfg("qwen36-27b", 16384, "q4_0", "q4_0", mtp=1, ngl=1, ctkd="q4_0", ctvd="q4_0"),
    _cfg("qwen36-27b", 65536, "q4_0", "q4_0", mtp=1, ngl=0, log=1),
    _cfg("qwen36-35b-a3b", 65536, "q4_0", "q4_0", mtp=1, ngl=1, log=1),
    _cfg("qwen36-35b-a3b", 32768, mtp=1, ngl=0),
    _cfg("qwen36-27b", 131072, "q8_0", "q8_0", mtp=1, ngl=1, ctkd="q8_0", ctvd="q8_0"),
)

#: Partial offload with quantized caches at long contexts (pass 5): run as a check of the copy
#: area of crawler/fit/offload.py then (1.75x, which read row 7 +802 MiB high), and of the one
#: step where the model said the device total rises as -ngl falls (llama8b at 262144 q4_0: 32 of
#: 33 slots vs all; it did not). The copy area was then refitted with these rows included.
VALIDATE: tuple[dict[str, Any], ...] = (
    _cfg("llama8b", 262144, "q4_0", "q4_0", ngl=32, log=1),
    _cfg("llama8b", 262144, "q4_0", "q4_0"),
    _cfg("llama8b", 262144, "q4_0", "q4_0", ngl=16),
    _cfg("gemma3-12b", 131072, "q4_0", "q4_0", ngl=24),
    _cfg("qwen36-35b-a3b", 131072, "q8_0", "q8_0", ngl=20),
    _cfg("llama8b", 65536, "q8_0", "q8_0", ngl=24),
    _cfg("qwen36-27b", 131072, "q8_0", "q8_0", ngl=32),
    _cfg("gemma3-12b", 262144, "q8_0", "q8_0", ngl=40),
)

GRIDS = {
    "single": SINGLE, "logs": LOGS, "vision": VISION, "x2": X2, "mtp": MTP, "mtp_host": MTP_HOST,
    "validate": VALIDATE,
}  # fmt: skip


def server_args(cfg: dict[str, Any], model: Path, mmproj: Path | None, port: int) -> list[str]:
    """llama-server's command line for ``cfg`` (tools/server README / common/arg.cpp names).

    ``--fit off``: the server would otherwise shrink ``-c``/``-ngl`` to the free memory
    (common/arg.cpp ``-fit``, default on) and the configuration would not be the one recorded.
    ``-lv 4`` by default: at llama.cpp 0c1e57098 the server prints the ``... buffer size = X
    MiB`` lines and the exit memory breakdown only at verbosity 4 (measured: a ``-lv 3`` log of
    that commit has none of them).
    """
    ngl = int(cfg.get("ngl", -1))
    args = [
        "-m", str(model), "--host", "127.0.0.1", "--port", str(port),
        "-c", str(cfg["ctx"]), "-ctk", cfg["ctk"], "-ctv", cfg["ctv"],
        "-fa", cfg.get("fa", "on"), "-ngl", "all" if ngl < 0 else str(ngl),
        "-np", str(cfg.get("np", 1)), "-ub", str(cfg.get("ub", 512)),
        "--fit", "off", "-lv", str(cfg.get("lv", 4)),
    ]  # fmt: skip
    if cfg.get("cpumoe"):
        args.append("--cpu-moe")
    elif cfg.get("ncmoe"):
        args += ["--n-cpu-moe", str(cfg["ncmoe"])]
    if cfg.get("mtp"):
        # common/arg.cpp at 0c1e57098: --spec-type (~4249), --spec-draft-n-max (~4140, default
        # 3), -ctkd/-ctvd (~4090): the same flags quants' commands print.
        args += ["--spec-type", "draft-mtp", "--spec-draft-n-max", str(cfg.get("draft", 3))]
        if cfg.get("ctkd"):
            args += ["-ctkd", cfg["ctkd"], "-ctvd", cfg["ctvd"]]
    if "ts" in cfg:
        args += ["-ts", str(cfg["ts"]), "-sm", "layer"]
    args += ["--mmproj", str(mmproj)] if mmproj is not None else ["--no-mmproj"]
    return args


def configs(grid: str) -> Iterator[dict[str, Any]]:
    """The configurations of ``grid``, in the order they are measured."""
    yield from GRIDS[grid]


# --- models ---------------------------------------------------------------------------------


def write_model(name: str, models_dir: Path) -> Path:
    """Write ``name`` (a key of SYNTH_MODELS or MMPROJ) unless already there."""
    models_dir.mkdir(parents=True, exist_ok=True)
    path = models_dir / f"{name}.gguf"
    if path.exists():
        return path
    from tests import synth

    if name == MMPROJ:
        return Path(synth.write_layout(path, gemma3_mmproj_layout()))
    arch, recipe = SYNTH_MODELS[name]
    return Path(synth.write_gguf(path, synth.preset(arch, "real"), getattr(synth, recipe)())[0])


def gemma3_mmproj_layout(
    n_embd_text: int = 3840,
    *,
    n_block: int = 27,
    n_embd: int = 1152,
    n_ff: int = 4304,
    n_head: int = 16,
    image_size: int = 896,
    patch: int = 14,
) -> Any:
    """Gemma 3's vision projector (SigLIP-So400m, 896 px, 14 px patches) at real size.

    Names and keys: tools/mtmd/clip-impl.h; ``mm.input_projection.weight`` has
    ``ne = (n_embd_text, n_embd)``: clip.cpp's ``clip_n_mmproj_embd`` returns its ``ne[0]`` for
    PROJECTOR_TYPE_GEMMA3 and models/siglip.cpp multiplies by its transpose.
    """
    from gguf.constants import GGUF_DEFAULT_ALIGNMENT

    from tests import synth
    from tests.synth.recipe import F16, F32
    from tests.synth.spec import GLOBAL
    from tests.synth.write import build_layout

    a = "clip"
    meta: dict[str, Any] = {
        "general.type": "mmproj",
        "general.name": "Synth-gemma-3-12b-mmproj",
        "general.file_type": 1,
        f"{a}.has_vision_encoder": True,
        f"{a}.projector_type": "gemma3",
        f"{a}.vision.image_size": image_size,
        f"{a}.vision.patch_size": patch,
        f"{a}.vision.embedding_length": n_embd,
        f"{a}.vision.feed_forward_length": n_ff,
        f"{a}.vision.block_count": n_block,
        f"{a}.vision.attention.head_count": n_head,
        f"{a}.vision.attention.layer_norm_epsilon": 1e-6,
        f"{a}.vision.projection_dim": n_embd_text,
        f"{a}.vision.image_mean": [0.5, 0.5, 0.5],
        f"{a}.vision.image_std": [0.5, 0.5, 0.5],
        f"{a}.use_gelu": True,
    }
    e, n_pos = n_embd, (image_size // patch) ** 2
    defs: list[tuple[Any, int]] = []

    def add(name: str, tid: int, *shape: int) -> None:
        defs.append((synth.TensorDef(name, shape, name.removesuffix(".weight"), None, GLOBAL), tid))

    # F32 embeddings as convert_hf_to_gguf writes them (conversion/gemma.py tensor_force_quant:
    # ".embeddings." -> F32); F16 ones abort the CUDA image encode (binbcast.cu assert, seen).
    add("v.patch_embd.weight", F32, patch, patch, 3, e)
    add("v.patch_embd.bias", F32, e)
    add("v.position_embd.weight", F32, e, n_pos)
    for i in range(n_block):
        for t in ("attn_q", "attn_k", "attn_v", "attn_out"):
            add(f"v.blk.{i}.{t}.weight", F16, e, e)
            add(f"v.blk.{i}.{t}.bias", F32, e)
        for t in ("ln1", "ln2"):
            add(f"v.blk.{i}.{t}.weight", F32, e)
            add(f"v.blk.{i}.{t}.bias", F32, e)
        add(f"v.blk.{i}.ffn_up.weight", F16, e, n_ff)
        add(f"v.blk.{i}.ffn_up.bias", F32, n_ff)
        add(f"v.blk.{i}.ffn_down.weight", F16, n_ff, e)
        add(f"v.blk.{i}.ffn_down.bias", F32, e)
    add("v.post_ln.weight", F32, e)
    add("v.post_ln.bias", F32, e)
    add("mm.input_projection.weight", F16, n_embd_text, e)
    add("mm.soft_emb_norm.weight", F32, e)
    return build_layout(a, meta, defs, GGUF_DEFAULT_ALIGNMENT, False, 3)


def png_bytes(side: int = 64) -> bytes:
    """A small grey RGB PNG (so a vision request needs no image library)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    raw = b"".join(b"\x00" + bytes([128, 128, 128]) * side for _ in range(side))
    ihdr = struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", ihdr)
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )


# --- reading memory -------------------------------------------------------------------------


def _smi(query: str, kind: str = "gpu") -> list[list[str]]:
    flag = "--query-gpu" if kind == "gpu" else "--query-compute-apps"
    try:
        out = subprocess.run(
            ["nvidia-smi", f"{flag}={query}", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=30, check=False,
        ).stdout  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [[c.strip() for c in line.split(",")] for line in out.splitlines() if line.strip()]


def gpu_mem() -> list[dict[str, int]]:
    """Per GPU: index, used / free / total MiB (nvidia-smi)."""
    rows = _smi("index,memory.used,memory.free,memory.total")
    return [
        {"index": int(r[0]), "used_mib": int(r[1]), "free_mib": int(r[2]), "total_mib": int(r[3])}
        for r in rows
        if len(r) == 4 and all(c.isdigit() for c in r)
    ]


def proc_mem() -> list[dict[str, Any]]:
    """Per compute process nvidia-smi can see: pid, GPU bus id, used MiB."""
    rows = _smi("pid,gpu_bus_id,used_memory", "apps")
    return [
        {"pid": int(r[0]), "gpu_bus_id": r[1], "used_mib": int(r[2])}
        for r in rows
        if len(r) == 3 and r[0].isdigit() and r[2].isdigit()
    ]


def rss(pid: int) -> dict[str, int]:
    """VmRSS, VmHWM, RssAnon, RssFile, RssShmem of ``pid`` in KiB (/proc/PID/status)."""
    out: dict[str, int] = {}
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return out
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem"):
            out[key + "_kib"] = int(rest.split()[0])
    return out


# --- the server's log -------------------------------------------------------------------------

_BUF = re.compile(r"^(?P<fn>\w+): +(?P<dev>\S+) (?P<what>.*?) buffer size = +(?P<mib>[\d.]+) MiB")
#: The server's own prefix before llama.cpp's text: ``0.02.724.876 I `` (time, level letter).
_PREFIX = re.compile(r"^\d+\.\d+\.\d+\.\d+ [A-Z] ")
_BREAKDOWN = re.compile(r"memory_breakdown_print: \| (?P<row>.*)\|\s*$")


def parse_log(text: str) -> dict[str, Any]:
    """llama.cpp's buffer lines (``<fn>: <dev> <what> buffer size = X MiB``) and the exit
    memory breakdown table rows, as printed."""
    bufs = []
    rows = []
    for line in text.splitlines():
        m = _BUF.search(_PREFIX.sub("", line, count=1))
        if m:
            bufs.append([m["fn"], m["dev"], m["what"], float(m["mib"])])
            continue
        b = _BREAKDOWN.search(line)
        if b:
            rows.append([c.strip() for c in b["row"].split("|")])
    return {"buffers": bufs, "breakdown": rows}


# --- one run --------------------------------------------------------------------------------


def _get(url: str, timeout: float = 5.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:  # loopback only
            return int(r.status), r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return int(e.code), e.read().decode("utf-8", "replace")
    except (urllib.error.URLError, OSError):
        return 0, ""


def _post(url: str, body: dict[str, Any], timeout: float = 120.0) -> tuple[int, str]:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:  # loopback only
            return int(r.status), r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return int(e.code), e.read().decode("utf-8", "replace")
    except (urllib.error.URLError, OSError) as e:
        return 0, str(e)


def wait_ready(proc: subprocess.Popen[bytes], base: str, deadline: float) -> bool:
    """Poll ``base``/health until the server answers 200 (True), exits or ``deadline``
    (time.monotonic) passes (False)."""
    while time.monotonic() < deadline and proc.poll() is None:
        if _get(base + "/health")[0] == 200:
            return True
        time.sleep(0.25)
    return False


def wait_or_kill(proc: subprocess.Popen[bytes], timeout: float = 60.0) -> bool:
    """Wait for a server that was told to stop; kill it after ``timeout``. True if killed."""
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return True
    return False


def measure(
    server: Path, cfg: dict[str, Any], model: Path, mmproj: Path | None, port: int, log: Path
) -> dict[str, Any]:
    """Run the server once for ``cfg``; the row written to the fixture (without the index)."""
    args = server_args(cfg, model, mmproj, port)
    paths = {str(model): model.name, str(mmproj): mmproj.name if mmproj else ""}
    row: dict[str, Any] = {
        "config": cfg,
        "argv": ["llama-server", *(paths.get(x, x) for x in args)],
    }
    row["gpu_before"] = gpu_mem()
    t0 = time.monotonic()
    with log.open("wb") as fh:
        # A fixed media marker (server-common.cpp get_media_marker: random unless pinned).
        env = {**os.environ, "LLAMA_MEDIA_MARKER": MARKER}
        proc = subprocess.Popen([str(server), *args], stdout=fh, stderr=subprocess.STDOUT, env=env)
    base = f"http://127.0.0.1:{port}"
    ready = wait_ready(proc, base, t0 + 300)
    row["ready"] = ready
    row["load_s"] = round(time.monotonic() - t0, 2)
    if ready:
        row["gpu_loaded"] = gpu_mem()
        prompt: Any = "The quick brown fox jumps over the lazy dog. " * 8
        if cfg.get("image"):
            img = base64.b64encode(png_bytes()).decode()
            prompt = {"prompt_string": f"Describe {MARKER} briefly.", "multimodal_data": [img]}
        status, body = _post(
            base + "/completion", {"prompt": prompt, "n_predict": 8, "cache_prompt": False}
        )
        row["completion_status"] = status
        if status != 200:
            row["completion_error"] = body[:500]
        else:
            try:
                timings = json.loads(body).get("timings", {})
                row["prompt_n"] = timings.get("prompt_n")
                row["predicted_n"] = timings.get("predicted_n")
            except ValueError:
                pass
        row["gpu_after_request"] = gpu_mem()
        row["procs"] = proc_mem()
        row["server_pid"] = proc.pid
        row["rss"] = rss(proc.pid)
        proc.send_signal(signal.SIGTERM)
    if wait_or_kill(proc):
        row["killed"] = True
    row["rc"] = proc.returncode
    row["wall_s"] = round(time.monotonic() - t0, 2)
    row["gpu_exit"] = gpu_mem()
    text = log.read_text("utf-8", "replace")
    row["log"] = parse_log(text)
    if not ready or row.get("completion_status") != 200:
        row["log_tail"] = text[-3000:]
    return row


def used_by_run(row: dict[str, Any]) -> list[int]:
    """MiB the run added per GPU: used after the request minus used before the process."""
    before = {g["index"]: g["used_mib"] for g in row.get("gpu_before", [])}
    return [g["used_mib"] - before.get(g["index"], 0) for g in row.get("gpu_after_request", [])]


def run(
    server: Path,
    out: Path,
    models_dir: Path,
    grid: str,
    until: float,
    only: str | None = None,
    per_run_s: float = 45.0,
    start: int = 0,
) -> None:
    """Measure ``grid`` in order until ``until`` (epoch seconds) leaves less than ``per_run_s``."""
    out.mkdir(parents=True, exist_ok=True)
    logs = Path(os.environ.get("TMPDIR", "/tmp")) / f"server-logs-{grid}"  # tarred into out
    logs.mkdir(parents=True, exist_ok=True)
    results = out / "server-measurements.jsonl"
    version = subprocess.run(
        [str(server), "--version"], capture_output=True, text=True, check=False
    )
    header = {
        "header": True,
        "grid": grid,
        "server_version": (version.stdout + version.stderr).strip()[-400:],
        "gpus": _smi("index,name,driver_version,memory.total"),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    with results.open("a") as fh:
        fh.write(json.dumps(header) + "\n")
        for index, cfg in enumerate(configs(grid)):
            if index < start or (only is not None and cfg["model"] != only):
                continue
            if time.time() + per_run_s > until:
                print(f"deadline: stopped before run {index}", file=sys.stderr)
                break
            t0 = time.monotonic()
            model = write_model(cfg["model"], models_dir)
            mmproj = write_model(MMPROJ, models_dir) if cfg.get("mmproj") else None
            name = f"{grid}-{index:02d}-{cfg['model']}"
            row = {"grid": grid, "index": index, "log_file": name + ".log"}
            row.update(measure(server, cfg, model, mmproj, 18080 + index, logs / (name + ".log")))
            fh.write(json.dumps(row) + "\n")
            fh.flush()
            print(
                json.dumps(
                    {
                        "i": index,
                        "cfg": cfg,
                        "ready": row["ready"],
                        "req": row.get("completion_status"),
                        "rc": row["rc"],
                        "used_mib": used_by_run(row),
                        "s": round(time.monotonic() - t0, 1),
                    }
                ),
                file=sys.stderr,
            )
    with tarfile.open(out / f"logs-{grid}.tar.gz", "w:gz") as tar:
        tar.add(logs, arcname="logs")


# --- source and build -----------------------------------------------------------------------

#: What the server build needs from llama.cpp's tree (tools/ whole: tools/CMakeLists.txt adds
#: every tool's folder), less the web UI's sources (built without the UI), tests and media.
_KEEP = (
    "CMakeLists.txt", "LICENSE", "licenses", "cmake", "include", "src", "vendor", "common",
    "gguf-py", "tools", "scripts/ui-assets.cmake", "ggml/CMakeLists.txt", "ggml/cmake",
    "ggml/include", "ggml/src/ggml-cpu", "ggml/src/ggml-cuda", "ggml/src/ggml-blas",
)  # fmt: skip
_DROP = (
    "tools/ui/src", "tools/ui/tests", "tools/ui/static", "tools/server/tests",
    "tools/server/bench", "tools/mtmd/tests", "gguf-py/tests",
)  # fmt: skip


def _kept(rel: str) -> bool:
    if any(rel == d or rel.startswith(d + "/") for d in _DROP):
        return False
    if rel.startswith("tools/mtmd/test-"):
        return False
    if rel.startswith("ggml/src/") and rel.count("/") == 2:
        return True  # ggml core sources beside the backend folders
    return any(rel == k or rel.startswith(k + "/") for k in _KEEP)


def prepare(sdist: Path, out: Path) -> None:
    """llama-cpp-python sdist -> ``out`` (.tar.xz) holding the trimmed ``llama.cpp/`` tree."""
    with tarfile.open(sdist) as src, tarfile.open(out, "w:xz") as dst:
        for member in src.getmembers():
            parts = member.name.split("/")
            if len(parts) < 4 or parts[1:3] != ["vendor", "llama.cpp"] or member.isdir():
                continue
            rel = "/".join(parts[3:])
            if not _kept(rel):
                continue
            handle = src.extractfile(member)  # links are resolved to their target's bytes
            if handle is None:
                continue
            data = handle.read()
            info = tarfile.TarInfo("llama.cpp/" + rel)
            info.size, info.mode, info.mtime = len(data), member.mode, member.mtime
            dst.addfile(info, io.BytesIO(data))


def build(src: Path, build_dir: Path) -> None:
    """Configure and build ``llama-server`` with CUDA for sm_90, static, without the web UI."""
    jobs = str(os.cpu_count() or 4)
    subprocess.run(
        [
            "cmake", "-S", str(src), "-B", str(build_dir), "-G", "Ninja",
            "-DCMAKE_BUILD_TYPE=Release", "-DGGML_CUDA=ON", "-DCMAKE_CUDA_ARCHITECTURES=90-real",
            "-DGGML_NATIVE=OFF", "-DBUILD_SHARED_LIBS=OFF", "-DLLAMA_CURL=OFF",
            "-DLLAMA_OPENSSL=OFF", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF",
            "-DLLAMA_BUILD_APP=OFF", "-DLLAMA_BUILD_SERVER=ON", "-DLLAMA_BUILD_TOOLS=ON",
            "-DLLAMA_BUILD_UI=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF", "-DGGML_CUDA_NCCL=OFF",
            "-DGGML_CUDA_COMPRESSION_MODE=none",
        ],
        check=True,
    )  # fmt: skip
    subprocess.run(
        ["cmake", "--build", str(build_dir), "--target", "llama-server", "-j", jobs], check=True
    )


def main() -> None:
    """CLI: ``prepare SDIST OUT``, ``build SRC BUILD``, ``run SERVER OUT --grid NAME``."""
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    v = sub.add_parser("prepare")
    v.add_argument("sdist", type=Path)
    v.add_argument("out", type=Path)
    b = sub.add_parser("build")
    b.add_argument("src", type=Path)
    b.add_argument("build_dir", type=Path)
    r = sub.add_parser("run")
    r.add_argument("server", type=Path)
    r.add_argument("out", type=Path)
    r.add_argument("--models", type=Path, default=Path("/tmp/models"))
    r.add_argument("--grid", choices=sorted(GRIDS), default="single")
    r.add_argument("--until", type=float, help="epoch seconds; default now + 300")
    r.add_argument("--only", help="only this model")
    r.add_argument("--start", type=int, default=0, help="skip the first N configurations")
    r.add_argument("--print", action="store_true", help="print the command lines and exit")
    w = sub.add_parser("write", help="write every model of a grid (ahead of run)")
    w.add_argument("--models", type=Path, default=Path("/tmp/models"))
    w.add_argument("--grid", choices=sorted(GRIDS), default="single")
    a = p.parse_args()
    if a.cmd == "prepare":
        prepare(a.sdist, a.out)
    elif a.cmd == "build":
        build(a.src, a.build_dir)
    elif a.cmd == "write":
        for name in dict.fromkeys(c["model"] for c in configs(a.grid)):
            write_model(name, a.models)
        if any(c.get("mmproj") for c in configs(a.grid)):
            write_model(MMPROJ, a.models)
    elif a.print:
        for i, cfg in enumerate(configs(a.grid)):
            mm = a.models / f"{MMPROJ}.gguf" if cfg.get("mmproj") else None
            print(i, " ".join(server_args(cfg, a.models / f"{cfg['model']}.gguf", mm, 18080 + i)))
    else:
        run(a.server, a.out, a.models, a.grid, a.until or time.time() + 300, a.only, start=a.start)


if __name__ == "__main__":
    main()
