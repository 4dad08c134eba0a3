"""Uploader and lineage metadata for synthetic GGUFs (pass the dict as ``metadata=``).

Keys from gguf-py ``Keys.General`` / ``Keys.Quantize`` (gguf 0.19 constants.py), as converters and
llama-quantize write them: ``general.base_model.*``, ``general.quantized_by``, ``general.repo_url``,
``general.size_label``, ``quantize.imatrix.*``. Unsloth files carry ``general.quantized_by =
Unsloth`` and ``quantize.imatrix.file = .../imatrix_unsloth.gguf`` (their files' metadata).
"""

from __future__ import annotations

from typing import Any

from gguf.constants import GGUFValueType


def lineage(
    base_model: str | None = None,
    *,
    quantized_by: str | None = None,
    repo_url: str | None = None,
    size_label: str | None = None,
    imatrix_file: str | None = None,
    imatrix_dataset: str | None = None,
    imatrix_entries: int = 496,
    imatrix_chunks: int = 80,
) -> dict[str, Any]:
    """KV pairs naming the model a quant was made from, who made it and with which imatrix.

    ``base_model`` is a Hub id ``org/name``; it becomes ``general.base_model.count = 1`` and
    ``general.base_model.0.{name,organization,repo_url}``.
    """
    meta: dict[str, Any] = {}
    if base_model is not None:
        org, _, name = base_model.rpartition("/")
        meta["general.base_model.count"] = 1
        meta["general.base_model.0.name"] = name
        if org:
            meta["general.base_model.0.organization"] = org
        meta["general.base_model.0.repo_url"] = f"https://huggingface.co/{base_model}"
    if quantized_by is not None:
        meta["general.quantized_by"] = quantized_by
    if repo_url is not None:
        meta["general.repo_url"] = repo_url
    if size_label is not None:
        meta["general.size_label"] = size_label
    if imatrix_file is not None:
        meta["quantize.imatrix.file"] = imatrix_file
        meta["quantize.imatrix.dataset"] = imatrix_dataset or "calibration.txt"
        meta["quantize.imatrix.entries_count"] = (GGUFValueType.INT32, imatrix_entries)
        meta["quantize.imatrix.chunks_count"] = (GGUFValueType.INT32, imatrix_chunks)
    return meta


def unsloth(base_model: str, size_label: str | None = None) -> dict[str, Any]:
    """The lineage keys of an Unsloth upload of ``base_model``."""
    short = base_model.rpartition("/")[2]
    return lineage(
        base_model,
        quantized_by="Unsloth",
        repo_url="https://huggingface.co/unsloth",
        size_label=size_label,
        imatrix_file=f"{short}-GGUF/imatrix_unsloth.gguf",
        imatrix_dataset=f"unsloth_calibration_{short}.txt",
    )
