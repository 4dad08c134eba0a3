"""Grouping a repo's files into quants: shards, folders, parts, sidecars, ignored files."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from crawler.profile.grouping import FileKind, classify, content_key, group_files


@dataclass(frozen=True)
class F:
    path: str
    size: int = 100
    content_key: str = ""

    def __post_init__(self) -> None:
        if not self.content_key:
            object.__setattr__(self, "content_key", f"oid-{self.path}")


def test_single_files_are_one_quant_each_and_non_gguf_is_ignored() -> None:
    layout = group_files(
        [
            F("README.md"),
            F(".gitattributes"),
            F("config.json"),
            F("M-Q4_K_M.gguf", 10),
            F("M-Q8_0.gguf", 20),
            F("imatrix_unsloth.gguf_file"),
            F("M.imatrix"),
        ]
    )
    assert [q.path for q in layout.quants] == ["M-Q4_K_M.gguf", "M-Q8_0.gguf"]
    assert [f.path for f in layout.files] == ["M-Q4_K_M.gguf", "M-Q8_0.gguf"]
    q4 = layout.quants[0]
    assert q4.complete and q4.size_bytes == 10 and q4.shard_count == 1
    assert q4.content_key == "oid-M-Q4_K_M.gguf"
    assert q4.files[0].kind == FileKind.GGUF and q4.files[0].quant_path == "M-Q4_K_M.gguf"


def test_split_shards_in_a_folder_make_one_quant_keyed_by_the_first_shard() -> None:
    layout = group_files(
        [
            F("BF16/M-BF16-00002-of-00003.gguf", 5),
            F("BF16/M-BF16-00001-of-00003.gguf", 7),
            F("BF16/M-BF16-00003-of-00003.gguf", 3),
            F("M-IQ4_NL.gguf", 4),
        ]
    )
    paths = [q.path for q in layout.quants]
    assert paths == ["BF16/M-BF16-00001-of-00003.gguf", "M-IQ4_NL.gguf"]
    bf16 = layout.quants[0]
    assert bf16.complete
    assert [f.shard_index for f in bf16.files] == [1, 2, 3]
    assert bf16.size_bytes == 15 and bf16.shard_count == 3
    # Every shard carries its own header and tensor table.
    assert len(bf16.header_files) == 3
    assert {f.kind for f in bf16.files} == {FileKind.SHARD}
    assert bf16.content_key.startswith("sha256:") and len(bf16.content_key) == 71


def test_same_stem_in_two_folders_are_two_quants() -> None:
    layout = group_files(
        [
            F("a/M-Q8_0-00001-of-00002.gguf"),
            F("a/M-Q8_0-00002-of-00002.gguf"),
            F("b/M-Q8_0-00001-of-00002.gguf"),
            F("b/M-Q8_0-00002-of-00002.gguf"),
        ]
    )
    assert [q.path for q in layout.quants] == [
        "a/M-Q8_0-00001-of-00002.gguf",
        "b/M-Q8_0-00001-of-00002.gguf",
    ]


def test_missing_shard_makes_an_incomplete_quant() -> None:
    layout = group_files([F("M-00001-of-00003.gguf"), F("M-00003-of-00003.gguf")])
    (quant,) = layout.quants
    assert not quant.complete
    assert [f.shard_index for f in quant.files] == [1, 3]


def test_mradermacher_parts_are_one_quant_with_the_header_in_part_one() -> None:
    layout = group_files(
        [
            F("M.i1-Q6_K.gguf.part2of2", 50),
            F("M.i1-Q6_K.gguf.part1of2", 60),
            F("M.i1-Q4_K_M.gguf", 40),
        ]
    )
    assert [q.path for q in layout.quants] == ["M.i1-Q4_K_M.gguf", "M.i1-Q6_K.gguf.part1of2"]
    parts = layout.quants[1]
    assert parts.complete and parts.size_bytes == 110
    assert [f.kind for f in parts.files] == [FileKind.PART, FileKind.PART]
    # Byte-concatenated: only part 1 has a GGUF header.
    assert [f.path for f in parts.header_files] == ["M.i1-Q6_K.gguf.part1of2"]


def test_mmproj_and_mtp_sidecars_are_kept_apart() -> None:
    layout = group_files(
        [
            F("mmproj-F16.gguf"),
            F("mmproj-model-f16.gguf"),
            F("mtp-Qwen3.6-27B-Q8_0.gguf"),
            F("eagle3-M.gguf"),
            F("Qwen3.6-27B-Q5_K_M-mtp.gguf"),
        ]
    )
    # A model file whose name merely ends in "-mtp" is a full model with an MTP head.
    assert [q.path for q in layout.quants] == ["Qwen3.6-27B-Q5_K_M-mtp.gguf"]
    kinds = {f.path: f.kind for f in layout.files}
    assert kinds["mmproj-F16.gguf"] == FileKind.MMPROJ
    assert kinds["mmproj-model-f16.gguf"] == FileKind.MMPROJ
    assert kinds["mtp-Qwen3.6-27B-Q8_0.gguf"] == FileKind.MTP_SIDECAR
    assert kinds["eagle3-M.gguf"] == FileKind.MTP_SIDECAR
    assert all(f.quant_path is None for f in layout.files if f.kind != FileKind.GGUF)


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("x/Model-Q4_K_M.GGUF", (FileKind.GGUF, None, None)),
        ("Model-00001-of-00002.gguf", (FileKind.SHARD, 1, 2)),
        ("Model-3-of-4.gguf", (FileKind.SHARD, 3, 4)),
        ("Model-00000-of-00002.gguf", (FileKind.OTHER, None, None)),
        ("Model-00003-of-00002.gguf", (FileKind.OTHER, None, None)),
        ("Model.gguf.part3of3", (FileKind.PART, 3, 3)),
        ("imatrix.gguf", None),
        ("README.md", None),
        ("model.safetensors", None),
    ],
)
def test_classify(path: str, expected: object) -> None:
    assert classify(path) == expected


def test_content_key_changes_when_any_shard_changes() -> None:
    a = content_key(["1", "2"])
    assert a == content_key(["1", "2"])
    assert a != content_key(["1", "3"])
    assert content_key(["only"]) == "only"
