"""Derive the quality model's per-group sensitivities from Thireus's GGUF-Tool-Suite.

Source: github.com/Thireus/GGUF-Tool-Suite (Thireus, GGUF Tool Suite and its contributors; its
licence asks for that visible credit). For each benchmarked model, ``models/<M>/kld_results.csv``
holds one row: the mean KLD against the baseline when ONE tensor is quantized to a low target
type (iq1_kt, iq1_m_r4, iq2_xxs, ...) and every other tensor stays at the baseline (BF16, or the
highest pure type the benchmark machine could run: "docs/Benchmarking models - How.md" there); the
tensor
shapes come from ``models/<M>/group0/tensors.bf16.map``. In the small-noise regime KLD is
proportional to the added noise power, and the noise of one target type is the same per weight
for every tensor, so KLD_i / a_i (a_i = the parameters a token multiplies) is tensor i's
sensitivity per weight up to one constant per model. Summing KLD and a over a group and dividing
by the bulk FFN group's ratio gives the sensitivities relative to a dense FFN matrix (MoE models
without dense FFN layers: relative to the routed experts), as crawler.ranking.quality uses them.

The same repository's ``models/<M>/group0/bpw_kld_results*.csv`` hold whole-model sweeps: every
tensor at one type, the file's bpw and its mean KLD. Those rows are NOT used by the fit above;
``heldout`` writes the ones measured against BF16 (the row whose KLD is 0 is the baseline) for
the types mainline llama.cpp loads, the held-out table of crawler/ranking/quality_check.py.

Usage (GIT_DIR a clone or bare mirror of the repository; HEAD is read with ``git show``)::

    python -m tools.derive_sensitivity sensitivity GIT_DIR > crawler/data/sensitivity.csv
    python -m tools.derive_sensitivity heldout GIT_DIR > crawler/data/kld_heldout.csv

Nothing here is imported by the library.
"""

from __future__ import annotations

import csv
import io
import math
import re
import statistics
import subprocess
import sys
from collections import defaultdict

from crawler.profile.precision import tensor_group, tensor_layer, tensor_role

#: (family, n_expert_used) per benchmarked model: family = the GGUF architecture the model
#: converts to; n_expert_used from the model's config.json on the Hub (num_experts_per_tok).
#: The number of experts comes from the tensor shapes. Models left out: their per-tensor table
#: is partial (GLM-5.x, DeepSeek-V3.1-Terminus's unmerged runs) or the repository has no tensor
#: map for them (Kimi-K2.5, the Qwen3-235B and Qwen3-Coder models).
MODELS: dict[str, tuple[str, int]] = {
    "Qwen3.5-0.8B": ("qwen35", 0),
    "Qwen3.5-2B": ("qwen35", 0),
    "Qwen3.5-4B": ("qwen35", 0),
    "Qwen3.5-9B": ("qwen35", 0),
    "Qwen3.5-27B": ("qwen35", 0),
    "Qwen3.6-27B": ("qwen35", 0),
    "Qwen3.5-35B-A3B": ("qwen35moe", 8),
    "Qwen3.6-35B-A3B": ("qwen35moe", 8),
    "Qwen3.5-122B-A10B": ("qwen35moe", 8),
    "Qwen3.5-397B-A17B": ("qwen35moe", 10),
    "Qwen3-4B-Instruct-2507": ("qwen3", 0),
    "Qwen3-4B-Thinking-2507": ("qwen3", 0),
    "Qwen3-VL-235B-A22B-Instruct": ("qwen3vlmoe", 8),
    "Qwen3-VL-235B-A22B-Thinking": ("qwen3vlmoe", 8),
    "GLM-4.5": ("glm4moe", 8),
    "GLM-4.5-Air": ("glm4moe", 8),
    "GLM-4.6": ("glm4moe", 8),
    "GLM-4.7": ("glm4moe", 8),
    "GLM-4.7-Flash": ("deepseek2", 4),
    "DeepSeek-V3.1-Terminus": ("deepseek2", 8),
    "Kimi-K2-Thinking": ("deepseek2", 8),
    "gemma-4-31B-it": ("gemma4", 0),
}
GROUPS = ("token_embd", "output", "attn", "linear_attn", "ffn", "ffn_exps", "ffn_shexp")
RECURRENT = ("ssm_",)
MAP_LINE = re.compile(r":(?P<name>[^:]+):shape=\((?P<shape>[^)]*)\):")


def _git(repo: str, path: str) -> str:
    out = subprocess.run(
        ["git", "-C", repo, "show", f"HEAD:{path}"], capture_output=True, text=True, check=False
    )
    return out.stdout


