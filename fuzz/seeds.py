"""Seed corpus and dictionary for the header fuzzer: real-shaped headers from tests/synth.

Seeds are the header bytes of every synthetic preset (llama, qwen3, qwen3moe, qwen35 hybrid with
an MTP block, qwen35moe, glm4moe, deepseek2 MLA, gemma3 SWA) under several recipes (K-quants,
UD mixes, fork type 252, ik_llama.cpp types), plus gguf-split shards, an mmproj projector, GGUF v2,
alignment 64, big-endian, lineage keys, every metadata value type, and the inputs that once
failed (fuzz/regressions/).
"""

from __future__ import annotations

from pathlib import Path

REGRESSIONS = Path(__file__).resolve().parent / "regressions"


def regression_inputs() -> list[tuple[str, bytes]]:
    """``(file name, bytes)`` of every saved input that once broke a property."""
    return [(p.name, p.read_bytes()) for p in sorted(REGRESSIONS.glob("*.bin"))]


def build_seeds() -> list[bytes]:
    """The seed inputs (each a whole header, data section excluded), deduplicated."""
    import tests.synth as synth

    recipes = [
        synth.q4_k_m_like(),
        synth.q8_0(),
        synth.ud_q3_k_xl_like(),
        synth.ud_bad_mxfp4_attn(),
        synth.fork_type_252(),
        synth.ik_llama_mix(),
        synth.mtp_downgraded(),
        synth.drop_mtp_tensors(synth.q4_k_m_like()),
    ]
    seeds: list[bytes] = []
    for name in synth.PRESETS:
        spec = synth.preset(name, "tiny")
        seeds.extend(synth.header_bytes(spec, recipe) for recipe in recipes[:2])
    qwen35 = synth.preset("qwen35", "tiny")
    seeds.extend(synth.header_bytes(qwen35, recipe) for recipe in recipes[2:])
    llama = synth.preset("llama", "tiny")
    q4 = recipes[0]
    seeds.append(synth.header_bytes(llama, q4, version=2))
    seeds.append(synth.header_bytes(llama, q4, alignment=64))
    seeds.append(synth.header_bytes(llama, q4, big_endian=True))
    seeds.append(
        synth.header_bytes(llama, q4, metadata={**synth.unsloth("Qwen/Qwen3-8B"), **_every_type()})
    )
    glm = synth.preset("glm4moe", "tiny")
    seeds.extend(s.header for s in synth.split_layouts(glm, q4, 3, metadata_only_first_shard=True))
    seeds.append(synth.mmproj_layout().header)
    seeds.extend(data for _, data in regression_inputs())
    return list(dict.fromkeys(seeds))


def _every_type() -> dict[str, object]:
    # GGUFWriter infers the value type: str, bool, int (int32/uint32/int64), float, lists, and a
    # nested list (array of arrays).
    return {
        "fuzz.string": "x" * 40,
        "fuzz.bool": True,
        "fuzz.int": -7,
        "fuzz.uint": 7,
        "fuzz.big": 1 << 40,
        "fuzz.float": 0.5,
        "fuzz.strings": ["a", "bb", "ccc"],
        "fuzz.ints": [1, 2, 3],
        "fuzz.nested": [[1, 2], [3]],
    }


def dictionary(seeds: list[bytes]) -> list[bytes]:
    """libFuzzer dictionary tokens: the magic, every metadata key of the seeds, interesting
    little-endian integers (type ids, counts at the edges of int32/int64)."""
    from crawler.gguf.parse import parse_header_bytes

    tokens: set[bytes] = {b"GGUF"}
    for seed in seeds:
        try:
            header = parse_header_bytes(seed)
        except Exception:
            continue
        for key in header.metadata:
            raw = key.encode()
            tokens.add(len(raw).to_bytes(8, "little") + raw)
        for t in header.tensors[:64]:
            tokens.add(t.name.encode())
    for value in (0, 1, 2, 3, 4, 8, 9, 12, 13, 31, 32, 63, 64, 255, 256, 0x7FFFFFFF, 0xFFFFFFFF):
        tokens.add(value.to_bytes(4, "little"))
    for value in (0, 1, 1 << 31, 1 << 32, (1 << 63) - 1, 1 << 63, (1 << 64) - 1):
        tokens.add(value.to_bytes(8, "little"))
    return sorted(tokens)
