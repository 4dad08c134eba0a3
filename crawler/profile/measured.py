"""Measured quality published inside a model repo (pure: parsing and matching, no I/O).

Reads MagicQuant manifests and llama-perplexity logs, each row keyed to one file of the repo.
Details: docs/internals/profile.md#measured
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

__all__ = [
    "MAX_ARTIFACTS",
    "MAX_ARTIFACT_BYTES",
    "MeasuredRow",
    "MeasuredValue",
    "artifact_kind",
    "match_rows",
    "order_by_measured",
    "parse_artifact",
    "parse_magicquant",
    "parse_perplexity_log",
]

#: Artifacts larger than this are not read (a manifest of a few dozen candidates is ~30 KB, a
#: llama-perplexity log ~25 KB; the chunk-by-chunk lines are what makes a log grow).
MAX_ARTIFACT_BYTES = 512 << 10
T = TypeVar("T")
#: At most this many artifacts are read per repo revision (one request each).
MAX_ARTIFACTS = 16
MAGICQUANT_DIR = "magicquant-manifest/"
MAGICQUANT_SURVIVORS = "magicquant.final-survivors.json"

_LOADED_FROM = re.compile(r"llama_model_loader: loaded meta data .* from (?P<path>\S+\.gguf)")
_MEAN_KLD = re.compile(r"^Mean\s+KLD:\s+(?P<v>-?[0-9.]+(?:e-?\d+)?)", re.M)
_P999_KLD = re.compile(r"^99\.9%\s+KLD:\s+(?P<v>-?[0-9.]+(?:e-?\d+)?)", re.M)
_MEAN_PPL_Q = re.compile(r"^Mean PPL\(Q\)\s*:\s+(?P<v>[0-9.]+)", re.M)
_KLD_HEADER = "====== KL divergence statistics ======"


@dataclass(frozen=True, slots=True)
class MeasuredRow:
    """One published measurement of one file."""

    file_name: str  # base name of the measured GGUF, as the artifact names it
    size_bytes: int | None  # as the artifact states it; None where it does not
    metric: str  # mean_kld | p99.9_kld | ppl
    value: float
    corpus: str | None  # None: the artifact does not say
    reference: str | None  # the model the KLD is measured against; None: not stated
    artifact: str  # path of the artifact in the repo
    fmt: str  # magicquant | llama-perplexity

    def to_json(self) -> dict[str, object]:
        """JSON-friendly dict."""
        return {
            "metric": self.metric,
            "value": self.value,
            "corpus": self.corpus,
            "reference": self.reference,
            "artifact": self.artifact,
            "format": self.fmt,
        }


@dataclass(frozen=True, slots=True)
class MeasuredValue:
    """A stored measurement of one quant, as search, compare and the web app show it."""

    metric: str
    value: float
    corpus: str | None
    reference: str | None
    fmt: str
    artifact: str
    source_url: str
    revision: str
    file_name: str
    size_bytes: int
    read_at: str  # ISO date-time of the crawl that read it

    @property
    def comparable_key(self) -> tuple[str, str]:
        """Values compare only within one metric and one corpus; where the corpus is not stated,
        only within one artifact (one measurement run)."""
        return self.metric, self.corpus or f"artifact:{self.source_url}"

    def label(self) -> str:
        """Short text: ``KLD 0.0123 (magicquant manifest)``."""
        name = {"mean_kld": "KLD", "p99.9_kld": "99.9% KLD", "ppl": "PPL"}.get(
            self.metric, self.metric
        )
        return f"{name} {self.value:.4g} ({self.fmt})"

    def to_json(self) -> dict[str, object]:
        """JSON-friendly dict (the ``measured[]`` items of search, compare and the API)."""
        return {
            "metric": self.metric,
            "value": self.value,
            "corpus": self.corpus,
            "reference": self.reference,
            "format": self.fmt,
            "artifact": self.artifact,
            "source_url": self.source_url,
            "revision": self.revision,
            "file_name": self.file_name,
            "size_bytes": self.size_bytes,
            "read_at": self.read_at,
            "label": self.label(),
        }


def artifact_kind(path: str, size: int) -> str | None:
    """``magicquant`` / ``llama-perplexity`` for a small artifact this module reads, else None."""
    if size <= 0 or size > MAX_ARTIFACT_BYTES:
        return None
    name = path.rsplit("/", 1)[-1]
    if path.startswith(MAGICQUANT_DIR) and name == MAGICQUANT_SURVIVORS:
        return "magicquant"
    top = path.split("/", 1)[0]
    if top in ("scores", "kld", "perplexity") and name.endswith((".log", ".txt")):
        return "llama-perplexity"
    return None


def _finite(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    v = float(value)
    return v if math.isfinite(v) and v >= 0 else None


def parse_magicquant(text: str, artifact: str) -> list[MeasuredRow]:
    """Rows of a MagicQuant final-survivors manifest; malformed entries are skipped."""
    try:
        doc = json.loads(text)
    except ValueError:
        return []
    if not isinstance(doc, list):
        return []
    rows: list[MeasuredRow] = []
    for item in doc:
        if not isinstance(item, dict):
            continue
        name = item.get("fileName")
        size = item.get("sizeBytes")
        if not isinstance(name, str) or not name.endswith(".gguf"):
            continue
        size_ok = size if isinstance(size, int) and not isinstance(size, bool) else None
        for key, metric in (("kld", "mean_kld"), ("ppl", "ppl")):
            v = _finite(item.get(key))
            if v is not None and (metric != "ppl" or v > 0):
                rows.append(
                    MeasuredRow(name, size_ok, metric, v, None, None, artifact, "magicquant")
                )
    return rows


def parse_perplexity_log(text: str, artifact: str) -> list[MeasuredRow]:
    """Rows of one llama-perplexity log: mean and 99.9 % KLD (when the KLD block is there) and
    the quant's PPL."""
    loaded = _LOADED_FROM.search(text)
    if loaded:
        name = loaded["path"].replace("\\", "/").rsplit("/", 1)[-1]
    else:
        stem = artifact.rsplit("/", 1)[-1].rsplit(".", 1)[0]
        name = f"{stem}.gguf"
    rows: list[MeasuredRow] = []
    block = text.split(_KLD_HEADER, 1)[1] if _KLD_HEADER in text else ""
    found = [("mean_kld", _MEAN_KLD.search(block)), ("p99.9_kld", _P999_KLD.search(block))]
    found.append(("ppl", _MEAN_PPL_Q.search(text)))
    for metric, m in found:
        if m is None:
            continue
        v = _finite(float(m["v"]))
        if v is not None:
            rows.append(
                MeasuredRow(name, None, metric, v, None, None, artifact, "llama-perplexity")
            )
    return rows


