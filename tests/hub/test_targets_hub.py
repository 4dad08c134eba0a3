"""Hub targets of ``quants inspect`` / ``estimate`` (``owner/repo:QUANT``, shards, parts, sidecars)
read through crawler.library.targets.read_target from the emulated Hub. Local files and URLs: in
tests/unit/test_source.py."""

from __future__ import annotations

import pytest

from crawler.base.config import Settings
from crawler.base.errors import HubNotFound, UsageError
from crawler.library.targets import read_target


@pytest.fixture
def hub_read(shared_hub):
    from crawler.hub import HubClient

    settings = Settings(hf_endpoint=shared_hub.endpoint)
    client = HubClient(settings, sleep=lambda s: None)
    return lambda target: read_target(target, settings, hub=client)


def test_hub_quant_resolution_and_verdict_inputs(hub_read):
    from crawler.profile.build import build_profile

    read = hub_read("unsloth/Qwen3.6-27B-GGUF:UD-Q4_K_XL")
    assert read.file_name == "Qwen3.6-27B-UD-Q4_K_XL.gguf"
    assert read.revision and len(read.revision) == 40
    assert "mmproj-F16.gguf" in read.repo_files
    assert read.requests >= 1 and read.bytes_fetched >= read.header_bytes
    p = build_profile(
        read.header, file_name=read.file_name, repo_id=read.repo_id, repo_files=read.repo_files
    )
    assert p.mtp.present and p.attention_preserved


def test_hub_split_parts_and_sidecar(hub_read):
    from crawler.profile.build import build_profile

    split = hub_read("unsloth/GLM-4.5-Air-GGUF:UD-Q4_K_XL")
    assert len(split.shards) == 2 and split.shards[0].startswith("UD-Q4_K_XL/")
    parts = hub_read("mradermacher/Qwen3-30B-A3B-i1-GGUF:i1-Q6_K")
    assert parts.shards[0].endswith(".part1of2") and parts.size_bytes
    read = hub_read("ggml-org/Qwen3.6-27B-GGUF:Q4_0")
    p = build_profile(
        read.header, file_name=read.file_name, repo_id=read.repo_id, repo_files=read.repo_files
    )
    assert p.mtp.state == "sidecar"


def test_hub_unknown_quant_lists_what_exists(hub_read):
    with pytest.raises(UsageError, match="Q8_0"):
        hub_read("unsloth/Qwen3.6-27B-GGUF:IQ1_S")
    with pytest.raises(HubNotFound):
        hub_read("unsloth/Qwen3.6-27B-GGUF/nope-Q4_K_M.gguf")
