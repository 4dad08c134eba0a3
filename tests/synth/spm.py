"""A SentencePiece-vocabulary file (Llama-2 style) for fetch-policy tests and benchmarks.

The synthetic builder's vocabularies are byte-level BPE (tests/synth/vocab.py); Llama-2-era GGUFs
carry ``tokenizer.ggml.model = "llama"`` with tokens, float32 scores and token types and no merges
(llama.cpp ``llama_vocab::impl::load``, LLAMA_VOCAB_TYPE_SPM), which the header size estimator
must predict differently.
"""

from __future__ import annotations

import random
from dataclasses import replace

import tests.synth as synth
from tests.synth.write import build_layout, model_metadata, plan_tensors


def llama2_like(recipe: synth.Recipe | None = None) -> synth.Layout:
    """A Llama-2-7B-chat-shaped file: 32k SentencePiece vocabulary (tokens, scores, token types,
    no merges; ``tokenizer.ggml.model = "llama"``), 32 layers: a ~0.76 MB header."""
    recipe = recipe or synth.q4_k_m_like()
    spec = replace(synth.preset("llama", "real"), n_vocab=32000, n_layer=32, name="Llama-2-7b")
    rng = random.Random(0)
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{i:02X}>" for i in range(256)]
    seen = set(tokens)
    while len(tokens) < 32000:  # pieces grow with rank, as SentencePiece's do
        n = min(1 + int(len(tokens) / 32000 * 6 + rng.random() * 4), 14)
        piece = ("\u2581" if rng.random() < 0.5 else "") + "".join(
            rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(n)
        )
        if piece not in seen:
            seen.add(piece)
            tokens.append(piece)
    meta = {k: v for k, v in model_metadata(spec, recipe).items() if not k.startswith("tokenizer.")}
    meta.update(
        {
            "tokenizer.ggml.model": "llama",
            "tokenizer.ggml.tokens": tokens,
            "tokenizer.ggml.scores": [float(-i) for i in range(32000)],
            "tokenizer.ggml.token_type": [2, 3, 3] + [6] * 256 + [1] * (32000 - 259),
            "tokenizer.ggml.bos_token_id": 1,
            "tokenizer.ggml.eos_token_id": 2,
        }
    )
    return build_layout("llama", meta, plan_tensors(spec, recipe), 32, False, 3)
