"""Plain-words differences between two profiles of one quant."""

from __future__ import annotations

from typing import Any

import pytest

from crawler.profile.diff import describe_change, describe_types


def _profile(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "architecture": "qwen35",
        "size_bytes": 17 * 2**30,
        "n_tensors": 851,
        "loadable_by_mainline": True,
        "dynamic": True,
        "groups": {
            "attn": {"types": {"MXFP4": 64}, "min_bits": 4},
            "ffn_exps": {"types": {"Q4_K": 120, "Q5_K": 8}, "min_bits": 4},
            "token_embd": {"types": {"Q6_K": 1}, "min_bits": 6},
            "mtp": {"types": {"Q8_0": 15}, "min_bits": 8},
        },
        "mtp": {"present": True, "state": "present", "layers": 1, "min_bits": 8, "preserved": True},
        "attention": {"min_bits": 4, "preserved": False},
    }
    base.update(overrides)
    return base


def test_unsloth_style_reupload_attention_off_mxfp4() -> None:
    old = _profile()
    new = _profile(
        groups={**old["groups"], "attn": {"types": {"Q8_0": 64}, "min_bits": 8}},
        attention={"min_bits": 8, "preserved": True},
        size_bytes=17 * 2**30 + 512 * 2**20,
    )
    assert describe_change(old, new) == [
        "attention MXFP4 -> Q8_0",
        "attention now preserved",
        "size 17.00 GiB -> 17.50 GiB (+512.00 MiB)",
    ]


def test_mtp_head_removed_and_tensor_count() -> None:
    old = _profile()
    new = _profile(
        mtp={"present": False, "state": "absent", "layers": 0, "min_bits": None},
        n_tensors=836,
    )
    assert describe_change(old, new) == ["MTP head removed", "tensors 851 -> 836"]
    assert describe_change(new, old)[0] == "MTP head added"


def test_mtp_requantised_and_mix_change_uses_counts() -> None:
    old = _profile()
    groups = dict(old["groups"])
    groups["mtp"] = {"types": {"Q4_K": 15}, "min_bits": 4}
    groups["ffn_exps"] = {"types": {"Q4_K": 100, "Q5_K": 28}}
    new = _profile(
        groups=groups,
        mtp={"present": True, "state": "present", "layers": 1, "min_bits": 4, "preserved": False},
    )
    assert describe_change(old, new) == [
        "MTP Q8_0 -> Q4_K",
        "MTP head no longer preserved",
        "routed experts 120 Q4_K/8 Q5_K -> 100 Q4_K/28 Q5_K",
    ]


def test_loadability_dynamic_and_groups_added_removed() -> None:
    old = _profile()
    groups = {k: v for k, v in old["groups"].items() if k != "token_embd"}
    groups["output"] = {"types": {"Q6_K": 1}}
    new = _profile(groups=groups, loadable_by_mainline=False, dynamic=False)
    assert describe_change(old, new) == [
        "no longer loadable by mainline llama.cpp",
        "embeddings removed",
        "output added (Q6_K)",
        "no longer dynamic",
    ]


def test_same_profile_and_missing_profiles() -> None:
    assert describe_change(_profile(), _profile()) == ["content changed, same profile"]
    assert describe_change(None, None) == ["content changed, same profile"]
    assert describe_change(None, _profile(), old_size=10, new_size=10) == [
        "content changed, same profile"
    ]
    assert describe_change({}, {}, old_size=2**30, new_size=2**30 - 100) == [
        "size 1.00 GiB -> 1.00 GiB (-100 B)"
    ]
    assert describe_change({}, {}, old_size=2118048, new_size=2971424) == [
        "size 2.02 MiB -> 2.83 MiB (+833.38 KiB)"
    ]


def test_attention_fallback_without_groups() -> None:
    old = {"attention": {"min_bits": 4.0}}
    new = {"attention": {"min_bits": 8.0}}
    assert describe_change(old, new) == ["attention min bits 4 -> 8"]


def test_f32_norms_are_not_weights() -> None:
    old = _profile()
    new = _profile(groups={**old["groups"], "attn": {"types": {"MXFP4": 64, "F32": 16}}})
    assert describe_change(old, new) == ["content changed, same profile"]
    newer = _profile(groups={**old["groups"], "attn": {"types": {"Q8_0": 64, "F32": 16}}})
    assert describe_change(new, newer)[0] == "attention MXFP4 -> Q8_0"
    assert describe_types({"F32": 3}) == "F32"


@pytest.mark.parametrize(
    ("types", "text"),
    [
        ({}, "none"),
        (None, "none"),
        ({"Q6_K": 3, "Q4_K": 9}, "Q4_K+Q6_K"),
        ({"B": 1, "A": 1}, "A+B"),
    ],
)
def test_describe_types(types: dict[str, int] | None, text: str) -> None:
    assert describe_types(types) == text


def test_hostile_values_do_not_crash() -> None:
    weird: dict[str, Any] = {"groups": {"attn": "nope"}, "mtp": [1], "n_tensors": "x"}
    assert describe_change(weird, _profile())
