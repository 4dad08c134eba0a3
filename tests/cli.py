"""Run the real ``quants`` CLI (``python -m crawler``) in a process of its own with a clean
environment (forked by tests/cli_fork.py where that runs it as a plain process would)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from tests import cli_fork

ROOT = Path(__file__).resolve().parents[1]


def outside_env() -> dict[str, str]:
    """This process's environment less the QUANTS_*/HF_* settings a test gives each call."""
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("QUANTS_", "HF_")) and k != "HUGGING_FACE_HUB_TOKEN"
    }


def clean_env(tmp: Path, **extra: str) -> dict[str, str]:
    """The environment minus QUANTS_*/HF_* settings, with a private data dir and HF home.

    Telemetry stays off: huggingface_hub would otherwise reach out to huggingface.co. Retries
    wait 10 ms, 20 ms, ... instead of 1, 2, 4, 8, 8 s (QUANTS_BACKOFF), so a test of a failing Hub
    does not sleep; ``extra`` may set it back.
    """
    env = outside_env()
    env.update(
        QUANTS_DATA_DIR=str(tmp / "data"),
        HF_HOME=str(tmp / "hf-home"),
        HF_HUB_DISABLE_TELEMETRY="1",
        QUANTS_BACKOFF="0.01",
    )
    env.update(extra)
    return env


def _fork_server(env: dict[str, str], cwd: Path) -> cli_fork.ForkServer | None:
    """The fork server where it runs this call as a plain process would, else None."""
    fork = cli_fork.server(ROOT, outside_env())
    return fork if fork is not None and fork.forkable(env, cwd) else None


def start_quants(
    *args: str, env: dict[str, str], cwd: Path = ROOT
) -> subprocess.Popen[str] | cli_fork.ForkedProcess:
    """Start ``quants ARGS`` without waiting (for signal and kill tests), its output piped."""
    fork = _fork_server(env, cwd)
    if fork is not None:
        pipe = subprocess.PIPE
        return fork.start(list(args), env=env, cwd=cwd, stdout=pipe, stderr=pipe)
    return subprocess.Popen(
        [sys.executable, "-m", "crawler", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=cwd,
    )


class KillLater:
    """SIGKILL for a process started after the fault that calls it was set: the fault may fire
    (in the emulator's thread) before the test holds the new process's pid."""

    def __init__(self) -> None:
        self._pid = 0
        self._started = threading.Event()

    def started(self, pid: int) -> None:
        self._pid = pid
        self._started.set()

    def __call__(self) -> None:
        assert self._started.wait(60), "the process to kill was never started"
        os.kill(self._pid, signal.SIGKILL)


def run_quants(
    *args: str, env: dict[str, str], timeout: float = 180, cwd: Path = ROOT
) -> subprocess.CompletedProcess[str]:
    """Run ``quants ARGS`` to completion and capture its output: forked from the fork server
    (tests/cli_fork.py) where that runs it as a plain process would, else a plain process."""
    fork = _fork_server(env, cwd)
    if fork is not None:
        return fork.run(list(args), env=env, cwd=cwd, timeout=timeout)
    return subprocess.run(
        [sys.executable, "-m", "crawler", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        cwd=cwd,
    )


class Cli:
    """``quants`` against one catalog (SQLite in ``tmp``) and, optionally, one Hub endpoint."""

    def __init__(self, tmp: Path, *, endpoint: str | None = None, **extra: str) -> None:
        self.db = tmp / "catalog.sqlite"
        self.data = tmp / "data"
        settings = {"QUANTS_DB": f"sqlite:///{self.db}", "QUANTS_TIMEOUT": "10", **extra}
        if endpoint:
            settings["QUANTS_HF_ENDPOINT"] = endpoint
        self.env = clean_env(tmp, **settings)

    def run(self, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
        out = run_quants(*args, env=self.env)
        if ok:
            assert out.returncode == 0, out.stderr
        return out

    def json(self, *args: str) -> Any:
        """``quants ARGS --json``, validated against the command's schema when it has one."""
        from crawler.schemas import SCHEMA_NAMES
        from tests.schemas import checked

        text = self.run(*args, "--json").stdout
        return checked(args[0], text) if args[0] in SCHEMA_NAMES else json.loads(text)
