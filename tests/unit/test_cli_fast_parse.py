"""``quants search`` parses its argv without typer (crawler.cli._argv): for every argv below it
gives exactly the values typer calls the command with, or leaves the argv to typer, whose error
``quants`` then prints; and the command prints the same either way (in-process, against typer).
The catalog is bench/bench_search_hub.py's synthetic one."""

from __future__ import annotations

import errno
import functools
import math
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
import typer.main
from typer._click.exceptions import ClickException

from bench.bench_search_hub import build
from crawler import cli
from crawler.cli import _argv, main
from crawler.cli._app import typer_callback
from crawler.cli._output import echo
from crawler.cli.search_cmd import search

# Parsed without typer: each must give typer's values exactly. Together with TYPER_ONLY they
# use every flag of the command (test_the_tables_use_every_flag).
FAST: list[list[str]] = [
    [],
    ["qwen 27b"],
    ["--vram", "24"],
    ["--vram", "24GB", "--ctx", "256k"],
    ["--vram=24GiB", "--ctx=32768"],
    ["--vram", "24576MiB", "-c", "1M"],
    ["--vram", ".5", "-c", "256Ki"],
    ["--vram", "24", "--vram", "12"],  # given twice: the last
    ["--gpu", "rtx 4090"],
    ["--gpu", "rtx 3090", "--gpu", "rtx 4090", "--gpu=2x a100"],
    ["--headroom", "0"],
    ["--headroom", "1.5G"],
    ["-ctk", "q8_0", "-ctv", "q4_0"],
    ["--cache-type-k", "f16", "--cache-type-v", "bf16"],
    ["--auto-cache"],
    ["--mtp"],
    ["--no-mtp"],
    ["--mtp", "--no-mtp"],
    ["--spec-draft-n-max", "0"],
    ["--spec-draft-n-max", "5"],
    ["--mtp-acceptance", "0.5"],
    ["--mtp-acceptance", "1"],
    ["--mtp-acceptance", "0"],
    ["--mtp-acceptance", "1.5"],  # read as typer reads it; the search request refuses it
    ["--mtp-acceptance", "-0.1"],
    ["--min-attn-bits", "6"],
    ["--min-attn-bits", "-2.25"],
    ["--arch", "qwen3", "--author", "unsloth", "--base", "Qwen/Qwen3-8B", "--label", "Q4_K_M"],
    ["--loadable"],
    ["--cpu-moe", "--ram", "64GB"],
    ["--n-cpu-moe", "0"],
    ["--n-cpu-moe", "12"],
    ["-ngl", "auto"],
    ["--n-gpu-layers", "40"],
    ["--gpu-layers", "all"],
    ["-fa", "off"],
    ["--flash-attn", "auto"],
    ["-np", "-1"],
    ["--parallel", "4"],
    ["-ub", "1"],
    ["--ubatch-size", "256"],
    ["--ubatch", "2048"],
    ["-ts", "3,1"],
    ["--tensor-split", "1,1"],
    ["--vision"],
    ["--mmproj"],
    ["--no-mmproj"],
    ["--vision", "--no-mmproj"],
    ["--tier", "partial"],
    ["--sort", "speed"],
    ["--limit", "1"],
    ["--limit", "500"],
    ["--json"],
    ["--db", "sqlite:///x.sqlite"],
    ["--offline"],
    ["--emit", "llama-swap", "--out", "swap.yaml"],
    ["--emit", "ollama", "--out", "dir/"],
    ["--out", "/tmp/x y"],
    # a value that looks like an option is still the value, as click reads it
    ["--arch", "--json"],
    ["--flash-attn", "--offline"],
    ["-"],
    [""],
    ["--arch=", "--label", ""],
    ["ünïcode", "--label", "Q4_K_M"],
    ["x", "--vram", "24", "--gpu", "rtx 4090", "--offline", "--json", "--limit", "3"],
]

