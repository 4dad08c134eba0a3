"""Quality model: calibration errors, the noise-weighting rules, cross-model size prior."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crawler.profile.groups import GroupStats
from crawler.ranking.quality import (
    QualityInputs,
    calibration_report,
    capability,
    estimate_quality,
    kld_from_bits,
)


def _dense(attn: float, ffn: float, *, mtp: float = 8.5, embd: float = 6.5625, params=20e9):
    return QualityInputs(
        groups=(
            GroupStats("attn", int(params / 8), 0, attn),
            GroupStats("ffn", int(params), 0, ffn),
            GroupStats("output", int(1e9), 0, embd),
            GroupStats("token_embd", int(1e9), 0, embd),
            GroupStats("mtp", int(3e8), 0, mtp),
        ),
        n_embd=5120,
        n_vocab=248320,
    )


def test_calibration_errors_stay_small():
    rep = calibration_report()
    assert rep.kld_rmse_log < 0.15  # in-sample: ~9% error on KLD
    assert rep.kld_holdout_rmse_log < 0.15  # the other column of the same table
    assert rep.mmlu_mae_points < 1.0  # 14 held-out quants
    assert rep.mmlu_max_points < 2.5
    assert rep.capability_mae_points < 8.0  # three families, one curve
    # The fitted slope is close to the uniform-quantizer noise model's -2 ln 2 per bit.
    assert abs(rep.slope_per_bit / (-2 * math.log(2)) - 1) < 0.15


def test_published_kld_points_are_reproduced_within_20_percent():
    from crawler.ranking.quality import GEMMA3_27B_PARAMS, KLD_DYNAMIC

    for quant, gb, kld in KLD_DYNAMIC:
        predicted = kld_from_bits(gb * 8e9 / GEMMA3_27B_PARAMS)
        assert abs(predicted / kld - 1) < 0.2, quant


def test_a_uniform_file_has_effective_bits_equal_to_its_bpw():
    q = estimate_quality(_dense(4.5, 4.5, embd=4.5, mtp=4.5))
    assert q is not None and q.effective_bits == pytest.approx(4.5)


def test_the_mtp_head_does_not_change_quality():
    a, b = estimate_quality(_dense(8.5, 4.5, mtp=8.5)), estimate_quality(_dense(8.5, 4.5, mtp=2))
    assert a is not None and b is not None and a.score == b.score
    assert "mtp" not in dict(a.noise_share)


def test_attention_kept_at_8_bits_beats_4_bits_at_equal_ffn():
    keep, cut = estimate_quality(_dense(8.5, 4.5)), estimate_quality(_dense(4.5, 4.5))
    assert keep is not None and cut is not None
    assert keep.kld < cut.kld and keep.score > cut.score


def test_moe_attention_matters_more_than_in_dense_models():
    # Qwen3.5-35B-A3B sweep (reddit.com/r/LocalLLaMA/comments/1rfds1h): attention and shared
    # experts at Q8_0 with Q4_K experts (AesSedai, KLD 0.0102) beat MXFP4 everywhere (first
    # UD-Q4_K_XL, 0.0524).
    def moe(attn: float, shexp: float, exps: float) -> QualityInputs:
        return QualityInputs(
            groups=(
                GroupStats("attn", int(0.6e9), 0, attn),
                GroupStats("linear_attn", int(0.9e9), 0, attn),
                GroupStats("ffn_shexp", int(0.3e9), 0, shexp),
                GroupStats("ffn_exps", int(32e9), 0, exps),
                GroupStats("output", int(0.5e9), 0, 6.5625),
                GroupStats("token_embd", int(0.5e9), 0, 6.5625),
            ),
            n_expert=256,
            n_expert_used=8,
            n_embd=2048,
            n_vocab=248320,
        )

    aes, mxfp4 = estimate_quality(moe(8.5, 8.5, 4.5)), estimate_quality(moe(4.25, 4.25, 4.25))
    assert aes is not None and mxfp4 is not None
    ratio = mxfp4.kld / aes.kld
    assert ratio > 3  # published: 5.1x; the active-parameter weighting carries most of it
    assert aes.effective_params == pytest.approx(math.sqrt(aes.params * 3.85e9), rel=0.1)


def test_bigger_models_score_higher_at_the_same_bits():
    small = estimate_quality(_dense(6.5, 6.5, params=7e9))
    big = estimate_quality(_dense(6.5, 6.5, params=60e9))
    assert small is not None and big is not None
    # Retention differs only by the embeddings' share (6.5625 bits here, a fixed n_embd^2 of
    # active weights against a growing FFN): size enters through capability, not retention.
    assert big.retention == pytest.approx(small.retention, rel=1e-4)
    assert big.score > small.score and big.params > small.params
    assert capability(70e9) > capability(8e9) > capability(1e9) > 0


def test_no_known_bits_means_no_estimate():
    assert estimate_quality(QualityInputs(groups=(GroupStats("attn", 10, 0, None),))) is None
    assert estimate_quality(QualityInputs(groups=())) is None


@given(
    bits=st.lists(st.floats(1.5, 16.0), min_size=4, max_size=4),
    which=st.integers(0, 3),
    bump=st.floats(0.1, 8.0),
)
def test_more_bits_in_any_group_never_lower_the_score(bits, which, bump):
    def q(b):
        return estimate_quality(_dense(b[0], b[1], embd=b[2]))

    higher = list(bits)
    higher[which] += bump
    before, after = q(bits), q(higher)
    assert before is not None and after is not None
    assert after.score >= before.score - 1e-9
    assert after.kld <= before.kld + 1e-12
    assert 0 <= after.retention <= 1
