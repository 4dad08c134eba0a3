"""Quality estimate of a quant from its measured precision profile (pure: no I/O).

Effective bits -> KLD -> score, each step calibrated on published tables.
Details: docs/internals/ranking.md#quality
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache

from crawler.base.data import data_text
from crawler.profile.groups import GroupStats

__all__ = [
    "SENSITIVITY",
    "CalibrationReport",
    "QualityEstimate",
    "QualityInputs",
    "calibration_report",
    "estimate_quality",
    "kld_from_bits",
    "score_constants",
    "score_from_sums",
]

#: Groups the per-tensor data do not cover (tiny F32 tensors nobody quantizes): kept as set.
#: router 2.0 (a wrong expert choice is a large error), norms and other 1.0, mtp 0.0
#: (docs/internals/ranking.md#quality).
UNFITTED_SENSITIVITY: Mapping[str, float] = {"router": 2.0, "norm": 1.0, "other": 1.0, "mtp": 0.0}


def _fitted_sensitivity(family: str = "all") -> dict[str, float]:
    """The ``family`` rows of crawler/data/sensitivity.csv (tools/derive_sensitivity.py)."""
    text = data_text("sensitivity.csv")
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    return {
        row["group"]: float(row["sensitivity"])
        for row in csv.DictReader(lines)
        if row["family"] == family
    }


#: Noise weight per group, relative to a dense FFN matrix (1.0), per weight a token multiplies:
#: FITTED on the per-tensor KLD tables of Thireus's GGUF Tool Suite (credit: Thireus, GGUF Tool
#: Suite and its contributors; github.com/Thireus/GGUF-Tool-Suite, models/*/kld_results.csv):
#: the median over 22 models of 7 architecture families (crawler/data/sensitivity.csv, which
#: also holds the per-family medians). The hand-set priors these replace were attention 1.5,
#: linear attention 2.0, output 1.5, embeddings 1.0.
SENSITIVITY: Mapping[str, float] = {**_fitted_sensitivity(), **UNFITTED_SENSITIVITY}

# --- calibration data (docs.unsloth.ai/basics/unsloth-dynamic-v2.0-ggufs) ----------------------
#: Gemma 3 27B text weights, the denominator that turns the table's GB into bits per weight.
GEMMA3_27B_PARAMS = 27.0e9
#: (quant, file GB, KLD vs BF16): "Dynamic 2.0" column, the fit set.
KLD_DYNAMIC: tuple[tuple[str, float, float], ...] = (
    ("IQ1_S", 6.06, 0.972932),
    ("IQ1_M", 6.51, 0.800049),
    ("IQ2_XXS", 7.31, 0.521039),
    ("IQ2_M", 8.96, 0.258192),
    ("Q2_K_XL", 9.95, 0.220937),
    ("Q3_K_XL", 12.76, 0.080617),
    ("Q4_K_XL", 15.64, 0.023701),
)
#: The "old imatrix" column of the same table: held out.
KLD_OLD_IMATRIX: tuple[tuple[str, float, float], ...] = (
    ("IQ1_S", 5.83, 1.035688),
    ("IQ1_M", 6.33, 0.832252),
    ("IQ2_XXS", 7.16, 0.535764),
    ("IQ2_M", 8.84, 0.26554),
    ("Q2_K_XL", 9.78, 0.229671),
    ("Q3_K_XL", 12.51, 0.087845),
    ("Q4_K_XL", 15.41, 0.024916),
)
#: 5-shot MMLU of the Unsloth quants (same page); BF16 = 71.5, chance = 25.
MMLU_BF16 = 71.5
MMLU_CHANCE = 25.0
MMLU_BY_QUANT: tuple[tuple[str, float, float], ...] = (  # (quant, MMLU, GB): held out
    ("IQ1_S", 41.87, 6.06),
    ("IQ1_M", 48.10, 6.51),
    ("IQ2_XXS", 59.20, 7.31),
    ("IQ2_M", 66.47, 8.96),
    ("Q2_K", 68.50, 9.78),
    ("Q2_K_XL", 68.70, 9.95),
    ("IQ3_XXS", 68.27, 10.07),
    ("Q3_K_M", 70.70, 12.51),
    ("Q3_K_XL", 70.87, 12.76),
    ("Q4_K_M", 71.23, 15.41),
    ("Q4_K_XL", 71.47, 15.64),
    ("Q5_K_M", 71.77, 17.95),
    ("Q6_K", 71.87, 20.64),
    ("Q8_0", 71.60, 26.74),
)
#: MMLU loss is fitted on points whose loss exceeds the benchmark's noise (~0.5 points for
#: 14k MMLU questions); smaller losses are reported, not fitted.
MMLU_NOISE_POINTS = 0.5
#: MMLU (5-shot) by parameter count for the size prior, from three model families so that no
#: one family's ceiling decides it. Gemma 3 (docs.unsloth.ai page above; 1B/4B: the QAT Q4_0
#: figure, the only one given; 12B/27B BF16); Qwen2.5 base models (Qwen2.5 Technical Report,
#: arXiv:2412.15115, base-model table); Llama 3.1 base models (Meta's Llama 3.1 model card).
MMLU_BY_SIZE: tuple[tuple[str, float, float], ...] = (
    ("Gemma 3 1B", 1.0e9, 26.12),
    ("Gemma 3 4B", 4.0e9, 55.13),
    ("Gemma 3 12B", 12.0e9, 67.15),
    ("Gemma 3 27B", 27.0e9, 71.5),
    ("Qwen2.5 0.5B", 0.5e9, 47.5),
    ("Qwen2.5 1.5B", 1.5e9, 60.9),
    ("Qwen2.5 3B", 3.1e9, 65.6),
    ("Qwen2.5 7B", 7.6e9, 74.2),
    ("Qwen2.5 14B", 14.7e9, 79.7),
    ("Qwen2.5 32B", 32.5e9, 83.3),
    ("Qwen2.5 72B", 72.7e9, 86.1),
    ("Llama 3.1 8B", 8.0e9, 66.7),
    ("Llama 3.1 70B", 70.6e9, 79.3),
    ("Llama 3.1 405B", 405.9e9, 85.2),
)


@dataclass(frozen=True, slots=True)
class QualityInputs:
    """What the model needs about one quant; all from the catalog's profile and header."""

    groups: tuple[GroupStats, ...]
    n_expert: int = 0
    n_expert_used: int = 0
    n_embd: int = 0
    n_vocab: int = 0


