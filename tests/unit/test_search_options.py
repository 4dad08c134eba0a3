"""What `quants watch add NAME -- ARGV` stores: the options ARGV gives `quants search`, by name,
parsed by the search command's own parser (in-process), and shown back as flags."""

from __future__ import annotations

import pytest

from crawler.base.errors import UsageError
from crawler.cli.search_cmd import options_argv, request_from_argv, search_options
from crawler.library.search_request import checked_request


def test_only_the_given_options_are_kept_by_name():
    argv = ["qwen3.6 27b", "--vram", "24G", "-c", "256k", "-ctk", "q8_0", "--no-mtp", "--json"]
    assert search_options(argv) == {
        "query": "qwen3.6 27b",
        "vram": 24.0,
        "ctx": 262144,
        "cache_type_k": "q8_0",
        "mtp": False,
    }  # --json is output, not part of the search
    assert search_options(["--gpu", "rtx 3090", "--gpu", "rtx 4090", "--mmproj"]) == {
        "gpu": ["rtx 3090", "rtx 4090"],
        "vision": True,
    }


@pytest.mark.parametrize(
    "argv",
    [
        ["qwen", "--vram", "24", "--ctx", "4096", "--mtp"],
        ["--gpu", "2x 3090", "-np", "-1", "-ub", "256", "-ts", "3,1", "-fa", "off"],
        ["--vram", "8", "-ngl", "auto", "--mmproj", "--n-cpu-moe", "4", "--no-mtp"],
        ["--vram", "12", "--cpu-moe", "--ram", "64", "--sort", "speed", "--gpu", "rtx 3060 12 gb"],
    ],
)
def test_stored_options_show_as_flags_that_give_them_back(argv):
    options = search_options(argv)
    shown = options_argv(options)
    assert search_options(shown) == options
    assert checked_request(options, headroom_gib=0.5) == request_from_argv(
        [*argv, "--headroom", "0.5"]
    )


def test_a_bad_option_is_a_usage_error_naming_it():
    with pytest.raises(UsageError, match="--fast"):
        search_options(["--vram", "24", "--fast"])
    with pytest.raises(UsageError, match="search options"):
        search_options(["--vram"])