# Left to typer: an error (its message is what `quants` prints), or a form this parser does not
# read (it must then not guess).
TYPER_ONLY: list[list[str]] = [
    ["--help"],
    ["--vram", "24", "--help"],
    ["--vram", "24x"],
    ["--vram", "0"],
    ["--vram"],
    ["--vrma", "24"],
    ["--ctx", "256q"],
    ["--ctx", "0"],
    ["--ctx", "1.5"],
    ["-c256k"],
    ["-c=256k"],
    ["-ctk=q8_0"],
    ["--headroom", "2000"],
    ["--limit", "0"],
    ["--limit", "x"],
    ["--limit", "1_000"],
    ["--limit", " 3"],
    ["--limit", "1e3"],
    ["--limit", "3.0"],
    ["--parallel", "-2"],
    ["--n-cpu-moe", "-1"],
    ["--ubatch", "0"],
    ["--spec-draft-n-max", "-1"],
    ["--mtp-acceptance", "nan"],
    ["--min-attn-bits", "inf"],
    ["--min-attn-bits", "1e1"],
    ["--min-attn-bits", ".5"],
    ["--json=1"],
    ["--json", "--no-json"],
    ["--no-vision"],
    ["--no-auto-cache"],
    ["--mmproj=yes"],
    ["a", "b"],
    ["--", "--x"],
    ["-5"],
    ["-h"],
    ["--version"],
    ["--out", ""],
    ["--arch", "bad\udcff"],
    ["bad\udcff"],
    ["--ram"],
    ["--gpu"],
    ["--vram="],
    ["--limit="],
]


def typer_call(argv: list[str]) -> tuple[dict[str, Any] | None, tuple[str, int] | None]:
    """(the values typer calls search with, None) or (None, (its error message, exit code)):
    quants' own registration (typer_callback) of a function that records what it is given, with
    search's signature, in a group as quants is."""
    seen: dict[str, Any] = {}

    @functools.wraps(search)
    def record(**kwargs: Any) -> None:
        seen.update(kwargs)

    app = typer.Typer(add_completion=False, rich_markup_mode=None, pretty_exceptions_enable=False)
    app.callback()(lambda: None)
    app.command("search")(typer_callback(record))
    try:
        typer.main.get_command(app).main(
            args=["search", *argv], prog_name="quants", standalone_mode=False
        )
    except ClickException as exc:
        return None, (exc.format_message(), exc.exit_code)
    assert seen, argv
    return seen, None


def same(a: Any, b: Any) -> bool:
    """Equal and of the same type (24 is not 24.0), lists element by element."""
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    return type(a) is type(b) and a == b


@pytest.mark.parametrize("argv", FAST, ids=lambda a: " ".join(a) or "(none)")
def test_the_fast_parser_gives_typers_values(argv: list[str]) -> None:
    want, error = typer_call(argv)
    assert error is None, error
    got = _argv.parse(search, argv)
    assert got is not None, "the fast parser left a plain argv to typer"
    assert want is not None and got.keys() == want.keys()
    differ = {k: (got[k], want[k]) for k in want if not same(got[k], want[k])}
    assert not differ


