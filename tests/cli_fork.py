"""The tests' ``quants`` processes, forked from one that has imported the CLI's modules once.

Several hundred CLI calls would spend most of their time importing (about 0.8 s a call on a slow
2-core machine). ``python -m tests.cli_fork`` imports once what reads no per-call setting at
import, and forks a process per call that runs ``python -m crawler`` as a fresh interpreter
would: its own arguments, environment, working directory, ``sys.path`` and standard streams,
huggingface_hub (which reads HF_* variables at import) imported after its environment is set,
and the interpreter's exit (its teardown of the modules skipped where nothing is left for it to
finalize: ``leftovers``). A parent per call reports the call's pid and wait status.
``forkable`` says which calls this holds for; the others start a plain process.
"""

from __future__ import annotations

import ast
import atexit
import contextlib
import gc
import importlib
import io
import json
import locale
import os
import runpy
import select
import signal
import socket
import sqlite3
import struct
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path
from typing import IO, Any

#: Libraries the crawler imports inside functions, imported ahead as well.
LIBRARIES = (
    "sqlalchemy.orm",
    "sqlalchemy.dialects.sqlite",
    "sqlalchemy.dialects.postgresql",
    "alembic.command",
    "alembic.config",
    "alembic.runtime.migration",
    "alembic.operations",
    "typer._adapters",
    "numpy",
    "gguf",
    "pyarrow",
    "pyarrow.parquet",
    "psycopg",
)

#: Modules that read per-call settings (HF_* variables) when imported: never imported ahead, nor
#: any crawler module that imports them when it is imported.
AT_CALL = ("huggingface_hub", "hf_xet")

#: The variables a call may set or change and still be forked (pytest's name of the test
#: changes from test to test; PYTHONPATH is applied to the call's sys.path).
_CALL_VARIABLES = ("QUANTS_", "HF_", "HUGGING_FACE_HUB_TOKEN", "PYTEST_CURRENT_TEST", "PYTHONPATH")

_HEADER = struct.Struct("!Q")


def importable_ahead(root: Path) -> list[str]:
    """The crawler modules whose import (their module-level imports, followed through the
    package) imports nothing in AT_CALL."""
    files = _crawler_files(root)
    direct = {name: _imports(name, path, files) for name, path in files.items()}

    def reaches_at_call(name: str) -> bool:
        seen, todo = {name}, [name]
        while todo:
            for dep in direct.get(todo.pop(), ()):
                if dep.split(".")[0] in AT_CALL:
                    return True
                if dep not in seen:
                    seen.add(dep)
                    todo.append(dep)
        return False

    return [name for name in files if not reaches_at_call(name)]


def _crawler_files(root: Path) -> dict[str, Path]:
    """The crawler's modules (but its __main__) and their files."""
    files = {_module_name(root, p): p for p in sorted((root / "crawler").rglob("*.py"))}
    files.pop("crawler.__main__", None)
    return files


def _dependencies(names: list[str]) -> list[str]:
    """The modules outside the crawler and AT_CALL that importing ``names`` imports, in the order
    they were imported. Found in a forked process: nothing of AT_CALL is imported here."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        before, code = set(sys.modules), 1
        try:
            for name in names:
                importlib.import_module(name)
            with os.fdopen(write, "w") as out:
                json.dump([m for m in sys.modules if m not in before], out)
            code = 0
        finally:  # never back into the server's code
            os._exit(code)
    os.close(write)
    with os.fdopen(read) as found:
        text = found.read()
    _, status = os.waitpid(pid, 0)
    if status != 0 or not text:
        raise RuntimeError(f"the crawler's modules did not import (wait status {status})")
    return [m for m in json.loads(text) if m.split(".")[0] not in (*AT_CALL, "crawler")]


def _module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(name: str, path: Path, files: dict[str, Path]) -> set[str]:
    """What importing ``name`` imports at once: its packages, its module-level imports (not those
    under ``if TYPE_CHECKING``), each with their packages, and a ``from`` import's submodules."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def add(module: str) -> None:
        parts = module.split(".")
        found.update(".".join(parts[: i + 1]) for i in range(len(parts)))

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.Import):
                for alias in node.names:
                    add(alias.name)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                add(base)
                for alias in node.names:
                    if f"{base}.{alias.name}" in files:
                        add(f"{base}.{alias.name}")
            elif isinstance(node, ast.If):
                if not (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"):
                    visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)
                for handler in node.handlers:
                    visit(handler.body)
                visit(node.orelse)
                visit(node.finalbody)

    visit(ast.parse(path.read_text()).body)
    add(name)  # its own packages are imported first
    found.discard(name)
    return found


