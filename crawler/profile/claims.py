"""What a quant's name claims that its tensor table contradicts (pure: no I/O).

Checks the claims read from the file name against a built PrecisionProfile.
Details: docs/internals/profile.md#claims
"""

from __future__ import annotations

from crawler.gguf.ggml import GGML_TYPES
from crawler.gguf.parse import GGUFHeader
from crawler.profile.labels import NameClaims
from crawler.profile.precision import PrecisionProfile
from crawler.profile.recipes import RecipeTensor, model_facts
from crawler.profile.type_claims import type_claims

__all__ = ["with_claims"]


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
            f" (below {profile.preserved_bits}-bit, the precision a dynamic mix keeps attention at)"
        )
    if claims.dynamic and mtp.present and not mtp.preserved:
        found.append(f"named UD/Dynamic but the MTP block is {_bits(mtp.min_bits)}")
    tensors = [RecipeTensor(r.name, r.shape, r.type_name, r.n_bytes) for r in profile.tensors]
    found += type_claims(
        claims.label,
        profile.file_type,
        tensors,
        model_facts(header.metadata, (t.name for t in tensors)),
    )
    if header.data_truncated:
        have = "?" if header.file_size is None else f"{header.file_size:,}"
        found.append(
            f"the file is truncated: it has {have} bytes, its tensors' data needs"
            f" {header.data_end:,}; the header is complete (a partial download or the first"
            " piece of a split file)"
        )
    if claims.imatrix and not any(k.startswith("quantize.imatrix") for k in header.metadata):
        found.append("named i1/imatrix but the file records no quantize.imatrix.* keys")
    if profile.unknown_types or any(not GGML_TYPES[r.type_id].mainline for r in profile.tensors):
        ids = ", ".join(str(i) for i in profile.unknown_types) or "ik_llama.cpp-only"
        found.append(f"uses ggml types mainline llama.cpp cannot load ({ids})")
    return replace(profile, claims=tuple(found))


def _bits(bits: int | None) -> str:
    return f"{bits}-bit" if bits is not None else "of unknown precision"