def parse_artifact(kind: str, text: str, artifact: str) -> list[MeasuredRow]:
    """Rows of one artifact of ``kind`` (artifact_kind)."""
    if kind == "magicquant":
        return parse_magicquant(text, artifact)
    if kind == "llama-perplexity":
        return parse_perplexity_log(text, artifact)
    return []


def match_rows(
    rows: Iterable[MeasuredRow], files: Mapping[str, tuple[str, int]]
) -> list[tuple[str, int, MeasuredRow]]:
    """(quant path, quant size, row) for each row keyed to a quant of the repo.

    ``files`` maps a GGUF's base name to (its quant's path, the GGUF's listed size). A row whose
    stated size differs from the listing is a different file and is dropped.
    """
    out: list[tuple[str, int, MeasuredRow]] = []
    seen: set[tuple[str, str, str]] = set()
    for r in rows:
        hit = files.get(r.file_name)
        if hit is None:
            continue
        quant_path, size = hit
        if r.size_bytes is not None and r.size_bytes != size:
            continue
        key = (quant_path, r.metric, r.artifact)
        if key in seen:
            continue
        seen.add(key)
        out.append((quant_path, size, r))
    return out


def order_by_measured(
    results: Sequence[T],
    measured_of: Callable[[T], tuple[MeasuredValue, ...]],
    base_of: Callable[[T], str | None],
) -> list[T]:
    """``results`` (in the estimate's quality order) with measured KLD deciding among peers.

    Results of one base model that carry a mean KLD on the same corpus (or from the same artifact
    when the corpus is not stated) swap places among the slots they already hold, lowest KLD
    first. A result with no such peer keeps its place, and no measured value is ever compared
    with a predicted one or with another metric or corpus.
    """
    groups: dict[tuple[str, str, str], list[int]] = {}
    value_at: dict[int, float] = {}
    for i, r in enumerate(results):
        kld = sorted(
            (m for m in measured_of(r) if m.metric == "mean_kld"), key=lambda m: m.source_url
        )
        base = base_of(r)
        if not kld or base is None:
            continue
        metric, corpus = kld[0].comparable_key
        groups.setdefault((base.lower(), metric, corpus), []).append(i)
        value_at[i] = kld[0].value
    out = list(results)
    for slots in groups.values():
        if len(slots) < 2:
            continue
        ranked = sorted(slots, key=lambda i: (value_at[i], i))
        for slot, src in zip(slots, ranked, strict=True):
            out[slot] = results[src]
    return out
