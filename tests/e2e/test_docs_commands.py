"""Every ``quants`` command in README.md and docs/*.md runs as written, against the Hub emulator.

Commands are the lines of ``sh``/``console``/plain fenced blocks that start with ``quants`` (or
``$ quants``, or hold ``bin/quants``); ``text`` blocks are synopses, not commands. Two markers, in a
trailing comment of the line, say what a test cannot see otherwise (docs/development.md):

- ``# docs-test: exit N``: the command is documented to exit with N (default 0);
- ``# docs-test: skip (REASON)``: the command needs what a test cannot have (a server outside
  the test, a command that runs until stopped); it is listed, never silently dropped.

One emulator world holds what the commands name (the Qwen3.6-27B repos of the examples, an
``owner/repo`` with a 3-shard quant, a dataset repo to publish to); the files they name
(``server.log``, ``./model.gguf``, ``my_query.sql``) are written next to the catalog. The commands
run in document order (README first), as a reader would, each as the real CLI in a subprocess.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests import synth
from tests.cli import ROOT, clean_env, run_quants
from tests.fixtures.llamacpp.logs import render
from tests.fixtures.llamacpp.models import load_rows
from tests.fixtures.world import REAL_WORLD, FileCache, Quant, RepoSpec, populate
from tests.hub_emulator import HubEmulator

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_MARK = re.compile(r"#\s*docs-test:\s*(skip\s*\((?P<why>[^)]*)\)|exit\s+(?P<code>\d+))")
TOKEN = "hf_test_user"


@dataclass(frozen=True)
class DocCommand:
    where: str  # file:line
    argv: tuple[str, ...]
    exit_code: int
    skip: str | None


def doc_commands() -> list[DocCommand]:
    """Every command of the docs, in reading order."""
    out: list[DocCommand] = []
    for path in DOCS:
        lang: str | None = None
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if line.startswith("```"):
                lang = None if lang is not None else (line[3:].strip() or "plain")
                continue
            if lang is None or lang not in ("sh", "console", "bash", "plain"):
                continue
            text = line.strip().removeprefix("$ ")
            if not (text.startswith("quants ") or "bin/quants " in text):
                continue
            mark = _MARK.search(text)
            words = shlex.split(text, comments=True)
            if "bin/quants" in " ".join(words) and not text.startswith("quants "):
                words = words[next(i for i, w in enumerate(words) if w.endswith("bin/quants")) :]
            out.append(
                DocCommand(
                    f"{path.relative_to(ROOT)}:{n}",
                    tuple(words[1:]),
                    int(mark["code"]) if mark and mark["code"] else 0,
                    mark["why"] if mark and mark["why"] is not None else None,
                )
            )
    return out


COMMANDS = doc_commands()


def test_the_docs_have_commands_and_every_skip_says_why() -> None:
    assert len(COMMANDS) > 30
    assert any(c.where.startswith("README.md") for c in COMMANDS)
    for c in COMMANDS:
        assert c.skip is None or c.skip.strip(), c.where
    # README example 4 runs (it used to need a 17 GB local file).
    four = [c for c in COMMANDS if c.where.startswith("README.md") and c.argv[0] == "estimate"]
    assert four and all(c.skip is None and ":" in c.argv[1] for c in four)


def _world(cache: FileCache) -> list[RepoSpec]:
    real = REAL_WORLD[0]
    when = datetime(2026, 6, 3, tzinfo=UTC)
    # The README names unsloth's repo without "-MTP" too: the same files under that name.
    plain = RepoSpec("unsloth/Qwen3.6-27B-GGUF", real.files, when, card_data=real.card_data,
                     gguf_model=real.gguf_model)  # fmt: skip
    split = RepoSpec(
        "owner/repo", (Quant("sub/Model-Q4_K_M.gguf", "llama", "Q4_K_M", split=3),), when
    )
    return [real, plain, split]


@pytest.fixture(scope="module")
def docs_env(world_cache: FileCache, tmp_path_factory: pytest.TempPathFactory
             ) -> Iterator[tuple[Path, dict[str, str]]]:  # fmt: skip
    emu = HubEmulator()
    populate(emu.state, world_cache, _world(world_cache))
    tmp = tmp_path_factory.mktemp("docs")
    # The files the commands name, in the directory they run in.
    model = synth.write_gguf(tmp / "model.gguf", synth.preset("llama"), synth.q4_k_m_like())[0]
    row = next(r for r in load_rows() if r["config"]["model"] == "llama")
    (tmp / "server.log").write_text(render(row, str(model), 4))
    (tmp / "my_query.sql").write_text("SELECT repo_id, path FROM v_quants ORDER BY 1, 2\n")
    env = clean_env(
        tmp,
        QUANTS_DB=f"sqlite:///{tmp / 'catalog.sqlite'}",
        QUANTS_HF_ENDPOINT="",
        QUANTS_TIMEOUT="10",
        HF_TOKEN=TOKEN,
        HF_HUB_DISABLE_XET="1",  # the emulator speaks LFS, not Xet (huggingface_hub constants)
        PYTHONPATH=str(ROOT),
    )
    with emu:
        env["QUANTS_HF_ENDPOINT"] = emu.endpoint
        yield tmp, env


class DocRunner:
    """Runs the docs' commands in document order, each once, and keeps what each did: a test of
    command N first runs the commands before it that this worker has not run (pytest-xdist may
    give a worker any subset), since later commands use what earlier ones made (the crawled
    catalog, a watch, an exported snapshot)."""

    def __init__(self, cwd: Path, env: dict[str, str]) -> None:
        self.cwd, self.env = cwd, env
        self.next = 0  # the first command not run yet
        self.done: dict[int, subprocess.CompletedProcess[str]] = {}

    def run_through(self, index: int) -> subprocess.CompletedProcess[str]:
        while self.next <= index:
            if COMMANDS[self.next].skip is None:
                self.done[self.next] = run_quants(
                    *COMMANDS[self.next].argv, env=self.env, cwd=self.cwd, timeout=240
                )
            self.next += 1
        return self.done[index]


@pytest.fixture(scope="module")
def doc_runner(docs_env: tuple[Path, dict[str, str]]) -> DocRunner:
    return DocRunner(*docs_env)


@pytest.mark.parametrize("index", range(len(COMMANDS)), ids=[c.where for c in COMMANDS])
def test_docs_command_exits_as_the_docs_say(doc_runner: DocRunner, index: int) -> None:
    """One command of the docs, after the ones before it (as a reader runs them)."""
    command = COMMANDS[index]
    if command.skip is not None:
        pytest.skip(f"marked in the docs: {command.skip}")
    out = doc_runner.run_through(index)
    assert out.returncode == command.exit_code, (
        f"quants {shlex.join(command.argv)} -> {out.returncode} (docs: {command.exit_code})\n"
        + out.stderr[-1500:]
    )
    assert "Traceback" not in out.stderr
