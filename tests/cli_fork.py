"""The tests' ``quants`` processes, forked from one that has imported the CLI's libraries once.

A test suite of several hundred CLI calls spends most of each in importing SQLAlchemy, Alembic,
Typer and pydantic (about 0.8 s a call on a slow 2-core machine). ``python -m tests.cli_fork``
imports those once and forks a process per call that then runs ``python -m crawler`` as a fresh
interpreter would: its own arguments, environment, working directory and standard streams, the
crawler package and huggingface_hub imported after its environment is set, and the interpreter's
normal exit. A parent per call waits for it and reports its pid and wait status.

Only libraries that read no variable a test changes are imported ahead: ``run`` forks only where
a call's environment differs from the server's in QUANTS_*, HF_* and HUGGING_FACE_HUB_TOKEN alone,
and says so (None) otherwise; the caller then starts a plain process.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import importlib
import json
import locale
import os
import runpy
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path
from typing import Any

#: Imported once by the server: the libraries a command's import spends its time in, none of
#: them reading a QUANTS_* or HF_* variable (huggingface_hub does, at import: it is not here).
PRELOAD = (
    "sqlalchemy",
    "sqlalchemy.orm",
    "sqlalchemy.dialects.sqlite",
    "sqlalchemy.dialects.postgresql",
    "alembic.command",
    "alembic.config",
    "alembic.runtime.migration",
    "alembic.operations",
    "typer",
    "click",
    "pydantic",
)

#: The variables a call may set or change and still be forked (and pytest's name of the test,
#: which changes from test to test).
_CALL_VARIABLES = ("QUANTS_", "HF_", "HUGGING_FACE_HUB_TOKEN")

_HEADER = struct.Struct("!Q")


def _serve(path: str) -> dict[str, Any]:
    """Accept calls until the client closes our stdin; return only in a forked call's process."""
    for name in PRELOAD:
        importlib.import_module(name)
    # The libraries' objects out of the collector's reach: a forked process's collections and its
    # exit (half a second on a slow machine with them) then cost what a fresh one's do.
    gc.freeze()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(128)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the per-call parents are reaped unasked
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    while True:
        ready, _, _ = select.select([listener, sys.stdin], [], [])
        if sys.stdin in ready:  # the client went away
            os._exit(0)
        conn, _ = listener.accept()
        if os.fork() == 0:
            listener.close()
            return _parent(conn)
        conn.close()


def _parent(conn: socket.socket) -> dict[str, Any]:
    """One call: fork the process that runs it, report its pid, then its wait status."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    data, fds, _flags, _addr = socket.recv_fds(conn, _HEADER.size, 3)
    while len(data) < _HEADER.size:
        data += conn.recv(_HEADER.size - len(data))
    (size,) = _HEADER.unpack(data)
    payload = b""
    while len(payload) < size:
        payload += conn.recv(size - len(payload))
    request: dict[str, Any] = json.loads(payload)
    pid = os.fork()
    if pid == 0:
        conn.close()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        return request
    for fd in fds:
        os.close(fd)
    conn.sendall(_HEADER.pack(pid))
    _, status = os.waitpid(pid, 0)
    conn.sendall(_HEADER.pack(status))
    os._exit(0)


def _run_cli(request: dict[str, Any]) -> None:
    """Become ``python -m crawler ARGS`` in the call's directory and environment."""
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = ["-m", *request["args"]]
    runpy.run_module("crawler", run_name="__main__", alter_sys=True)