@dataclass(frozen=True, slots=True)
class QualityEstimate:
    """The estimate and its explanation (every number the score came from)."""

    score: float  # 0-100, comparable across models (capability x retention)
    retention: float  # share of the full-precision model's above-chance MMLU kept, 0-1
    kld: float  # predicted mean KL divergence against BF16
    effective_bits: float
    params: int  # parameters without the MTP block
    effective_params: int  # params for dense; sqrt(total * active) for MoE
    capability: float  # 0-1, the size prior
    noise_share: tuple[tuple[str, float], ...]  # each group's share of the weighted noise

    def to_json(self) -> dict[str, object]:
        """JSON-friendly dict (rounded for display; raw values stay in the object)."""
        return {
            "score": round(self.score, 2),
            "retention": round(self.retention, 4),
            "kld": round(self.kld, 5),
            "effective_bits": round(self.effective_bits, 3),
            "params": self.params,
            "effective_params": self.effective_params,
            "capability": round(self.capability, 4),
            "noise_share": {g: round(s, 4) for g, s in self.noise_share},
        }


# --- fitted curves ---------------------------------------------------------------------------


def _linfit(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares line ``y = a + b x``; returns (a, b)."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    b = sxy / sxx
    return my - b * mx, b


def _bpw(gb: float) -> float:
    return gb * 8e9 / GEMMA3_27B_PARAMS


@dataclass(frozen=True, slots=True)
class _Curves:
    kld_a: float
    kld_c: float
    loss_m: float
    loss_p: float
    cap_max: float
    cap_k: float
    cap_p0: float


@cache
def _curves() -> _Curves:
    # Step 2: ln KLD linear in bits.
    kld_a, kld_c = _linfit(
        [_bpw(gb) for _, gb, _ in KLD_DYNAMIC], [math.log(k) for *_, k in KLD_DYNAMIC]
    )
    # Step 3: ln(MMLU loss) linear in ln KLD, over the same quants, above the noise floor.
    mmlu = {q: m for q, m, _ in MMLU_BY_QUANT}
    pairs = [(k, MMLU_BF16 - mmlu[q]) for q, _, k in KLD_DYNAMIC if q in mmlu]
    pairs = [(k, loss) for k, loss in pairs if loss > MMLU_NOISE_POINTS]
    ln_m, loss_p = _linfit([math.log(k) for k, _ in pairs], [math.log(loss) for _, loss in pairs])
    # Size prior: capability = cmax / (1 + (P0/P)^k); grid over cmax, linear fit for the rest.
    caps = [((m - MMLU_CHANCE) / (100 - MMLU_CHANCE), p) for _, p, m in MMLU_BY_SIZE]
    best: tuple[float, float, float, float] | None = None
    for i in range(1, 200):
        cmax = max(c for c, _ in caps) + i * 0.002
        xs = [math.log(p) for _, p in caps]
        ys = [math.log(cmax / c - 1) for c, _ in caps]  # = k ln P0 - k ln P
        a, b = _linfit(xs, ys)
        k, p0 = -b, math.exp(a / -b)
        sse = sum((cmax / (1 + (p0 / p) ** k) - c) ** 2 for c, p in caps)
        if best is None or sse < best[0]:
            best = (sse, cmax, k, p0)
    assert best is not None
    _, cap_max, cap_k, cap_p0 = best
    return _Curves(kld_a, kld_c, math.exp(ln_m), loss_p, cap_max, cap_k, cap_p0)


def score_constants() -> dict[str, float]:
    """The fitted constants of steps 2-4, for computing the score in SQL (crawler.catalog)."""
    c = _curves()
    return {
        "kld_a": c.kld_a,
        "kld_c": c.kld_c,
        "loss_m": c.loss_m,
        "loss_p": c.loss_p,
        "cap_max": c.cap_max,
        "cap_k": c.cap_k,
        "cap_p0": c.cap_p0,
        "mmlu_span": MMLU_BF16 - MMLU_CHANCE,
    }


def kld_from_bits(bits: float) -> float:
    """Predicted mean KLD against BF16 for effective bits per weight ``bits`` (step 2)."""
    c = _curves()
    return math.exp(c.kld_a + c.kld_c * bits)


def _mmlu_loss(kld: float) -> float:
    c = _curves()
    return c.loss_m * kld**c.loss_p if kld > 0 else 0.0


def _retention(kld: float) -> float:
    kept = 1.0 - _mmlu_loss(kld) / (MMLU_BF16 - MMLU_CHANCE)
    return min(1.0, max(0.0, kept))


def capability(params: float) -> float:
    """Size prior, 0-1: above-chance MMLU share of a full-precision model of ``params``."""
    c = _curves()
    if params <= 0:
        return 0.0
    return float(c.cap_max / (1.0 + (c.cap_p0 / params) ** c.cap_k))


# --- the estimate ----------------------------------------------------------------------------


def _active_params(g: GroupStats, x: QualityInputs) -> float:
    if g.name == "ffn_exps" and x.n_expert > 0:
        return g.n_params * max(x.n_expert_used, 1) / x.n_expert
    if g.name == "token_embd" and x.n_vocab > 0 and x.n_embd > 0:
        # one row is read per token; its noise is that of one n_embd x n_embd product.
        return float(min(g.n_params, x.n_embd * x.n_embd))
    return float(g.n_params)


def estimate_quality(x: QualityInputs) -> QualityEstimate | None:
    """Quality estimate of one quant, or None when no group has known bits."""
    weighted: list[tuple[str, float, float]] = []  # (group, weight, noise)
    params = active = 0.0
    for g in x.groups:
        if g.name == "mtp" or g.n_params <= 0:
            continue
        params += g.n_params
        a = _active_params(g, x)
        active += a
        bits = g.bits
        s = SENSITIVITY.get(g.name, 1.0)
        if bits is None or s == 0:
            continue
        weighted.append((g.name, s * a, 2.0 ** (-2.0 * bits)))
    total_w = sum(w for _, w, _ in weighted)
    if total_w <= 0:
        return None
    noise = sum(w * n for _, w, n in weighted) / total_w
    b_eff, kld, retention, eff_params, cap = _finish(noise, params, active, x.n_expert > 0)
    shares: dict[str, float] = {}
    for name, w, n in weighted:
        shares[name] = shares.get(name, 0.0) + w * n / (noise * total_w)
    return QualityEstimate(
        score=100.0 * cap * retention,
        retention=retention,
        kld=kld,
        effective_bits=b_eff,
        params=int(params),
        effective_params=int(eff_params),
        capability=cap,
        noise_share=tuple(sorted(shares.items(), key=lambda kv: -kv[1])),
    )


def _finish(
    noise: float, params: float, active: float, moe: bool
) -> tuple[float, float, float, float, float]:
    """(b_eff, kld, retention, P_eff, capability) from the weighted noise and parameter sums."""
    b_eff = -0.5 * math.log2(noise)
    kld = kld_from_bits(b_eff)
    eff_params = math.sqrt(params * active) if moe else params
    return b_eff, kld, _retention(kld), eff_params, capability(eff_params)


def score_from_sums(
    noise_weighted: float, weight: float, params: float, active: float, moe: bool
) -> float | None:
    """The score estimate_quality gives, from the four sums it builds over the groups.

    ``noise_weighted`` = sum of ``w_g 2^(-2 b_g)``, ``weight`` = sum of ``w_g``, ``params`` and
    ``active`` = parameter sums (MTP excluded). The catalog computes these sums in SQL so that a
    large candidate set is ordered by quality without loading its tensor groups.
    """
    if weight <= 0 or noise_weighted <= 0:
        return None
    *_, retention, _p, cap = _finish(noise_weighted / weight, params, active, moe)
    return 100.0 * cap * retention


# --- calibration report ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CalibrationReport:
    """Fit errors of the quality model; docs/models.md and tests quote these."""

    kld_rmse_log: float  # in-sample, ln(KLD) residual RMS, Dynamic 2.0 column
    kld_max_ratio: float  # worst predicted/measured (or inverse) ratio, in-sample
    kld_holdout_rmse_log: float  # old-imatrix column
    mmlu_mae_points: float  # held-out 14 quants: predicted MMLU vs published, mean abs error
    mmlu_max_points: float
    capability_mae_points: float  # MMLU by size, in-sample
    slope_per_bit: float  # fitted c (ln KLD per bit); the noise model says -2 ln 2 = -1.386

    def rows(self) -> Iterable[tuple[str, str]]:
        """(metric, value) pairs for a table."""
        yield "KLD fit, RMS of ln error (Dynamic 2.0, 7 quants)", f"{self.kld_rmse_log:.3f}"
        yield "KLD fit, worst ratio", f"{self.kld_max_ratio:.2f}x"
        yield (
            "KLD held out (old imatrix, 7 quants), RMS ln error",
            f"{self.kld_holdout_rmse_log:.3f}",
        )
        yield "MMLU held out (14 quants), mean abs error", f"{self.mmlu_mae_points:.2f} points"
        yield "MMLU held out, worst error", f"{self.mmlu_max_points:.2f} points"
        yield (
            "size prior (14 models, 3 families), mean abs error",
            f"{self.capability_mae_points:.2f} points",
        )
        yield "fitted slope ln KLD per bit (theory -1.386)", f"{self.slope_per_bit:.3f}"


def calibration_report() -> CalibrationReport:
    """Errors of the fitted curves on the tables above (in-sample and held out)."""
    c = _curves()
    fit = [math.log(kld_from_bits(_bpw(gb))) - math.log(k) for _, gb, k in KLD_DYNAMIC]
    hold = [math.log(kld_from_bits(_bpw(gb))) - math.log(k) for _, gb, k in KLD_OLD_IMATRIX]
    mmlu_err = [
        abs(MMLU_BF16 - _mmlu_loss(kld_from_bits(_bpw(gb))) - m) for _, m, gb in MMLU_BY_QUANT
    ]
    cap_err = [
        abs(MMLU_CHANCE + (100 - MMLU_CHANCE) * capability(p) - m) for _, p, m in MMLU_BY_SIZE
    ]
    return CalibrationReport(
        kld_rmse_log=math.sqrt(sum(e * e for e in fit) / len(fit)),
        kld_max_ratio=math.exp(max(abs(e) for e in fit)),
        kld_holdout_rmse_log=math.sqrt(sum(e * e for e in hold) / len(hold)),
        mmlu_mae_points=sum(mmlu_err) / len(mmlu_err),
        mmlu_max_points=max(mmlu_err),
        capability_mae_points=sum(cap_err) / len(cap_err),
        slope_per_bit=c.kld_c,
    )