@pytest.mark.parametrize("argv", TYPER_ONLY, ids=lambda a: ascii(" ".join(a)))
def test_what_the_fast_parser_cannot_read_exactly_is_left_to_typer(
    argv: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:  # fmt: skip
    assert _argv.parse(search, argv) is None
    if "--help" in argv:
        return  # typer prints the help
    _, error = typer_call(argv)
    if error is None:
        return  # a form typer reads: left to it, nothing more to compare
    message, code = error
    # `quants search ARGV` prints typer's own error: nothing is searched before it.
    monkeypatch.setenv("QUANTS_DB", f"sqlite:///{tmp_path / 'none.sqlite'}")
    monkeypatch.setenv("QUANTS_OFFLINE", "1")
    with pytest.raises(SystemExit) as exit_:
        main(["search", *argv])
    err = capsys.readouterr().err
    assert exit_.value.code == code == 2
    assert f"Error: {message}" in err, err


def test_the_tables_use_every_flag() -> None:
    app = typer.Typer(add_completion=False)
    app.command("search")(typer_callback(search))
    command = typer.main.get_command(app)  # a one-command app: the command itself
    flags = {f for p in command.params for f in (*p.opts, *p.secondary_opts) if f.startswith("-")}
    used = {a.partition("=")[0] for argv in FAST for a in argv}
    assert len(flags) >= 40 and flags <= used, sorted(flags - used)


# --- the whole command: the same output either way ----------------------------------------------


@pytest.fixture(scope="module")
def catalog(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('fast-parse') / 'catalog.sqlite'}"
    build(url, 200)
    return url


def quants(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    """``quants ARGV`` in process: (exit code, stdout, stderr with the search's ms masked)."""
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    out = capsys.readouterr()
    return int(exit_.value.code or 0), out.out, re.sub(r"\(\d+ ms\)", "(N ms)", out.err)


@pytest.mark.parametrize(
    "argv",
    [
        ["--vram", "24"],
        ["--gpu", "rtx 4090", "--ctx", "32k", "--json"],
        ["--gpu", "2x rtx 3090", "-c", "64k", "--limit", "3", "--sort", "speed"],
        ["--vram", "24", "--cpu-moe", "--ram", "64", "--tier", "experts_cpu", "--no-mtp"],
        ["--vram", "24", "--emit", "llama-swap"],
        ["--vram", "24", "--emit", "ollama", "--out", "{tmp}/ollama"],
        ["--vram", "24", "--emit", "bogus"],
        ["--vram", "0.5"],
        ["--ctx", "4096"],
        ["qwen", "--vram", "24", "--gpu", "no such gpu"],
    ],
    ids=lambda a: " ".join(a),
)
def test_the_command_prints_what_it_prints_through_typer(
    argv: list[str], catalog: str, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:  # fmt: skip
    argv = ["search", *(a.format(tmp=tmp_path) for a in argv), "--offline", "--db", catalog]
    assert _argv.parse(search, argv[1:]) is not None
    fast = quants(capsys, argv)
    monkeypatch.setattr(cli, "_TYPER_FREE", frozenset())  # the same argv through typer
    assert quants(capsys, argv) == fast
    assert fast[0] in (0, 2, 3) and (fast[1] or fast[2])


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (KeyboardInterrupt(), 130),
        (EOFError(), 1),
        (BrokenPipeError(errno.EPIPE, "Broken pipe"), 1),  # the reader of stdout went away
    ],
    ids=["ctrl-c", "eof", "epipe"],
)
def test_an_interrupted_command_ends_as_it_ends_through_typer(
    error: BaseException, code: int, catalog: str, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    import crawler.api

    def interrupted(*args: Any, **kwargs: Any) -> Any:  # stands in for the search, stopped
        raise error

    monkeypatch.setattr(crawler.api, "search", interrupted)
    for name in ("stdout", "stderr"):  # typer wraps both after a closed pipe: put them back after
        monkeypatch.setattr(sys, name, getattr(sys, name))
    argv = ["search", "--vram", "24", "--offline", "--db", catalog]
    fast = quants(capsys, argv)
    monkeypatch.setattr(cli, "_TYPER_FREE", frozenset())
    assert quants(capsys, argv) == fast
    assert fast[0] == code


@pytest.mark.parametrize("text", ["plain", "ünïcode ✓", "", "two\nlines", "tab\there"])
@pytest.mark.parametrize(("err", "nl"), [(False, True), (True, True), (False, False)])
def test_echo_writes_what_typer_echo_writes(
    text: str, err: bool, nl: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    typer.echo(text, err=err, nl=nl)
    want = capsys.readouterr()
    echo(text, err=err, nl=nl)
    assert capsys.readouterr() == want
