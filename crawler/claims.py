"""What a quant's name claims that its tensor table contradicts (pure: no I/O).

"Named UD/Dynamic but attention is 4-bit", "named MTP but carries no nextn tensors", "labelled
Q8_0 but 100% of weight bytes are Q4_K": :func:`with_claims` checks the claims read from the file
name (:mod:`crawler.labels`) against a built :class:`~crawler.precision.PrecisionProfile`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from crawler.ggml import GGML_TYPES
from crawler.gguf import GGUFHeader
from crawler.labels import NameClaims
from crawler.precision import PrecisionProfile, TensorRow

__all__ = ["with_claims"]


def _dominant_type(rows: Sequence[TensorRow]) -> tuple[str, float] | None:
    """Type holding the most weight-matrix bytes, and its share of those bytes."""
    by_type: Counter[str] = Counter()
    for r in rows:
        if r.is_matrix and r.n_bytes:
            by_type[r.type_name] += r.n_bytes
    total = sum(by_type.values())
    if not total:
        return None
    name, n = by_type.most_common(1)[0]
    return name, n / total


def with_claims(
    profile: PrecisionProfile, claims: NameClaims, header: GGUFHeader
) -> PrecisionProfile:
    """``profile`` with the contradictions between ``claims`` and its tensors, in plain words."""
    from dataclasses import replace

    found: list[str] = []
    mtp = profile.mtp
    if claims.mtp and mtp.state == "absent":
        found.append("named MTP but carries no nextn tensors")
    elif claims.mtp and mtp.state == "declared_missing":
        found.append(
            f"named MTP and declares {len(mtp.layers)} MTP layer(s), but carries no nextn tensors"
        )
    elif claims.mtp and mtp.state == "sidecar":
        found.append("named MTP but the MTP head is in a separate sidecar file, not this one")
    if claims.q8nextn and mtp.present and (mtp.min_bits is None or mtp.min_bits < 8):
        found.append(f"named Q8nextn but the MTP block's lowest type is {_bits(mtp.min_bits)}")
    if claims.dynamic and profile.attention_preserved is False:
        found.append(
            f"named UD/Dynamic but attention is {_bits(profile.attention_min_bits)}"
            f" (below {profile.preserved_bits}-bit)"
        )
    if claims.dynamic and mtp.present and not mtp.preserved:
        found.append(f"named UD/Dynamic but the MTP block is {_bits(mtp.min_bits)}")
    label = claims.label
    if label is not None:
        expected = next((t for t in GGML_TYPES.values() if t.name == label.base_type), None)
        dominant = _dominant_type(profile.tensors)
        if expected is not None and dominant is not None:
            dom_name, share = dominant
            dom = next((t for t in GGML_TYPES.values() if t.name == dom_name), None)
            # Only "fewer bits than promised" contradicts a label: UD/_L/_XL recipes put more
            # bytes in 6-8 bit types on purpose, and small models are embedding-heavy.
            if dom is not None and dom.bits < expected.bits:
                found.append(
                    f"labelled {label.text} but {share:.0%} of weight bytes are {dom_name}"
                )
    if claims.imatrix and not any(k.startswith("quantize.imatrix") for k in header.metadata):
        found.append("named i1/imatrix but the file records no quantize.imatrix.* keys")
    if not profile.loadable_by_mainline:
        ids = ", ".join(str(i) for i in profile.unknown_types) or "ik_llama.cpp-only"
        found.append(f"uses ggml types mainline llama.cpp cannot load ({ids})")
    return replace(profile, claims=tuple(found))


def _bits(bits: int | None) -> str:
    return f"{bits}-bit" if bits is not None else "of unknown precision"
