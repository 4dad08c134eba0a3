"""Which files make one quant: one table of names fed to every path that groups files.

The crawl (crawler.profile.grouping), inspect / estimate (crawler.library.targets's quant
resolution), labels, the check-log look-up (the name llama.cpp loads) and the snapshot import
(its kind check) must all answer from crawler.profile.quant_files, so they agree on every name.
"""

from __future__ import annotations

import pytest

from crawler.base.errors import UsageError
from crawler.hub import HubFile
from crawler.library.targets import _quant_files, resolve_quant
from crawler.profile.grouping import group_files
from crawler.profile.labels import split_info
from crawler.profile.quant_files import (
    classify,
    is_quant_start,
    llama_cpp_model_file,
    loaded_name,
    shard_info,
    shard_names,
)
from crawler.snapshot.import_ import _kind_today

# name -> (kind or None when ignored, starts a quant)
TABLE: dict[str, tuple[str | None, bool]] = {
    "M-Q4_K_M-001-of-003.gguf": ("shard", True),  # 3 digits
    "M-Q4_K_M-002-of-003.gguf": ("shard", False),
    "M-Q4_K_M-003-of-003.gguf": ("shard", False),
    "N-Q5_K_M-00001-of-00002.gguf": ("shard", True),  # llama_split_path's 5 digits
    "N-Q5_K_M-00002-of-00002.gguf": ("shard", False),
    "sub/P-Q6_K-0001-of-0002.gguf": ("shard", True),  # 4 digits, in a folder
    "sub/P-Q6_K-0002-of-0002.gguf": ("shard", False),
    "R.Q8_0.gguf.part1of2": ("part", True),  # mradermacher
    "R.Q8_0.gguf.part2of2": ("part", False),
    "S-Q2_K.gguf.part00": ("part", True),  # split -d
    "S-Q2_K.gguf.part01": ("part", False),
    "M-Q3_K_S.gguf": ("gguf", True),
    "M-27B-MTP-UD-Q4_K_XL.gguf": ("gguf", True),  # a full model that carries MTP
    "mmproj-F16.gguf": ("mmproj", False),
    "M-mmproj-f16.gguf": ("mmproj", False),
    "mtp-M-Q8_0.gguf": ("mtp_sidecar", False),
    "MTP_M-Q8_0.gguf": ("mtp_sidecar", False),
    "M-mtp-only-Q8_0.gguf": ("mtp_sidecar", False),
    "eagle3-M-Q8_0.gguf": ("mtp_sidecar", False),
    "dflash-M-Q8_0.gguf": ("mtp_sidecar", False),
    "dspark-M-Q8_0.gguf": ("mtp_sidecar", False),
    "imatrix.gguf": (None, False),
    "M.imatrix.gguf": (None, False),
    "README.md": (None, False),
}


class _File:
    def __init__(self, path: str) -> None:
        self.path, self.size, self.content_key = path, 100, f"sha:{path}"


def test_the_naming_module_classifies_the_table() -> None:
    paths = list(TABLE)
    for name, (kind, starts) in TABLE.items():
        got = classify(name)
        assert (got[0].value if got else None) == kind, name
        assert is_quant_start(name, paths) == starts, name


def test_the_crawl_groups_the_table_the_same_way() -> None:
    layout = group_files([_File(p) for p in TABLE])
    kinds = {f.path: f.kind.value for f in layout.files}
    assert kinds == {n: k for n, (k, _) in TABLE.items() if k is not None}
    assert sorted(q.path for q in layout.quants) == sorted(n for n, (_, s) in TABLE.items() if s)
    assert all(q.complete for q in layout.quants)
    three = next(q for q in layout.quants if q.path == "M-Q4_K_M-001-of-003.gguf")
    assert [f.path for f in three.files] == shard_names("M-Q4_K_M-001-of-003.gguf")


def test_inspect_and_estimate_resolve_the_table_the_same_way() -> None:
    files = [HubFile(p, 100, f"blob{i}") for i, p in enumerate(TABLE)]
    starts = sorted(f.path for f in _quant_files(files))
    assert starts == sorted(n for n, (_, s) in TABLE.items() if s)
    assert resolve_quant(files, "Q4_K_M").path == "M-Q4_K_M-001-of-003.gguf"
    assert resolve_quant(files, "Q8_0").path == "R.Q8_0.gguf.part1of2"  # sidecars are no quant
    with pytest.raises(UsageError, match="no quant 'IQ1_S'"):
        resolve_quant(files, "IQ1_S")


def test_labels_check_log_and_snapshots_read_the_table_the_same_way() -> None:
    for name, (kind, starts) in TABLE.items():
        assert split_info(name) == shard_info(name), name
        if kind is not None:
            assert _kind_today(name) == kind, name  # the snapshot import's check
        if starts:
            # check-log finds a stored quant by the file name llama.cpp is given for it
            want = name.rsplit("/", 1)[-1].split(".gguf")[0] + ".gguf"
            assert loaded_name(name) == (want if kind == "part" else name.rsplit("/", 1)[-1])


def test_shard_names_keep_the_width_they_were_written_with() -> None:
    assert shard_names("a/X-01-of-03.gguf") == ["a/X-01-of-03.gguf", "a/X-02-of-03.gguf",
                                                "a/X-03-of-03.gguf"]  # fmt: skip
    assert shard_names("X.gguf") == ["X.gguf"]


def test_llama_cpp_own_rule_is_kept_apart_and_stated() -> None:
    # What -hf picks (common/download.cpp): case-sensitive substrings and 5-digit shards.
    assert llama_cpp_model_file("M-Q4_K_M-00001-of-00003.gguf")
    assert not llama_cpp_model_file("M-Q4_K_M-00002-of-00003.gguf")
    assert not llama_cpp_model_file("eagle3-M-Q8_0.gguf")
    assert llama_cpp_model_file("MTP_M-Q8_0.gguf")  # llama.cpp only skips lower-case "mtp-"
