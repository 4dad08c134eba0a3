"""Every printed command, run by a real shell, executes exactly the program it names.

Hostile repo ids, paths and labels (shell syntax, quotes, globs, expansions, Unicode, controls)
go through each emitter (llama-server, Ollama, LM Studio, and crawler.ranking.shell.shell_join
itself). The result runs under ``bash -c`` with PATH holding only recording shims: each shim writes
its argv (and the Ollama variables it was given) to its own file. The test then checks that the
programs ran with exactly the arguments meant, that nothing else ran or printed, and that no
file appeared. Arguments no quoting makes safe (control characters, option-looking operands)
get no command at all.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crawler.fit import RunConfig, command
from crawler.ranking.commands import (
    hf_args,
    llama_server_command,
    lmstudio_command,
    ollama_command,
)
from crawler.ranking.shell import UnsafeArgument, is_safe_argument, shell_join

BASH = "/bin/bash"
_PROGRAMS = ("llama-server", "ollama", "lms", "hf", "cat")
_ENV = ("OLLAMA_CONTEXT_LENGTH", "OLLAMA_FLASH_ATTENTION", "OLLAMA_KV_CACHE_TYPE")
_SHIM = (
    "#!/bin/sh\n"
    + "".join(f'[ -n "${{{v}+x}}" ] && E="${{E}}{v}=${v}\n"\n' for v in _ENV)
    + 'printf "%s\\0" "${0##*/}" "$@" "--env--" "$E" > "$SHIM_LOG/$$"\n'
)

PAYLOADS = [
    "evil/x$(touch${IFS}/tmp/PWNED)",
    "o/r`id`",
    "o/r'; echo PWNED; '",
    'o/r"; echo PWNED; "',
    "o/r && echo PWNED",
    "o/r || echo PWNED",
    "o/r | tee PWNED",
    "o/r > PWNED",
    "o/r;echo PWNED",
    "o/r & echo PWNED",
    "o/${HOME}",
    "o/$PATH",
    "o/r*",
    "o/?",
    "~/x",
    "o/{a,b}",
    "o/r\\",
    "o/r'\\''",
    "!!",
    "o/r#comment",
    "a=b",
    "o/r $(echo PWNED)",
    "o/r\u202eevil",
    "o/r\nrm -rf /",
    "o/r\x1b]0;PWNED\x07",
    "o/r\x00x",
    "-o/r",
    "--help",
    "",
    "o/r:Q4_K_M",
    "日本/モデル",
    "o/r\u00a0x",
]

_SHELLY = "$`'\"\\;|&<>(){}[]*?~!#= \t%^,:@+-./_"
hostile = st.one_of(
    st.sampled_from(PAYLOADS),
    st.text(alphabet=st.sampled_from(_SHELLY + "abcXYZ019"), max_size=24),
    st.text(max_size=16),
)
labels = st.one_of(st.none(), st.sampled_from(["Q4_K_M", "UD-Q4_K_XL", "IQ2_XXS"]), hostile)
configs = st.sampled_from(
    [
        RunConfig(ctx=4096),
        RunConfig(ctx=32768, type_k="q8_0", type_v="q8_0", flash_attn="on"),
        RunConfig(ctx=8192, type_k="q4_0", type_v="q4_0", flash_attn="on", parallel=2),
    ]
)
SETTINGS = settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)


def run_recorded(line: str, made: tuple[str, ...] = ()) -> list[list[str]]:
    """Run ``line`` under bash with only the shims on PATH; the argv lists the shims received.
    ``made``: the files the line may create (a redirection it means to make)."""
    with tempfile.TemporaryDirectory(prefix="quants-shim-") as tmp:
        root = Path(tmp)
        bin_, log, cwd = root / "bin", root / "log", root / "cwd"
        for d in (bin_, log, cwd):
            d.mkdir()
        for name in _PROGRAMS:
            shim = bin_ / name
            shim.write_text(_SHIM)
            shim.chmod(0o755)
        out = subprocess.run(
            [BASH, "--noprofile", "--norc", "-c", line + "\nwait"],
            env={"PATH": str(bin_), "SHIM_LOG": str(log), "HOME": str(cwd)},
            cwd=cwd,
            capture_output=True,
            timeout=20,
        )
        assert out.returncode == 0, out.stderr
        assert out.stdout == b"" and out.stderr == b"", (line, out.stdout, out.stderr)
        assert sorted(p.name for p in cwd.iterdir()) == sorted(made), line
        calls = []
        for f in log.iterdir():
            words = f.read_bytes().decode("utf-8").split("\0")[:-1]
            calls.append(words)
        return sorted(calls)


def _argv(call: list[str]) -> list[str]:
    return call[: call.index("--env--")]


def _env(call: list[str]) -> dict[str, str]:
    text = call[call.index("--env--") + 1]
    return dict(line.split("=", 1) for line in text.splitlines())


def test_the_shim_sees_a_plain_command() -> None:
    calls = run_recorded(shell_join(["lms", "get", "o/r"]))
    assert [_argv(c) for c in calls] == [["lms", "get", "o/r"]]


@pytest.mark.parametrize("payload", PAYLOADS)
def test_each_known_payload_through_shell_join(payload: str) -> None:
    try:
        line = shell_join(["lms", "get", payload], positional=(2,))
    except UnsafeArgument:
        assert not is_safe_argument(payload, positional=True)
        assert any(ord(c) < 32 or c in "\u202e" for c in payload) or payload.startswith("-")
        return
    assert [_argv(c) for c in run_recorded(line)] == [["lms", "get", payload]]


@SETTINGS
@given(repo=hostile, path=hostile, label=labels, cfg=configs, mmproj=st.booleans())
def test_llama_server_command_delivers_every_argument_intact(
    repo: str, path: str, label: str | None, cfg: RunConfig, mmproj: bool
) -> None:
    line = llama_server_command(repo, path, label, cfg, [path], mmproj=mmproj, split=(1.0, 2.5))
    args = [*hf_args(repo, path, label, [path])]
    if line is None:
        assert not all(is_safe_argument(a) for a in args)
        return
    want = shlex.split(command(cfg.replace(model_path="MODEL")))
    i = want.index("-m")
    want[i : i + 2] = [*args, *([] if mmproj else ["--no-mmproj"])]
    want += ["-ts", "1,2.5"]
    assert [_argv(c) for c in run_recorded(line)] == [want]


@SETTINGS
@given(repo=hostile, label=labels, cfg=configs)
def test_ollama_command_delivers_every_argument_intact(
    repo: str, label: str | None, cfg: RunConfig
) -> None:
    line = ollama_command(repo, label, cfg)
    if line is None:
        ok = label and cfg.type_k == cfg.type_v
        assert not ok or not is_safe_argument(f"hf.co/{repo}:{label}", positional=True)
        return
    calls = run_recorded(line)
    assert [_argv(c) for c in calls] == [
        ["ollama", "run", f"hf.co/{repo}:{label}"],
        ["ollama", "serve"],
    ]
    served = _env(calls[1])
    assert served["OLLAMA_CONTEXT_LENGTH"] == str(cfg.ctx)
    assert served.get("OLLAMA_KV_CACHE_TYPE", "f16") == cfg.type_k
    assert "OLLAMA_CONTEXT_LENGTH" not in _env(calls[0])  # the variables are the server's only


@SETTINGS
@given(repo=hostile)
def test_lmstudio_command_delivers_every_argument_intact(repo: str) -> None:
    cfg = RunConfig(ctx=16384)
    line = lmstudio_command(repo, cfg)
    if line is None:
        assert not is_safe_argument(repo, positional=True)
        return
    assert [_argv(c) for c in run_recorded(line)] == [
        ["lms", "get", repo],
        ["lms", "load", repo, "--gpu", "max", "--context-length", "16384"],
    ]


@SETTINGS
@given(argv=st.lists(hostile, min_size=1, max_size=5), value=hostile)
def test_shell_join_is_the_identity_through_bash(argv: list[str], value: str) -> None:
    try:
        line = shell_join(["lms", *argv], env={"OLLAMA_KV_CACHE_TYPE": value})
    except UnsafeArgument:
        assert not all(is_safe_argument(a) for a in [*argv, value])
        return
    calls = run_recorded(line)
    assert [_argv(c) for c in calls] == [["lms", *argv]]
    assert _env(calls[0]) == {"OLLAMA_KV_CACHE_TYPE": value}


def test_option_looking_operands_and_bad_names_are_refused() -> None:
    with pytest.raises(UnsafeArgument):
        shell_join(["lms", "get", "--force"], positional=(2,))
    with pytest.raises(UnsafeArgument):
        shell_join(["A=b", "x"])
    with pytest.raises(UnsafeArgument):
        shell_join(["lms"], env={"BAD NAME": "x"})
    assert lmstudio_command("-rf", RunConfig(ctx=4096)) is None
    assert ollama_command("o/r\x1b[2J", "Q4_K_M", RunConfig(ctx=4096)) is None


@pytest.mark.skipif(not os.path.exists(BASH), reason="needs bash")
def test_the_issue_payload_no_longer_runs() -> None:
    # The attack: a snapshot repo id that ran `touch` when its printed Ollama line was pasted.
    line = ollama_command("evil/x$(touch${IFS}/tmp/PWNED)", "Q4_K_M", RunConfig(ctx=4096))
    assert line is not None
    calls = run_recorded(line)
    assert ["ollama", "run", "hf.co/evil/x$(touch${IFS}/tmp/PWNED):Q4_K_M"] in [
        _argv(c) for c in calls
    ]


#: File-name characters a shell treats specially; no "/" or "\\", which the file naming reads as
#: folder separators (one folder level is tested apart).
_NAME = st.text(
    alphabet=st.sampled_from(_SHELLY.replace("/", "").replace("\\", "") + "abcXYZ019"), min_size=1
)


@SETTINGS
@given(repo=hostile, stem=_NAME, n=st.integers(2, 3), cfg=configs, folder=st.booleans())
def test_byte_parts_command_downloads_joins_and_runs_intact(
    repo: str, stem: str, n: int, cfg: RunConfig, folder: bool
) -> None:
    prefix = "sub/" if folder else ""
    parts = [f"{prefix}{stem}.gguf.part{i}of{n}" for i in range(1, n + 1)]
    line = llama_server_command(repo, parts[0], "Q4_K_M", cfg, parts)
    joined = f"{stem}.gguf"
    if line is None:
        assert not all(is_safe_argument(a, positional=True) for a in (repo, joined, *parts))
        return
    want = shlex.split(command(cfg.replace(model_path=joined)))
    assert [_argv(c) for c in run_recorded(line, made=(joined,))] == sorted(
        [["hf", "download", repo, *parts, "--local-dir", "."], ["cat", *parts], want]
    )