def _serve(path: str) -> dict[str, Any]:
    """Accept calls until the client closes our stdin; return only in a forked call's process."""
    root = Path.cwd()
    ahead = importable_ahead(root)
    for name in (*LIBRARIES, *ahead):
        importlib.import_module(name)
    # What the other crawler modules import besides AT_CALL (huggingface_hub's HTTP stack, its
    # progress bars, YAML): most of their import time, and none of it reads HF_* variables.
    for name in _dependencies(sorted(_crawler_files(root).keys() - set(ahead))):
        with contextlib.suppress(ImportError):  # a name that is not importable on its own
            importlib.import_module(name)
    early = [name for name in AT_CALL if name in sys.modules]
    if early:
        raise RuntimeError(f"imported ahead of the calls' settings: {', '.join(early)}")
    # The imported objects out of the collector's reach: a forked process's collections and its
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
    data += _read_exactly(conn, _HEADER.size - len(data))
    request: dict[str, Any] = json.loads(_read_exactly(conn, _HEADER.unpack(data)[0]))
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


def _read_exactly(conn: socket.socket, n: int, deadline: float | None = None) -> bytes:
    """``n`` bytes of the call's connection (TimeoutError past ``deadline``)."""
    data = b""
    while len(data) < n:
        if deadline is not None:
            conn.settimeout(max(deadline - time.monotonic(), 0.001))
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise EOFError("the other end closed the call")
        data += chunk
    return data


def _become(request: dict[str, Any], base_path: list[str]) -> None:
    """Run as ``python -m crawler ARGS`` would in the call's directory and environment."""
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    # python -m: the working directory, then PYTHONPATH's entries, then the interpreter's own.
    sys.path[:] = [os.getcwd(), *_python_path(request["env"]), *base_path]
    sys.argv = ["-m", *request["args"]]
    runpy.run_module("crawler", run_name="__main__", alter_sys=True)


def _fixed(env: dict[str, str]) -> dict[str, str]:
    """The variables a forked call must share with the server."""
    return {k: v for k, v in env.items() if not k.startswith(_CALL_VARIABLES)}


def _python_path(env: dict[str, str]) -> list[str]:
    return [os.path.abspath(p) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]


class ForkedProcess:
    """A forked call, with what the tests use of ``subprocess.Popen`` in text mode: pid, args,
    returncode, stdout and stderr pipes, poll, wait, communicate and signals."""

    def __init__(self, conn: socket.socket, args: list[str], pipes: list[IO[str] | None]) -> None:
        self._conn = conn
        self.args = args
        self.stdout, self.stderr = pipes
        self.returncode: int | None = None
        self.pid = _read_word(conn, time.monotonic() + 60)
        self._readers: list[threading.Thread] = []
        self._output: list[list[str]] = [[], []]

    def poll(self) -> int | None:
        if self.returncode is None and select.select([self._conn], [], [], 0)[0]:
            self._finish(time.monotonic() + 60)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            deadline = time.monotonic() + (timeout if timeout is not None else 1e9)
            try:
                self._finish(deadline)
            except TimeoutError:
                raise subprocess.TimeoutExpired(self.args, timeout or 0) from None
        assert self.returncode is not None
        return self.returncode

    def _finish(self, deadline: float) -> None:
        self.returncode = os.waitstatus_to_exitcode(_read_word(self._conn, deadline))
        self._conn.close()

    def communicate(
        self, input: str | None = None, timeout: float | None = None
    ) -> tuple[str | None, str | None]:
        """Read both pipes to their end, then wait (as Popen.communicate does; a call after a
        timeout goes on where the first stopped)."""
        assert input is None, "forked calls read no input"
        deadline = time.monotonic() + (timeout if timeout is not None else 1e9)
        if not self._readers:
            for stream, sink in zip((self.stdout, self.stderr), self._output, strict=True):
                if stream is not None:
                    reader = threading.Thread(target=_drain, args=(stream, sink), daemon=True)
                    reader.start()
                    self._readers.append(reader)
        for reader in self._readers:
            reader.join(max(deadline - time.monotonic(), 0))
            if reader.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
        self.wait(max(deadline - time.monotonic(), 0.001))
        for stream in (self.stdout, self.stderr):
            if stream is not None:
                stream.close()
        out, err = ("".join(part) for part in self._output)
        return (
            out if self.stdout is not None else None,
            err if self.stderr is not None else None,
        )

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)


def _drain(stream: IO[str], sink: list[str]) -> None:
    sink.append(stream.read())


