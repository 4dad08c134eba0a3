"""GPU table: every row sourced and sane, coverage of the families, fuzzy resolution."""

from __future__ import annotations

import re

import pytest

from crawler.base.errors import UsageError
from crawler.fit.gpus import UNIFIED_GPU_FRACTION, load_gpus, resolve_gpu

GIB = 1024**3


def test_every_row_has_memory_bandwidth_and_a_public_source():
    rows = load_gpus()
    assert len(rows) > 150
    names = [g.name for g in rows]
    assert len(set(names)) == len(names)
    for g in rows:
        assert g.memory_gib > 0 and g.bandwidth_gb_s > 0, g.name
        assert g.source.startswith("https://"), g.name
        assert g.kind in {"desktop", "laptop", "workstation", "datacenter", "apple", "apu"}
        assert g.unified == (g.kind in {"apple", "apu"}), g.name


@pytest.mark.parametrize(
    "pattern",
    [
        r"^GeForce RTX 20\d0",
        r"^GeForce RTX 30\d0 .*Laptop GPU$",
        r"^GeForce RTX 40\d0",
        r"^GeForce RTX 50\d0 .*Laptop GPU$",
        r"^RTX A\d000",
        r"Ada Generation$",
        r"^(H100|H200|A100|B200|L40S)",
        r"^Radeon RX 6\d00",
        r"^Radeon RX 7\d00",
        r"^Radeon RX 9\d70",
        r"^Apple M[1-5]",
        r"Strix Halo",
    ],
)
def test_the_table_covers_each_family_of_the_brief(pattern):
    assert any(re.search(pattern, g.name) for g in load_gpus()), pattern


@pytest.mark.parametrize(
    "query,name",
    [
        ("5090 laptop", "GeForce RTX 5090 Laptop GPU"),
        ("RTX 5090 Mobile", "GeForce RTX 5090 Laptop GPU"),
        ("5090 laptp", "GeForce RTX 5090 Laptop GPU"),  # typo
        ("5090", "GeForce RTX 5090"),  # fewest unmentioned variant words wins
        ("nvidia geforce rtx 4090", "GeForce RTX 4090"),
        ("3090 ti", "GeForce RTX 3090 Ti"),
        ("7900 xt", "Radeon RX 7900 XT"),
        ("rx 7900 xtx", "Radeon RX 7900 XTX"),
        ("rtx 6000 ada", "RTX 6000 Ada Generation"),
        ("h100 sxm", "H100 SXM5 80 GB"),
        ("m4 max", "Apple M4 Max"),
        ("strix halo", "Radeon 8060S (Ryzen AI Max+ 395 Strix Halo)"),
    ],
)
def test_resolve_names_one_gpu_and_says_which(query, name):
    match = resolve_gpu(query)
    assert match.gpu.name == name
    assert name in match.describe() and repr(query) in match.describe()


def test_the_5090_laptop_is_24_gib_at_896_gb_s():
    g = resolve_gpu("5090 laptop").gpu
    assert (g.memory_gib, g.bandwidth_gb_s, g.budget_bytes) == (24.0, 896.0, 24 * GIB)


def test_unified_memory_budget_is_a_documented_fraction():
    g = resolve_gpu("m4 max").gpu
    assert g.unified and g.budget_bytes == int(128 * UNIFIED_GPU_FRACTION * GIB)


@pytest.mark.parametrize("query", ["4060 ti", "h100", "3060"])
def test_ambiguous_names_list_the_choices(query):
    with pytest.raises(UsageError, match="ambiguous") as err:
        resolve_gpu(query)
    assert str(err.value).count(";") >= 1


def test_ambiguity_lists_both_4060_ti_memory_sizes():
    with pytest.raises(UsageError) as err:
        resolve_gpu("4060 ti")
    assert "4060 Ti 8 GB" in str(err.value) and "4060 Ti 16 GB" in str(err.value)


@pytest.mark.parametrize("query", ["rtx 9999", "voodoo", "nvidia", ""])
def test_unknown_names_are_usage_errors(query):
    with pytest.raises(UsageError):
        resolve_gpu(query)
