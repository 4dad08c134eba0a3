"""Published quality artifacts (crawler/profile/measured.py): parsing as published, keying,
ordering."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from crawler.profile.measured import (
    MAX_ARTIFACT_BYTES,
    MeasuredValue,
    artifact_kind,
    match_rows,
    order_by_measured,
    parse_magicquant,
    parse_perplexity_log,
)
from tests.fixtures.world import MagicQuantManifest, Quant, perplexity_log

MANIFEST = "magicquant-manifest/magicquant.final-survivors.json"


def test_artifact_kind_reads_only_small_known_files() -> None:
    assert artifact_kind(MANIFEST, 30_000) == "magicquant"
    assert artifact_kind("scores/Qwen3.6-27B-Q4_K_M.log", 25_000) == "llama-perplexity"
    assert artifact_kind(MANIFEST, MAX_ARTIFACT_BYTES + 1) is None  # too big: never fetched
    assert artifact_kind("magicquant-manifest/magicquant.clone-configs.json", 100) is None
    assert artifact_kind("README.md", 100) is None
    assert artifact_kind("scores/x.log", 0) is None


def test_magicquant_manifest_as_the_fixture_writes_it(tmp_path: Path) -> None:
    q = Quant("M-Q6_K.gguf", "qwen35", "Q6_K")
    spec = MagicQuantManifest(
        MANIFEST, ((q, 0.00165, 6.512, None), ("Ext-UD.gguf", 0.0121, 6.6, 7))
    )
    (path,) = spec.build(tmp_path)
    rows = parse_magicquant(path.read_text(), MANIFEST)
    (tmp_path / "again").mkdir()
    size = sum(p.stat().st_size for p in q.build(tmp_path / "again"))
    got = {(r.file_name, r.metric): (r.value, r.size_bytes) for r in rows}
    assert got == {
        ("M-Q6_K.gguf", "mean_kld"): (0.00165, size),
        ("M-Q6_K.gguf", "ppl"): (6.512, size),
        ("Ext-UD.gguf", "mean_kld"): (0.0121, 7),
        ("Ext-UD.gguf", "ppl"): (6.6, 7),
    }
    assert all(r.corpus is None and r.reference is None for r in rows)  # the manifest names none


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        "{}",
        json.dumps([{"fileName": "x.gguf", "kld": "0.1"}]),  # a string, not a number
        json.dumps([{"fileName": "x.gguf", "kld": -1}]),
        json.dumps([{"fileName": "x.bin", "kld": 0.1}]),
        json.dumps([{"fileName": "x.gguf", "kld": True}]),
        json.dumps([7, None, "x"]),
    ],
)
def test_malformed_manifests_give_no_rows(text: str) -> None:
    assert parse_magicquant(text, MANIFEST) == []


def test_perplexity_log_in_the_published_format() -> None:
    text = perplexity_log("Qwen3.6-27B-Q4_K_M.gguf", 0.031273, 1.834118, 6.407115)
    rows = parse_perplexity_log(text, "scores/whatever.log")
    assert {(r.file_name, r.metric, r.value) for r in rows} == {
        ("Qwen3.6-27B-Q4_K_M.gguf", "mean_kld", 0.031273),
        ("Qwen3.6-27B-Q4_K_M.gguf", "p99.9_kld", 1.834118),
        ("Qwen3.6-27B-Q4_K_M.gguf", "ppl", 6.407115),
    }
    assert all(r.size_bytes is None and r.fmt == "llama-perplexity" for r in rows)


def test_a_log_without_loader_line_is_named_by_its_file_and_ppl_only_log_has_no_kld() -> None:
    text = "Mean PPL(Q)                   :   8.966302 ±   0.160270\n"
    rows = parse_perplexity_log(text, "scores/Model-IQ3_M.log")
    assert [(r.file_name, r.metric) for r in rows] == [("Model-IQ3_M.gguf", "ppl")]
    # "Mean KLD" outside the KL-divergence block is not read as one.
    assert parse_perplexity_log("Mean    KLD:   0.5 ± 0.1\n", "scores/a.log") == []


def test_rows_are_keyed_by_name_and_size() -> None:
    rows = parse_magicquant(
        json.dumps(
            [
                {"fileName": "A.gguf", "kld": 0.01, "sizeBytes": 100},
                {"fileName": "B.gguf", "kld": 0.02, "sizeBytes": 999},  # stale: other bytes
                {"fileName": "C.gguf", "kld": 0.03, "sizeBytes": 300},  # not in the repo
            ]
        ),
        MANIFEST,
    )
    files = {"A.gguf": ("A.gguf", 100), "B.gguf": ("B.gguf", 200)}
    assert [(p, s, r.value) for p, s, r in match_rows(rows, files)] == [("A.gguf", 100, 0.01)]


@dataclass
class _R:
    name: str
    base: str | None
    measured: tuple[MeasuredValue, ...] = ()


def _kld(value: float, corpus: str | None = None, url: str = "u1", metric: str = "mean_kld"):
    return MeasuredValue(metric, value, corpus, None, "magicquant", "a", url, "r", "f", 1, "")


def test_measured_kld_orders_only_peers_of_one_base_metric_and_corpus() -> None:
    results = [
        _R("pred-only", "m"),
        _R("a", "m", (_kld(0.03),)),
        _R("other-base", "n", (_kld(0.001),)),
        _R("b", "m", (_kld(0.01),)),
        _R("other-source", "m", (_kld(0.0001, url="u2"),)),  # no corpus, other artifact
        _R("ppl-only", "m", (_kld(5.0, metric="ppl"),)),
        _R("c", "M", (_kld(0.02),)),  # base model names compare case-insensitively
    ]
    out = order_by_measured(results, lambda r: r.measured, lambda r: r.base)
    assert [r.name for r in out] == [
        "pred-only",
        "b",
        "other-base",
        "c",
        "other-source",
        "ppl-only",
        "a",
    ]


def test_a_stated_corpus_groups_across_artifacts() -> None:
    results = [
        _R("x", "m", (_kld(0.05, "wiki.test.raw", "u1"),)),
        _R("y", "m", (_kld(0.01, "wiki.test.raw", "u2"),)),
        _R("z", "m", (_kld(0.001, "other corpus", "u3"),)),
    ]
    out = order_by_measured(results, lambda r: r.measured, lambda r: r.base)
    assert [r.name for r in out] == ["y", "x", "z"]