def _shapes(repo: str, model: str) -> dict[str, tuple[int, ...]]:
    shapes: dict[str, tuple[int, ...]] = {}
    for line in _git(repo, f"models/{model}/group0/tensors.bf16.map").splitlines():
        m = MAP_LINE.search(line)
        if m:
            shapes[m["name"]] = tuple(int(x) for x in m["shape"].split(",") if x.strip())
    return shapes


def model_ratios(repo: str, model: str, n_used: int) -> dict[str, float]:
    """KLD per active weight of each group, relative to the bulk FFN group; {} if unusable."""
    rows = list(csv.reader(io.StringIO(_git(repo, f"models/{model}/kld_results.csv"))))
    shapes = _shapes(repo, model)
    if len(rows) < 2 or not shapes:
        return {}
    header, values = rows[0], rows[1]
    recurrent = {tensor_layer(n) for n in shapes if tensor_role(n).startswith(RECURRENT)} - {None}
    kld: dict[str, float] = defaultdict(float)
    active: dict[str, float] = defaultdict(float)
    for name, raw in zip(header[1:], values[1:], strict=False):
        shape = shapes.get(name)
        try:
            k = float(raw)
        except ValueError:
            continue
        if shape is None or not 0 <= k < 100 or len(shape) < 2:
            continue
        role, layer = tensor_role(name), tensor_layer(name)
        kind = "global" if layer is None else "recurrent" if layer in recurrent else "attention"
        if role.startswith("nextn."):
            continue
        group = tensor_group(role, len(shape), layer_kind=kind)
        if group not in GROUPS:
            continue
        n = math.prod(shape)
        if group == "ffn_exps" and n_used:
            n = n * n_used / shape[-1]  # a token multiplies n_used of the n_expert matrices
        if group == "token_embd":
            n = shape[0] * shape[0]  # one row per token: one n_embd x n_embd product
        kld[group] += k
        active[group] += n
    base = "ffn" if active.get("ffn") else "ffn_exps"
    if not active.get(base) or kld[base] <= 0:
        return {}
    ref = kld[base] / active[base]
    return {g: (kld[g] / active[g]) / ref for g in GROUPS if active.get(g) and kld[g] > 0}