class ForkServer:
    """The client end: one server per test process, started on first use."""

    def __init__(self, root: Path, env: dict[str, str]) -> None:
        self.root = root
        # /tmp where it exists: a socket's path holds at most 107 bytes.
        tmp = "/tmp" if os.path.isdir("/tmp") else None
        self._dir = tempfile.mkdtemp(prefix="quants-fork-", dir=tmp)
        self.path = os.path.join(self._dir, "s")
        self._fixed = _fixed(env)
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

    def forkable(self, env: dict[str, str], cwd: Path | None = None) -> bool:
        """Whether a call with ``env`` in ``cwd`` runs as it would in a fresh process: its other
        variables are the server's, PYTHONPATH holds no start-up hook, and the crawler it
        imports is the server's."""

        if _fixed(env) != self._fixed:
            return False
        path = _python_path(env)
        # A start-up hook on PYTHONPATH runs when an interpreter starts, which a fork skips.
        hooks = ("sitecustomize.py", "usercustomize.py")
        if any(os.path.isfile(f"{p}/{hook}") for p in path for hook in hooks):
            return False
        search = [str(cwd or self.root), *path]
        found = next((p for p in search if os.path.isfile(f"{p}/crawler/__init__.py")), None)
        return found is not None and os.path.samefile(found, self.root)

    def start(
        self,
        args: list[str],
        *,
        env: dict[str, str],
        cwd: Path,
        stdout: int | IO[Any],
        stderr: int | IO[Any],
    ) -> ForkedProcess:
        """``python -m crawler ARGS``, forked; ``stdout``/``stderr`` are subprocess.PIPE
        (read from the process's streams) or files it writes to."""
        cmd = [sys.executable, "-m", "crawler", *args]
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        child_ends: list[int] = []
        pipes: list[IO[str] | None] = []
        try:
            for target in (stdout, stderr):
                if target == subprocess.PIPE:
                    read, write = os.pipe()
                    child_ends.append(write)
                    encoding = locale.getpreferredencoding(False)
                    pipes.append(open(read, encoding=encoding))  # noqa: SIM115 (kept open)
                else:
                    assert not isinstance(target, int)
                    child_ends.append(os.dup(target.fileno()))
                    pipes.append(None)
            with open(os.devnull, "rb") as null:
                conn.connect(self.path)
                body = json.dumps({"args": args, "env": env, "cwd": str(cwd)}).encode()
                socket.send_fds(conn, [_HEADER.pack(len(body))], [null.fileno(), *child_ends])
                conn.sendall(body)
        except BaseException:
            conn.close()
            for pipe in pipes:
                if pipe is not None:
                    pipe.close()
            raise
        finally:
            for fd in child_ends:
                os.close(fd)
        return ForkedProcess(conn, cmd, pipes)

    def run(
        self, args: list[str], *, env: dict[str, str], cwd: Path, timeout: float
    ) -> subprocess.CompletedProcess[str]:
        """What ``subprocess.run`` with capture_output, text and timeout returns (or raises)."""
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            proc = self.start(args, env=env, cwd=cwd, stdout=out, stderr=err)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(30)
                raise subprocess.TimeoutExpired(
                    proc.args, timeout, _text(out), _text(err)
                ) from None
            return subprocess.CompletedProcess(proc.args, proc.wait(), _text(out), _text(err))


def _read_word(conn: socket.socket, deadline: float) -> int:
    (word,) = _HEADER.unpack(_read_exactly(conn, _HEADER.size, deadline))
    return int(word)


def _text(f: IO[bytes]) -> str:
    """The captured bytes as ``subprocess`` decodes them in text mode (universal newlines)."""
    f.seek(0)
    text = f.read().decode(locale.getpreferredencoding(False))
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
            except (OSError, RuntimeError) as exc:
                _UNAVAILABLE = True
                warnings.warn(f"CLI calls run as plain processes: {exc}", stacklevel=2)
                return None
            atexit.register(_SERVER.close)
        return _SERVER


def leftovers() -> list[object]:
    """What the interpreter's teardown would still finalize with an effect a test could see:
    the call's open files (their buffers), SQLite connections (a WAL checkpoint) and objects
    with a ``__del__``. The server's own objects are frozen (gc.freeze) and not listed."""
    found: list[object] = []
    for obj in gc.get_objects():
        kind = type(obj)
        if isinstance(obj, io.IOBase):
            if not obj.closed and obj not in (sys.stdin, sys.stdout, sys.stderr):
                found.append(obj)
        elif isinstance(obj, sqlite3.Connection) or getattr(kind, "__del__", None) is not None:
            found.append(obj)
    return found


def _exit_clean(code: int) -> None:
    """End the call as the interpreter's exit would, less its teardown of every module, when
    that teardown has nothing left to do (leftovers); else return, for the normal exit.

    The teardown frees every object the server imported, and so copies nearly every page of its
    memory into the call (0.15 s of a forked call's 0.22 s on a slow machine). Before it, an
    exit joins the threads, runs the atexit functions, flushes the standard streams and collects
    the call's garbage (Python/pylifecycle.c Py_FinalizeEx), as here.
    """
    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        return  # the normal exit reports it (status 120)
    gc.collect()
    if not leftovers():
        os._exit(code)


if __name__ == "__main__":
    _base = sys.path[1 + len(_python_path(dict(os.environ))) :]
    _call = _serve(sys.argv[1])
    _code: object = 0
    try:
        _become(_call, _base)
    except SystemExit as stop:
        _code = stop.code
        if not (_code is None or isinstance(_code, int)):
            raise
    # Outside the handler: its traceback (and the frames' objects) is gone, as it is by the time
    # the interpreter's own exit runs.
    _exit_clean(int(_code or 0))
    sys.exit(_code)
