"""Quant labels and name claims from repo and file names (pure: no I/O).

A label is only what the publisher says; the tensor table decides.
Details: docs/internals/profile.md#labels
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Which files make one quant is crawler.profile.quant_files' to say; these names stay importable
# here.
from crawler.profile.quant_files import byte_parts, strip_shard_suffix
from crawler.profile.quant_files import is_mtp_sidecar as is_mtp_sidecar_name
from crawler.profile.quant_files import shard_info as split_info

__all__ = [
    "NameClaims",
    "QuantLabel",
    "byte_parts",
    "is_mtp_sidecar_name",
    "name_claims",
    "parse_quant_label",
    "split_info",
]

_LABEL = re.compile(
    r"""
    (?<![A-Za-z0-9])
    (?P<i1>i1[-_.])?
    (?P<ud>UD[-_])?
    (?P<q>
        IQ[1-6]_(?:XXS|XS|S|M|NL|KSS|KS|KL|KT|K|BN)(?:_R\d+)?
      | Q[1-8]_K(?:_(?:XXL|XL|S|M|L))?(?:_R\d+)?
      | Q[1-8]_[01](?:_[48]_[48])?(?:_(?:XL|L))?(?:_R\d+)?
      | TQ[12]_0
      | MXFP4(?:_MOE)?
      | NVFP4
      | BF16 | F16 | F32 | FP16 | FP32
    )
    (?![A-Za-z0-9])
    """,
    re.IGNORECASE | re.VERBOSE,
)
# Word boundaries on letters only, so "Q8nextn" and "27B-MTP" both count.
_MTP = re.compile(r"(?<![A-Za-z])(?:mtp|nextn)(?![A-Za-z])", re.IGNORECASE)
_Q8NEXTN = re.compile(r"(?<![A-Za-z0-9])Q8[-_]?nextn(?![A-Za-z])", re.IGNORECASE)
_UD = re.compile(r"(?<![A-Za-z0-9])UD(?![A-Za-z0-9])")
_DYNAMIC = re.compile(r"(?<![A-Za-z])dynamic(?![A-Za-z])", re.IGNORECASE)
_IMATRIX = re.compile(r"(?<![A-Za-z0-9])(?:i1|imatrix|imat)(?![A-Za-z0-9])", re.IGNORECASE)

# Base ggml type a label's bulk should be (its nominal bits are what the claim check compares).
_FLOAT_ALIASES = {"FP16": "F16", "FP32": "F32"}


@dataclass(frozen=True, slots=True)
class QuantLabel:
    """A parsed quant label: ``text`` as normalized (``UD-Q4_K_XL``), its parts, its base type."""

    text: str
    #: The quant scheme without prefixes: ``Q4_K_XL``, ``IQ4_XS``, ``MXFP4_MOE``.
    scheme: str
    #: The ggml type the bulk of the weights should have: ``Q4_K``, ``IQ4_XS``, ``MXFP4``.
    base_type: str
    ud: bool = False
    imatrix: bool = False


@dataclass(frozen=True, slots=True)
class NameClaims:
    """What the repo and file names promise; the profile checks each against the tensors."""

    label: QuantLabel | None
    mtp: bool = False
    q8nextn: bool = False
    dynamic: bool = False
    imatrix: bool = False


def _base_type(scheme: str) -> str:
    s = scheme.upper()
    s = _FLOAT_ALIASES.get(s, s)
    s = re.sub(r"_R\d+$", "", s)
    if s.startswith("MXFP4"):
        return "MXFP4"
    m = re.fullmatch(r"(Q[1-8]_K)(?:_(?:XXL|XL|S|M|L))?", s)
    if m:
        return m.group(1)
    m = re.fullmatch(r"(Q[1-8]_[01])(?:_[48]_[48])?(?:_(?:XL|L))?", s)
    if m:
        return m.group(1)
    return s


def parse_quant_label(path: str) -> QuantLabel | None:
    """The quant label of a file path (last label in the file name, else in its folders)."""
    parts = path.replace("\\", "/").split("/")
    for part in reversed(parts):
        matches = list(_LABEL.finditer(strip_shard_suffix(part)))
        if not matches:
            continue
        m = matches[-1]
        scheme = m.group("q").upper()
        scheme = _FLOAT_ALIASES.get(scheme, scheme)
        ud = m.group("ud") is not None
        i1 = m.group("i1") is not None
        text = ("i1-" if i1 else "") + ("UD-" if ud else "") + scheme
        return QuantLabel(text, scheme, _base_type(scheme), ud=ud, imatrix=i1)
    return None


def name_claims(file_name: str, repo_id: str | None = None) -> NameClaims:
    """Claims made by the file name and the repo name (``owner/name``)."""
    repo_name = (repo_id or "").split("/")[-1]
    text = f"{repo_name} {file_name}"
    label = parse_quant_label(file_name)
    return NameClaims(
        label=label,
        mtp=bool(_MTP.search(text)),
        q8nextn=bool(_Q8NEXTN.search(text)),
        dynamic=bool(_UD.search(text) or _DYNAMIC.search(text) or (label and label.ud)),
        imatrix=bool(_IMATRIX.search(text) or (label and label.imatrix)),
    )