def main(repo: str) -> None:
    """Print the table: one row per (family, group), and the pooled ``all`` rows."""
    per_family: dict[tuple[str, str], list[float]] = defaultdict(list)
    models_of: dict[tuple[str, str], list[str]] = defaultdict(list)
    for model, (family, n_used) in MODELS.items():
        ratios = model_ratios(repo, model, n_used)
        for group, r in ratios.items():
            for fam in (family, "all"):
                per_family[fam, group].append(r)
                models_of[fam, group].append(model)
    rev = subprocess.run(
        ["git", "-C", repo, "rev-parse", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    w = csv.writer(sys.stdout, lineterminator="\n")
    print("# Per-group quantization sensitivity relative to the bulk FFN matrix, per weight a")
    print("# token multiplies: the median over models of (group KLD / active weights) / (FFN's).")
    print("# Derived by tools/derive_sensitivity.py from per-tensor KLD tables. Credit (licence")
    print("# asks for it): Thireus, GGUF Tool Suite and its contributors,")
    print(f"# github.com/Thireus/GGUF-Tool-Suite commit {rev}, models/*/kld_results.csv.")
    w.writerow(["family", "group", "sensitivity", "n_models", "min", "max", "models"])
    for (family, group), vals in sorted(per_family.items()):
        w.writerow(
            [
                family,
                group,
                f"{statistics.median(vals):.3f}",
                len(vals),
                f"{min(vals):.3f}",
                f"{max(vals):.3f}",
                " ".join(models_of[family, group]),
            ]
        )


#: Types mainline llama.cpp loads (the other sweep rows are ik_llama.cpp-only types).
MAINLINE = [
    "q8_0",
    "q6_K",
    "q5_K",
    "q5_1",
    "q5_0",
    "q4_K",
    "q4_1",
    "q4_0",
    "iq4_nl",
    "iq4_xs",
    "q3_K",
    "iq3_s",
    "iq3_xxs",
    "q2_K",
    "iq2_s",
    "iq2_xs",
    "iq2_xxs",
    "iq1_m",
    "iq1_s",
]
#: Sweep files measured against BF16 (their bf16 row is 0); the others use a q8_0 or iq6_k
#: baseline.
HELDOUT = {
    "DeepSeek-V3.1-Terminus": "bpw_kld_results_partial.csv",
    "GLM-4.5-Air": "bpw_kld_results_partial.csv",
    "GLM-4.7-Flash": "bpw_kld_results.csv",
    "Qwen3-4B-Thinking-2507": "bpw_kld_results.csv",
    "Qwen3-VL-235B-A22B-Thinking": "bpw_kld_results.csv",
    "Qwen3.5-0.8B": "bpw_kld_results.csv",
    "Qwen3.5-122B-A10B": "bpw_kld_results_partial.csv",
    "Qwen3.5-27B": "bpw_kld_results_partial.csv",
    "Qwen3.5-35B-A3B": "bpw_kld_results_partial.csv",
}
CORPUS = "imatrix-calibration-corpus-v02.txt, n_ctx 512 (benchmark_each_tensor.sh)"


#: A second, independent source: the per-file KLD table of the MagicQuant release of
#: Qwen3.6-35B-A3B (github.com/magiccodingman/MagicQuant wiki/showcase.md, "Discovery: a 35B MoE
#: release"; the release's magicquant.final-survivors.json at revision 6e1771746ee4). (file,
#: decimal GB, mean KLD). Mixed-type files: their bpw is taken from the size relative to the
#: table's Q8_0 file (8.5 bpw), which approximates the effective bits from above.
MAGICQUANT_35B = (
    ("LM-Q8_0", 36.90, 0.004654),
    ("MQ-Q6_K_1", 31.59, 0.005149),
    ("MQ-Q5_K_1", 29.19, 0.005523),
    ("MQ-Q5_K_S_1", 26.33, 0.006730),
    ("MQ-Q4_K_M_1", 24.82, 0.007799),
    ("MQ-Q4_K_M_2", 22.32, 0.011007),
    ("MQ-IQ4_NL_1", 20.89, 0.013277),
    ("MQ-IQ3_M_1", 17.60, 0.026330),
    ("UD-IQ3_S", 13.68, 0.068376),
    ("MQ-IQ2_XXS_1", 9.59, 0.275130),
)
MAGICQUANT_SOURCE = (
    "huggingface.co/magiccodingman/Qwen3.6-35B-A3B-MagicQuant-GGUF (revision 6e1771746ee4,"
    " magicquant-manifest/magicquant.final-survivors.json) via github.com/magiccodingman/"
    "MagicQuant wiki/showcase.md"
)


def heldout(repo: str) -> None:
    """Print the held-out rows: one quantized file per line."""
    rev = subprocess.run(
        ["git", "-C", repo, "rev-parse", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    print("# Whole-model KLD sweeps (every tensor at one type). Credit (its licence asks for it):")
    print("# Thireus, GGUF Tool Suite and its contributors,")
    print(f"# github.com/Thireus/GGUF-Tool-Suite commit {rev}, models/*/group0/.")
    print(
        "# The last 10 rows, a second source: per-file KLD of MagicQuant's Qwen3.6-35B-A3B release."
    )
    print("# Not used by any fit in crawler/ranking/quality.py: held out. metric = mean KLD.")
    w = csv.writer(sys.stdout, lineterminator="\n")
    w.writerow(["base_model", "quant", "bpw", "metric", "value", "reference", "corpus", "source"])
    for model, name in HELDOUT.items():
        path = f"models/{model}/group0/{name}"
        rows = list(csv.DictReader(io.StringIO(_git(repo, path))))
        if not any(r["QTYPE"] == "bf16" and float(r["group0"]) == 0 for r in rows):
            continue
        for r in rows:
            bpw, kld = float(r["bpw"]), float(r["group0"])
            if r["QTYPE"] in MAINLINE and bpw < 100 and 0 < kld < 100:  # 404 marks a failed run
                src = f"github.com/Thireus/GGUF-Tool-Suite/blob/{rev[:12]}/{path}"
                w.writerow(
                    [
                        model,
                        r["QTYPE"].upper(),
                        r["bpw"],
                        "mean_kld",
                        r["group0"],
                        "BF16",
                        CORPUS,
                        src,
                    ]
                )
    q8_gb = MAGICQUANT_35B[0][1]
    for name, gb, kld in MAGICQUANT_35B:
        w.writerow(
            [
                "Qwen3.6-35B-A3B",
                name,
                f"{8.5 * gb / q8_gb:.4f}",
                "mean_kld",
                f"{kld}",
                "the release's reference (not stated)",
                "MagicQuant's evaluation set (not named)",
                MAGICQUANT_SOURCE,
            ]
        )


if __name__ == "__main__":
    {"sensitivity": main, "heldout": heldout}[sys.argv[1]](sys.argv[2])
