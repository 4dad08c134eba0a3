"""Synthetic byte-level BPE vocabularies (GPT-2 style) that llama.cpp's tokenizer loader accepts.

Owns the ``tokenizer.ggml.*`` metadata of synthetic models. Deterministic: the same size gives the
same tokens, so header bytes are reproducible across runs.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import cache
from typing import Any

#: llama.cpp token types (``llama_token_type`` in include/llama.h): 1 normal, 3 control.
TOKEN_NORMAL = 1
TOKEN_CONTROL = 3

# Longest synthetic merged token, in UTF-8 bytes. Measured: mean token ~9 bytes, mean merge line
# ~10 bytes, so a 248320-token vocabulary makes a ~10 MB header, as on real Qwen3.5/3.6 GGUFs
# (the Hub's Qwen3.6-27B files have ~10 MB headers).
_MAX_TOKEN_BYTES = 12


@dataclass(frozen=True, slots=True)
class Vocab:
    """A tokenizer: ``tokens`` (id order), ``token_types``, ``merges`` and special ids."""

    model: str
    pre: str
    tokens: tuple[str, ...]
    token_types: tuple[int, ...]
    merges: tuple[str, ...]
    bos_id: int
    eos_id: int
    pad_id: int

    def metadata(self) -> dict[str, Any]:
        """The ``tokenizer.ggml.*`` keys, as llama.cpp's ``llama_vocab::impl::load`` reads them."""
        return {
            "tokenizer.ggml.model": self.model,
            "tokenizer.ggml.pre": self.pre,
            "tokenizer.ggml.tokens": list(self.tokens),
            "tokenizer.ggml.token_type": list(self.token_types),
            "tokenizer.ggml.merges": list(self.merges),
            "tokenizer.ggml.bos_token_id": self.bos_id,
            "tokenizer.ggml.eos_token_id": self.eos_id,
            "tokenizer.ggml.padding_token_id": self.pad_id,
            "tokenizer.ggml.add_bos_token": False,
        }


def _byte_alphabet() -> list[str]:
    """GPT-2's reversible byte -> printable character map (the 256 byte-level BPE base tokens)."""
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    chars = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in chars:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


@cache
def make_vocab(n_vocab: int, pre: str = "default", seed: int = 0) -> Vocab:
    """Build an ``n_vocab``-token byte-level BPE vocabulary.

    Layout, as in real GPT-2-style GGUFs: 256 byte tokens (which include ``Ċ`` = ``\\n``, so
    llama.cpp finds a newline token), then merged tokens each with its merge rule, then three
    control tokens at the end (``<|endoftext|>`` = bos/eos/pad, ``<|im_start|>``, ``<|im_end|>``).
    """
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    if n_vocab < 256 + len(specials) + 1:
        raise ValueError(f"n_vocab {n_vocab} too small for a byte-level vocabulary")
    rng = random.Random(seed)
    tokens = _byte_alphabet()
    # Right-hand pieces: ASCII letters, "Ġ" (the byte-level space) and short merged tokens, so
    # merged tokens look like word pieces of realistic length (see _MAX_TOKEN_BYTES).
    pool = [c for c in tokens if c.isascii() and c.isalpha()] + ["Ġ"] * 8
    seen = set(tokens)
    merges: list[str] = []
    n_merged = n_vocab - 256 - len(specials)
    while len(merges) < n_merged:
        left = tokens[rng.randrange(len(tokens))] if rng.random() < 0.7 else rng.choice(pool)
        right = rng.choice(pool)
        new = left + right
        if new in seen or len(new.encode()) > _MAX_TOKEN_BYTES:
            continue
        seen.add(new)
        tokens.append(new)
        merges.append(f"{left} {right}")
        if len(new) <= 3 and len(pool) < 2048:
            pool.append(new)
    eot = len(tokens)
    tokens.extend(specials)
    types = [TOKEN_NORMAL] * (n_vocab - len(specials)) + [TOKEN_CONTROL] * len(specials)
    return Vocab(
        model="gpt2",
        pre=pre,
        tokens=tuple(tokens),
        token_types=tuple(types),
        merges=tuple(merges),
        bos_id=eot,
        eos_id=eot,
        pad_id=eot,
    )


#: Mean token length in UTF-8 bytes over each 1/32 of the published Qwen2 vocabulary, in rank
#: order (vocab.json of Qwen/Qwen2-7B-Instruct, 151,643 tokens: the GPT-4-style first 100k, then
#: CJK tokens at 3 bytes a character, then the tail). Real vocabularies grow with rank and are
#: not smooth: the first 512 KiB of a header see the short tokens only.
QWEN2_TOKEN_BYTES = (
    4.9, 6.1, 6.4, 6.8, 6.8, 7.0, 7.1, 7.1, 7.3, 7.5, 7.4, 7.4, 7.6, 7.7, 7.6, 7.6,
    7.8, 7.7, 7.9, 7.8, 7.8, 9.3, 13.5, 14.3, 14.5, 7.0, 11.5, 14.5, 17.2, 18.5, 11.3, 6.2,
)  # fmt: skip


def real_profile_tokenizer(n_vocab: int, pre: str = "qwen2", seed: int = 0) -> dict[str, Any]:
    """``tokenizer.ggml.*`` metadata whose token lengths follow QWEN2_TOKEN_BYTES scaled
    to ``n_vocab`` (merge *i* spells token *256 + i* with one space, as in real BPE files).

    Only the sizes are realistic (what a header reader's estimate sees); the tokens are unique
    ASCII strings, not a usable vocabulary.
    """
    rng = random.Random(seed)
    blocks = len(QWEN2_TOKEN_BYTES)
    tokens: list[str] = []
    for i in range(n_vocab):
        mean = QWEN2_TOKEN_BYTES[i * blocks // n_vocab]
        stem = f"{i:x}"
        length = max(len(stem), round(rng.uniform(0.5, 1.5) * mean))
        tokens.append(stem + "a" * (length - len(stem)))
    merges = [f"{t[:1]} {t[1:]}" for t in tokens[256:] if len(t) > 1]
    return {
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": pre,
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": [TOKEN_NORMAL] * n_vocab,
        "tokenizer.ggml.merges": merges,
    }
