"""The GPU table (crawler/data/gpus.csv, package data) and fuzzy --gpu NAME resolution.

Turns a free-form name into exactly one row, or a UsageError listing the choices; no network.
Details: docs/internals/fit.md#gpus
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache, lru_cache

from crawler.base.data import data_text
from crawler.base.errors import UsageError
from crawler.base.units import GIB

__all__ = [
    "GPU",
    "UNIFIED_GPU_FRACTION",
    "DeviceSet",
    "GPUMatch",
    "device_set",
    "load_gpus",
    "resolve_gpu",
    "resolve_gpus",
]

#: Share of a unified-memory machine's RAM the GPU may wire by default. macOS caps Metal's working
#: set near 2/3-3/4 of RAM (``recommendedMaxWorkingSetSize``; raised with ``iogpu.wired_limit_mb``);
#: Strix Halo's split is set in firmware/GTT. We take 0.75 and say so; ``--vram`` overrides it.
UNIFIED_GPU_FRACTION = 0.75

# Words that carry no identity: vendor and family prefixes. They may be typed or not.
_FILLER = frozenset(
    {"nvidia", "geforce", "rtx", "gtx", "amd", "radeon", "rx", "apple", "tesla", "gpu",
     "generation", "graphics", "card", "ryzen", "ai", "the", "with", "w"}
)  # fmt: skip
# Synonyms folded before matching: NVIDIA sells "Laptop GPU"s that TechPowerUp calls "Mobile".
_SYNONYMS = {"mobile": "laptop", "notebook": "laptop"}
# Alphabetic query tokens at least this long may match a table token with a typo.
_TYPO_MIN_LEN = 4
_TYPO_SCORE = 80.0


@dataclass(frozen=True, slots=True)
class GPU:
    """One row of the GPU table."""

    name: str
    vendor: str
    kind: str  # desktop | laptop | workstation | datacenter | apple | apu
    memory_gib: float
    bandwidth_gb_s: float  # peak, 10^9 bytes per second
    fp32_tflops: float | None  # peak FP32 throughput (TechPowerUp rows; else unknown)
    unified: bool  # memory shared with the CPU (Apple silicon, Strix Halo)
    aliases: tuple[str, ...]
    source: str

    @property
    def memory_bytes(self) -> int:
        """The memory as marketed (GDDR/HBM sizes are binary GiB)."""
        return int(self.memory_gib * GIB)

    @property
    def budget_bytes(self) -> int:
        """Memory llama.cpp can use by default: all of it, or UNIFIED_GPU_FRACTION."""
        fraction = UNIFIED_GPU_FRACTION if self.unified else 1.0
        return int(self.memory_gib * fraction * GIB)


@dataclass(frozen=True, slots=True)
class GPUMatch:
    """The row a query resolved to, and how: ``exact`` or the tokens that decided it."""

    gpu: GPU
    query: str
    exact: bool

    def describe(self) -> str:
        """One line for stderr: which GPU was chosen, its memory and bandwidth."""
        shared = f", unified: using {UNIFIED_GPU_FRACTION:.0%}" if self.gpu.unified else ""
        return (
            f"GPU {self.query!r} -> {self.gpu.name} ({self.gpu.memory_gib:g} GiB{shared}, "
            f"{self.gpu.bandwidth_gb_s:g} GB/s)"
        )


def _parse(text: str) -> tuple[GPU, ...]:
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    return tuple(
        GPU(
            name=rec["name"],
            vendor=rec["vendor"],
            kind=rec["kind"],
            memory_gib=float(rec["memory_gib"]),
            bandwidth_gb_s=float(rec["bandwidth_gb_s"]),
            fp32_tflops=float(rec["fp32_tflops"]) if rec["fp32_tflops"].strip() else None,
            unified=rec["unified"].strip().lower() == "true",
            aliases=tuple(a.strip() for a in rec["aliases"].split(";") if a.strip()),
            source=rec["source"],
        )
        for rec in csv.DictReader(io.StringIO("\n".join(lines)))
    )


@cache
def load_gpus() -> tuple[GPU, ...]:
    """All rows of the shipped table, in file order (cached)."""
    text = data_text("gpus.csv")
    return _parse(text)


def _tokens(text: str) -> list[str]:
    """Lower-case tokens; "24 GB" -> "24gb", "Mobile" -> "laptop", punctuation dropped."""
    text = text.lower().replace("(", " ").replace(")", " ")
    text = re.sub(r"(\d+)\s*gb\b", r"\1gb", text)
    out = []
    for tok in re.split(r"[\s,/_+-]+", text):
        tok = tok.strip(".")
        if not tok:
            continue
        out.append(_SYNONYMS.get(tok, tok))
    return out


def _token_matches(q: str, t: str) -> bool:
    if q == t:
        return True
    # "sxm" names "sxm5", "pcie" stays "pcie": a word may stand for a word-and-digit token.
    if q.isalpha() and len(q) >= 3 and t.startswith(q) and t[len(q) :].isdigit():
        return True
    if q.isalpha() and len(q) >= _TYPO_MIN_LEN and t.isalpha():
        from rapidfuzz import fuzz

        return fuzz.ratio(q, t) >= _TYPO_SCORE
    return False


def _extras(query: list[str], name: list[str]) -> int | None:
    """Identity tokens of ``name`` the query did not ask for; None if a query token is unmatched."""
    unmatched = list(name)
    for q in query:
        if q in _FILLER and q not in unmatched:
            continue
        for i, t in enumerate(unmatched):
            if _token_matches(q, t):
                del unmatched[i]
                break
        else:
            return None
    return sum(1 for t in unmatched if t not in _FILLER)


#: ``2x 3090``, ``4 x H100``: a count of identical devices before the name.
_COUNT = re.compile(r"\s*(\d+)\s*x\s+(.+)", re.IGNORECASE)
MAX_DEVICES = 16


def resolve_gpus(queries: Sequence[str]) -> list[GPUMatch]:
    """One match per device: each query names a GPU, ``2x NAME`` two of them (at most 16)."""
    out: list[GPUMatch] = []
    for query in queries:
        m = _COUNT.fullmatch(query)
        count, name = (int(m.group(1)), m.group(2)) if m else (1, query)
        if not 1 <= count <= MAX_DEVICES:
            raise UsageError(f"--gpu {query!r}: 1 to {MAX_DEVICES} devices")
        out += [resolve_gpu(name)] * count
    if len(out) > MAX_DEVICES:
        raise UsageError(f"at most {MAX_DEVICES} GPUs")
    return out


def resolve_gpu(query: str, gpus: tuple[GPU, ...] | None = None) -> GPUMatch:
    """The one GPU ``query`` names; UsageError (with the choices) when unknown or ambiguous.

    Every query token must match a token of the row's name or of one of its aliases (numbers
    exactly, words of 4+ letters up to a typo via rapidfuzz); vendor words may be left out. Among
    the rows that match, the one with the fewest identity tokens the query did not mention wins:
    "5090" is the desktop RTX 5090, "5090 laptop" the laptop GPU, and "4060 ti" is ambiguous
    (8 GB and 16 GB).
    """
    return _resolve_shipped(query) if gpus is None else _resolve(query, gpus)


@lru_cache(maxsize=512)
def _resolve_shipped(query: str) -> GPUMatch:
    """resolve_gpu on the shipped table, remembered: a match scores every row's name and
    aliases (~3 ms), and a server or a batch of searches asks for the same few GPUs."""
    return _resolve(query, load_gpus())


def _resolve(query: str, table: tuple[GPU, ...]) -> GPUMatch:
    q = _tokens(query)
    if not [t for t in q if t not in _FILLER]:
        raise UsageError(f"--gpu {query!r} names no GPU")
    scored: dict[str, tuple[int, GPU]] = {}
    for gpu in table:
        for label in (gpu.name, *gpu.aliases):
            toks = _tokens(label)
            if toks == q or [t for t in toks if t not in _FILLER] == [
                t for t in q if t not in _FILLER
            ]:
                return GPUMatch(gpu=gpu, query=query, exact=True)
            extra = _extras(q, toks)
            if extra is not None and (gpu.name not in scored or extra < scored[gpu.name][0]):
                scored[gpu.name] = (extra, gpu)
    if not scored:
        from rapidfuzz import fuzz, process

        names = [g.name for g in table]
        close = process.extract(query, names, scorer=fuzz.WRatio, limit=5)
        hint = ", ".join(name for name, _score, _i in close)
        raise UsageError(f"unknown GPU {query!r}; closest: {hint} (or give --vram GIB)")
    best = min(extra for extra, _ in scored.values())
    winners = [gpu for extra, gpu in scored.values() if extra == best]
    if len(winners) > 1:
        choices = "; ".join(g.name for g in winners[:12])
        more = f" (+{len(winners) - 12} more)" if len(winners) > 12 else ""
        raise UsageError(f"GPU {query!r} is ambiguous: {choices}{more}; be more specific")
    return GPUMatch(gpu=winners[0], query=query, exact=False)


@dataclass(frozen=True, slots=True)
class DeviceSet:
    """Several GPUs as llama.cpp's layer split sees them: each device's name and memory, and
    the ``-ts`` proportions (without ``-ts``, each device's memory: llama.cpp splits by free
    memory, src/llama-model.cpp ``load_tensors``)."""

    names: tuple[str, ...]
    budgets: tuple[int, ...]  # bytes per device
    split: tuple[float, ...]
    matches: tuple[GPUMatch, ...]  # empty when given as --vram per device

    @property
    def bandwidth_gb_s(self) -> float | None:
        """Layers run one device after the other: a token reads each device's share of the
        weights at that device's bandwidth (the split's proportions stand in for the shares)."""
        if not self.matches:
            return None
        total = sum(self.split)
        return 1 / sum(
            x / total / m.gpu.bandwidth_gb_s for x, m in zip(self.split, self.matches, strict=True)
        )


def device_set(
    gpus: Sequence[str], vram_gib: float | None, split: Sequence[float] = ()
) -> DeviceSet:
    """The devices of ``--gpu`` (repeated, or ``2x NAME``), or of ``--vram`` per device with
    ``-ts``; UsageError for a mix, a unified-memory device, or a split of the wrong length."""
    matches = resolve_gpus(gpus)
    if matches and vram_gib is not None:
        raise UsageError("several GPUs: give --gpu per device, or --vram (per device) with -ts")
    if any(m.gpu.unified for m in matches):
        raise UsageError("several GPUs: unified-memory devices are not modelled")
    if matches:
        names = tuple(m.gpu.name for m in matches)
        budgets = tuple(m.gpu.budget_bytes for m in matches)
    elif vram_gib is not None and split:
        names = (f"{vram_gib:g} GiB",) * len(split)
        budgets = (int(vram_gib * GIB),) * len(split)
    else:
        raise UsageError("-ts needs --gpu (one per device) or --vram (per device)")
    ts = tuple(split) or tuple(b / GIB for b in budgets)
    if len(ts) != len(budgets):
        raise UsageError(f"-ts needs {len(budgets)} proportions, one per device, not {len(ts)}")
    return DeviceSet(names, budgets, ts, tuple(matches))