class ForkServer:
    """The client end: one server per test process, started on first use."""

    def __init__(self, root: Path, env: dict[str, str]) -> None:
        # /tmp where it exists: a socket path holds at most 107 bytes.
        self._dir = tempfile.mkdtemp(
            prefix="quants-fork-", dir="/tmp" if os.path.isdir("/tmp") else None
        )
        self.path = os.path.join(self._dir, "s")
        self.env = env
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "tests.cli_fork", self.path],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=root,
            env=env,
            text=True,
        )
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline()
        if line != "ready\n":
            raise RuntimeError(f"the CLI fork server did not start: {line!r}")

    def alive(self) -> bool:
        return self._proc.poll() is None

    def close(self) -> None:
        with contextlib.suppress(OSError):
            assert self._proc.stdin is not None
            self._proc.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(timeout=5)
        with contextlib.suppress(OSError):
            os.unlink(self.path)
            os.rmdir(self._dir)

    def forkable(self, env: dict[str, str]) -> bool:
        """Whether a call with ``env`` runs as it would in a fresh process."""

        def fixed(e: dict[str, str]) -> dict[str, str]:
            return {
                k: v
                for k, v in e.items()
                if not k.startswith(_CALL_VARIABLES) and k != "PYTEST_CURRENT_TEST"
            }

        return fixed(env) == fixed(self.env)

    def run(
        self, args: list[str], *, env: dict[str, str], cwd: Path, timeout: float
    ) -> subprocess.CompletedProcess[str]:
        """``python -m crawler ARGS``, forked: what ``subprocess.run`` with capture_output,
        text and timeout returns (or raises)."""
        cmd = [sys.executable, "-m", "crawler", *args]
        deadline = time.monotonic() + timeout
        with (
            open(os.devnull, "rb") as null,
            tempfile.TemporaryFile() as out,
            tempfile.TemporaryFile() as err,
            socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn,
        ):
            conn.connect(self.path)
            body = json.dumps({"args": args, "env": env, "cwd": str(cwd)}).encode()
            socket.send_fds(
                conn, [_HEADER.pack(len(body))], [null.fileno(), out.fileno(), err.fileno()]
            )
            conn.sendall(body)
            pid = _read_word(conn, deadline)
            try:
                status = _read_word(conn, deadline)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                _read_word(conn, time.monotonic() + 30)
                raise subprocess.TimeoutExpired(cmd, timeout, _text(out), _text(err)) from None
            return subprocess.CompletedProcess(
                cmd, os.waitstatus_to_exitcode(status), _text(out), _text(err)
            )


def _read_word(conn: socket.socket, deadline: float) -> int:
    data = b""
    while len(data) < _HEADER.size:
        conn.settimeout(max(deadline - time.monotonic(), 0.001))
        chunk = conn.recv(_HEADER.size - len(data))  # TimeoutError past the deadline
        if not chunk:
            raise RuntimeError("the CLI fork server closed the call")
        data += chunk
    (word,) = _HEADER.unpack(data)
    return int(word)


def _text(f: Any) -> str:
    """The captured bytes as ``subprocess`` decodes them in text mode (universal newlines)."""
    f.seek(0)
    raw: bytes = f.read()
    text = raw.decode(locale.getpreferredencoding(False))
    return text.replace("\r\n", "\n").replace("\r", "\n")


_LOCK = threading.Lock()
_SERVER: ForkServer | None = None
_UNAVAILABLE = False


def server(root: Path, env: dict[str, str]) -> ForkServer | None:
    """This process's fork server, started (or restarted) as needed; None where calls cannot be
    forked (no fork or Unix sockets, or QUANTS_TEST_FORK=0)."""
    global _SERVER, _UNAVAILABLE
    if os.environ.get("QUANTS_TEST_FORK") == "0" or not hasattr(socket, "send_fds"):
        return None
    with _LOCK:
        if _UNAVAILABLE:
            return None
        if _SERVER is None or not _SERVER.alive():
            try:
                _SERVER = ForkServer(root, env)
            except (OSError, RuntimeError) as exc:  # e.g. a socket path too long for AF_UNIX
                _UNAVAILABLE = True
                warnings.warn(f"CLI calls run as plain processes: {exc}", stacklevel=2)
                return None
            atexit.register(_SERVER.close)
        return _SERVER


if __name__ == "__main__":
    _run_cli(_serve(sys.argv[1]))
