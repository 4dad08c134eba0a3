"""The CLI's messages, in process (crawler.cli.main, the function ``quants`` runs): hints chosen by
error type, the traceback hint only for unexpected errors, "no such file", ``--version``, a
summary that counts what fit, the amounts people type, and every option checked before the Hub.

The catalog is bench/bench_search_hub.py's synthetic one (a few hundred real-shaped quants).
"""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from typing import Any

import pytest

from bench.bench_search_hub import build
from crawler.base.units import CTX_FORMS, MEMORY_FORMS
from crawler.cli import main

#: Nothing listens on port 9 (discard) here: a request there fails with "cannot reach the Hub".
CLOSED = "http://127.0.0.1:9"
DEBUG_HINT = "QUANTS_DEBUG=1"


@pytest.fixture(scope="module")
def catalog(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('cli-errors') / 'catalog.sqlite'}"
    build(url, 200)
    return url


@pytest.fixture
def connects(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[Any]:
    """A clean environment aimed at a closed port; every outgoing connect is recorded (and then
    made, so it fails as it would)."""
    for name in ("QUANTS_DB", "QUANTS_OFFLINE", "QUANTS_DEBUG", "QUANTS_HEADROOM", "HF_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("QUANTS_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("QUANTS_HF_ENDPOINT", CLOSED)
    monkeypatch.setenv("QUANTS_RETRIES", "0")
    seen: list[Any] = []
    real = socket.socket.connect

    def connect(self: socket.socket, address: Any) -> None:
        seen.append(address)
        real(self, address)

    monkeypatch.setattr(socket.socket, "connect", connect)
    return seen


def quants(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``quants ARGS`` in process: (exit code, stdout, stderr)."""
    try:
        main(list(args))
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def hints(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("hint:")]


# --- hints by error type ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "code", "error", "hint"),
    [
        (("search", "qwen 27b", "--ctx", "4096"), 2, "error: give --vram GIB or --gpu NAME",
         "hint: `quants search --help` lists the options and the forms they take"),
        (("estimate", "o/r:Q4_K_M", "-c", "4096", "--vram", "24", "--headroom", "30"), 2,
         "error: --headroom 30 GiB leaves nothing of 24.00 GiB",
         "hint: `quants estimate --help` lists the options and the forms they take"),
        (("inspect", "{tmp}/gone.gguf"), 2, "error: no such file: '{tmp}/gone.gguf'",
         "hint: check the path; a Hub file is owner/repo/path.gguf, a quant owner/repo:QUANT"),
        (("sql", "SELECT 1", "--db", "sqlite:///{tmp}/none.sqlite"), 1,
         "error: no catalog at {tmp}/none.sqlite", "hint: check --db / QUANTS_DB"),
        (("search", "qwen 27b", "--vram", "24", "--ctx", "4096"), 4,
         f"error: cannot reach the Hub at {CLOSED}",
         "hint: check the network or QUANTS_HF_ENDPOINT; --offline answers from the catalog"),
    ],
    ids=["usage", "headroom", "no-such-file", "no-catalog", "hub-unreachable"],
)  # fmt: skip
def test_an_expected_error_gets_its_types_hint_and_no_traceback_offer(
    capsys: pytest.CaptureFixture[str], connects: list[Any], tmp_path: Path,
    args: tuple[str, ...], code: int, error: str, hint: str,
) -> None:  # fmt: skip
    args = tuple(a.format(tmp=tmp_path) for a in args)
    got, _, err = quants(capsys, *args)
    assert got == code, err
    lines = err.splitlines()
    assert any(line.startswith(error.format(tmp=tmp_path)) for line in lines), err
    assert hints(err) == [hint], err
    assert DEBUG_HINT not in err and "Traceback" not in err


def test_an_unexpected_error_offers_the_traceback_and_debug_shows_it(
    capsys: pytest.CaptureFixture[str], connects: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    import crawler.api

    def broken(*args: Any, **kwargs: Any) -> Any:  # stands in for a bug in the library
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(crawler.api, "inspect", broken)
    code, _, err = quants(capsys, "inspect", "o/r:Q4_K_M")
    assert code == 1
    assert err.splitlines() == [
        "error: internal error: ZeroDivisionError: division by zero",
        "hint: this is a bug in quants; rerun with QUANTS_DEBUG=1 and report it",
    ]
    monkeypatch.setenv("QUANTS_DEBUG", "1")
    with pytest.raises(ZeroDivisionError):
        main(["inspect", "o/r:Q4_K_M"])


@pytest.mark.parametrize(
    ("args", "value"),
    [
        (("search", "x", "--vram", "24", "--tier", "moon", "--offline"), "'moon'"),
        (("search", "x", "--vram", "24", "--sort", "fastest", "--offline"), "'fastest'"),
        (("search", "x", "--vram", "24", "-ngl", "many", "--offline"), "'many'"),
        (("search", "x", "--vram", "24", "-ts", "3,x", "--offline"), "'3,x'"),
        (("search", "x", "--vram", "24x"), "'24x'"),
        (("estimate", "o/r:Q4_K_M", "-c", "256q"), "'256q'"),
        (("estimate", "o/r:Q4_K_M", "-c", "4096", "-ctk", "q9_0"), "'q9_0'"),
        (("estimate", "notarepo:Q4", "-c", "4096"), "'notarepo:Q4'"),
    ],
)
def test_a_usage_error_says_what_is_wrong_not_just_where_help_is(
    capsys: pytest.CaptureFixture[str], connects: list[Any], args: tuple[str, ...], value: str
) -> None:
    code, _, err = quants(capsys, *args)
    assert code == 2, err
    # The message repeats the value refused; a hint, if any, names the command, never COMMAND.
    errors = [line for line in err.splitlines() if line.startswith(("error:", "Error:"))]
    assert len(errors) == 1 and value in errors[0], err
    assert "COMMAND" not in err and DEBUG_HINT not in err
    assert all(f"`quants {args[0]} --help`" in h for h in hints(err)), err


def test_no_hint_is_a_bare_pointer_to_help() -> None:
    """Every hint of the table says something of its own: none is "see `quants COMMAND --help`",
    and only the internal-error hint mentions QUANTS_DEBUG."""
    from crawler.cli import _HINTS

    for name, hint in _HINTS.items():
        assert DEBUG_HINT not in hint, name
        assert not hint.startswith("see `quants"), name
        assert len(hint.split()) >= 4, name


# --- version, no such file, what fit ------------------------------------------------------------


def test_version(capsys: pytest.CaptureFixture[str], connects: list[Any]) -> None:
    from crawler import __version__

    assert quants(capsys, "--version") == (0, f"quants {__version__}\n", "")
    assert not connects


def test_no_such_file_is_said_plainly_for_every_file_argument(
    capsys: pytest.CaptureFixture[str], connects: list[Any], tmp_path: Path
) -> None:
    gone = tmp_path / "gone.gguf"
    for args in (("inspect", str(gone)), ("estimate", str(gone), "-c", "4096")):
        code, _, err = quants(capsys, *args)
        assert code == 2 and f"no such file: '{gone}'" in err, err
    assert not connects


def test_the_summary_counts_what_fit_not_what_is_shown(
    capsys: pytest.CaptureFixture[str], connects: list[Any], catalog: str
) -> None:
    args = ("search", "--vram", "24", "--ctx", "4096", "--offline", "--db", catalog)
    code, out, _ = quants(capsys, *args, "--limit", "1000", "--json")
    assert code == 0
    n = len(json.loads(out)["results"])
    assert n > 1
    code, _, err = quants(capsys, *args, "--limit", "1")
    assert code == 0
    assert f"{n} fit; showing 1 by quality" in err, err
    assert "1 of 1" not in err


# --- amounts people type ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ctx", "tokens"), [("256k", 262144), ("256K", 262144), ("262144", 262144), ("128Ki", 131072)]
)
def test_ctx_accepts_the_typed_forms(
    capsys: pytest.CaptureFixture[str], connects: list[Any], catalog: str, ctx: str, tokens: int
) -> None:
    code, out, err = quants(capsys, "search", "--vram", "24", "--ctx", ctx, "--offline",
                            "--limit", "1", "--json", "--db", catalog)  # fmt: skip
    assert code == 0, err
    assert json.loads(out)["request"]["ctx"] == tokens


@pytest.mark.parametrize("vram", ["24", "24GB", "24GiB", "24G", "24576MiB"])
def test_vram_and_ram_accept_the_typed_forms(
    capsys: pytest.CaptureFixture[str], connects: list[Any], catalog: str, vram: str
) -> None:
    code, out, err = quants(capsys, "search", "--vram", vram, "--ram", vram, "--ctx", "4096",
                            "--tier", "partial", "--offline", "--limit", "1", "--json",
                            "--db", catalog)  # fmt: skip
    assert code == 0, err
    budget = json.loads(out)["budget"]
    assert budget["vram_bytes"] == budget["ram_bytes"] == 24 * 2**30


@pytest.mark.parametrize(
    ("flag", "value", "forms"),
    [
        ("--ctx", "256 tokens", CTX_FORMS),
        ("--ctx", "\u0662\u0665\u0666k", CTX_FORMS),  # Arabic-Indic digits
        ("--vram", "24 bananas", MEMORY_FORMS),
        ("--vram", "24TB of RAM", MEMORY_FORMS),
        ("--ram", "lots", MEMORY_FORMS),
    ],
)
def test_a_refused_amount_is_repeated_with_the_accepted_forms(
    capsys: pytest.CaptureFixture[str], connects: list[Any], flag: str, value: str, forms: str
) -> None:
    args = {"--ctx": "4096", "--vram": "24", "--ram": "64"} | {flag: value}
    code, _, err = quants(capsys, "search", "x", *(x for kv in args.items() for x in kv))
    assert code == 2
    assert f"{value!r}: not a " in err and forms in err, err
    assert not connects


# --- validate, then go online -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("search", "qwen 27b", "--gpu", "rtx 9999", "--ctx", "4096"), "unknown GPU 'rtx 9999'"),
        (("search", "qwen 27b", "--ctx", "4096"), "give --vram GIB or --gpu NAME"),
        (("search", "qwen 27b", "--vram", "24", "--ctx", "99999999"), "must be between 1 and"),
        (("search", "qwen 27b", "--vram", "24", "--ram", "0.01"), "must be between 0.1 and"),
        (("search", "qwen 27b", "--vram", "24", "--headroom", "30"), "--headroom 30 GiB leaves"),
        (("search", "qwen 27b", "--vram", "24", "--limit", "0"), "--limit"),
        (("estimate", "o/r:Q4_K_M", "-c", "4096", "--gpu", "rtx 9999"), "unknown GPU 'rtx 9999'"),
        (("estimate", "o/r:Q4_K_M", "-c", "4096", "--vram", "0.4"), "--headroom 0.5 GiB leaves"),
        (("estimate", "o/r:Q4_K_M", "-c", "4096", "-ts", "1,x"), "-ts takes proportions"),
    ],
)
def test_options_are_checked_before_any_request(
    capsys: pytest.CaptureFixture[str], connects: list[Any], args: tuple[str, ...], message: str
) -> None:
    code, _, err = quants(capsys, *args)
    assert code == 2, err
    assert message in err and "Hub" not in err, err
    assert connects == []  # not one connection attempted


def test_a_combination_llama_cpp_refuses_for_every_model_is_checked_before_any_request(
    capsys: pytest.CaptureFixture[str], connects: list[Any]
) -> None:
    """A quantized V cache without flash attention: llama.cpp refuses it whatever the model, so
    it is reported before the header is fetched (exit 1, as when the header was read)."""
    from crawler import api
    from crawler.base.errors import InvalidConfig

    code, _, err = quants(capsys, "estimate", "o/r:Q4_K_M", "-c", "4096", "-ctv", "q4_0",
                          "-fa", "off")  # fmt: skip
    assert code == 1 and "a quantized V cache needs flash attention" in err, err
    assert "Hub" not in err and connects == []
    # search gives the same answer (it used to switch flash attention on behind the user's back)
    code, _, err2 = quants(capsys, "search", "qwen 27b", "--vram", "24", "-c", "4096",
                           "-ctk", "q4_0", "-ctv", "q4_0", "-fa", "off")  # fmt: skip
    assert code == 1 and err2.splitlines()[0] == err.splitlines()[0], (err, err2)
    assert connects == []
    # The draft cache of MTP (library only: the CLI keeps llama.cpp's f16 default).
    with pytest.raises(InvalidConfig, match="draft V cache needs flash attention"):
        api.estimate("o/r:Q4_K_M", ctx=4096, mtp=True, cache_type_v_draft="q8_0",
                     flash_attn="off")  # fmt: skip
    assert connects == []


def test_valid_options_do_go_online(
    capsys: pytest.CaptureFixture[str], connects: list[Any]
) -> None:
    """The counterpart: the same command with good options reaches for the (closed) Hub, so
    the checks above are what stopped the others."""
    code, _, err = quants(capsys, "search", "qwen 27b", "--vram", "24", "--ctx", "4096")
    assert code == 4 and f"cannot reach the Hub at {CLOSED}" in err, err
    assert connects


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (("search", "qwen 27b", "--vram", "24", "--ctx", "4096"),
         f"looking up 'qwen 27b' on the Hub ({CLOSED}) ..."),
        (("inspect", "o/r:Q4_K_M"), "on the Hub"),
        (("estimate", "o/r:Q4_K_M", "-c", "4096"), "on the Hub"),
        (("compare", "qwen 27b"), "on the Hub"),
    ],
)  # fmt: skip
def test_a_line_says_what_is_looked_up_before_the_first_request(
    capsys: pytest.CaptureFixture[str], connects: list[Any], monkeypatch: pytest.MonkeyPatch,
    args: tuple[str, ...], line: str,
) -> None:  # fmt: skip
    """What stderr held when the first connection was attempted: the line is there before any
    wait on the network (the real start-up before it is tests/e2e/test_one_answer_e2e.py's)."""
    said: list[str] = []
    recorded = socket.socket.connect

    def connect(self: socket.socket, address: Any) -> None:
        if not said:
            said.append(capsys.readouterr().err)
        recorded(self, address)

    monkeypatch.setattr(socket.socket, "connect", connect)
    started = time.monotonic()
    code, _, _ = quants(capsys, *args)
    assert code == 4
    assert said and line in said[0], said
    assert said[0].rstrip().endswith("...") and "error" not in said[0]
    assert time.monotonic() - started < 2
