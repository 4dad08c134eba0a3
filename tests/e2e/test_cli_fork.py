"""The tests' forked ``quants`` calls (tests/cli_fork.py) behave as plain processes do: the same
exit codes and output, each call's own environment, directory and PYTHONPATH, pipes and signals,
and a timeout that kills the call; calls a fork would not run as a plain process are not forked."""

from __future__ import annotations

import gc
import json
import os
import signal
import sqlite3
import subprocess
import sys
from subprocess import PIPE

import pytest

from crawler.catalog import Catalog
from tests import cli_fork
from tests.cli import ROOT, clean_env, outside_env


def _plain(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "crawler", *args],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=120, check=False,
    )  # fmt: skip


def _server() -> cli_fork.ForkServer:
    if os.environ.get("QUANTS_TEST_FORK") == "0":
        pytest.skip("calls are not forked in this run (QUANTS_TEST_FORK=0)")
    fork = cli_fork.server(ROOT, outside_env())
    assert fork is not None  # the suite's calls are forked on this machine
    return fork


def test_a_forked_call_answers_as_a_plain_process_does(tmp_path, sqlite_url):
    with Catalog.open(sqlite_url):
        pass
    env = clean_env(tmp_path, QUANTS_DB=sqlite_url)
    fork = _server()
    assert fork.forkable(env)
    for args in (
        ["--version"],
        ["sql", "SELECT COUNT(*) AS n FROM quants", "--json"],
        ["sql", "DELETE FROM quants"],  # refused: read-only
        ["search", "--vram", "24", "--ctx", "4096", "--offline"],  # nothing fits: exit 3
        ["search", "--vram", "lots"],  # a usage error: exit 2
    ):
        plain, forked = _plain(args, env), fork.run(args, env=env, cwd=ROOT, timeout=120)
        assert (forked.returncode, forked.stdout, forked.stderr) == (
            plain.returncode,
            plain.stdout,
            plain.stderr,
        ), args
        assert forked.args == plain.args


def test_each_forked_call_reads_its_own_environment(tmp_path):
    fork = _server()
    errors = []
    for name in ("one", "two"):
        env = clean_env(tmp_path, QUANTS_DB=f"sqlite:///{tmp_path / name}.sqlite")
        out = fork.run(["sql", "SELECT 1"], env=env, cwd=ROOT, timeout=120)
        assert out.returncode == 1
        errors.append(out.stderr)
    assert f"{tmp_path / 'one'}.sqlite" in errors[0] and "two" not in errors[0]
    assert f"{tmp_path / 'two'}.sqlite" in errors[1]
    # A variable the server's imports might read is not forked: the caller starts a process.
    assert not fork.forkable({**clean_env(tmp_path), "TERMINAL_WIDTH": "20"})


def test_a_forked_call_past_its_timeout_is_killed(tmp_path, sqlite_url):
    with Catalog.open(sqlite_url):
        pass
    env = clean_env(tmp_path, QUANTS_DB=sqlite_url)
    fork = _server()
    with pytest.raises(subprocess.TimeoutExpired):  # serve runs until stopped
        fork.run(["serve", "--port", "0"], env=env, cwd=ROOT, timeout=3)
    # The server still answers.
    assert fork.run(["--version"], env=env, cwd=ROOT, timeout=60).returncode == 0


def test_a_started_call_pipes_its_output_and_takes_signals(tmp_path, sqlite_url):
    with Catalog.open(sqlite_url):
        pass
    env = clean_env(tmp_path, QUANTS_DB=sqlite_url)
    fork = _server()
    done = fork.start(["--version"], env=env, cwd=ROOT, stdout=PIPE, stderr=PIPE)
    out, err = done.communicate(timeout=60)
    assert (done.returncode, out, err) == (0, _plain(["--version"], env).stdout, "")
    serving = fork.start(["serve", "--port", "0"], env=env, cwd=ROOT, stdout=PIPE, stderr=PIPE)
    assert serving.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        serving.wait(1)
    serving.send_signal(signal.SIGTERM)
    assert serving.wait(30) == _plain_exit(["serve", "--port", "0"], env, signal.SIGTERM)
    killed = fork.start(["serve", "--port", "0"], env=env, cwd=ROOT, stdout=PIPE, stderr=PIPE)
    os.kill(killed.pid, signal.SIGKILL)  # as the kill tests do, by pid
    killed.communicate(timeout=30)
    assert killed.returncode == -signal.SIGKILL


def _plain_exit(args: list[str], env: dict[str, str], sig: int) -> int:
    """The exit code of a plain ``quants ARGS`` sent ``sig`` once it is up."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "crawler", *args], env=env, cwd=ROOT, stdout=PIPE, stderr=PIPE,
        text=True,
    )  # fmt: skip
    assert proc.stderr is not None
    proc.stderr.readline()  # it says where it listens once it is up
    proc.send_signal(sig)
    proc.communicate(timeout=30)
    return proc.returncode


def test_a_call_in_another_directory_sees_it_and_its_python_path(tmp_path, sqlite_url):
    """As the docs' commands run: in the catalog's directory, the checkout on PYTHONPATH."""
    with Catalog.open(sqlite_url):
        pass
    (tmp_path / "q.sql").write_text("SELECT COUNT(*) AS n FROM quants\n")
    env = clean_env(tmp_path, QUANTS_DB=sqlite_url, PYTHONPATH=str(ROOT))
    fork = _server()
    assert fork.forkable(env, tmp_path)
    forked = fork.run(["sql", "q.sql", "--csv"], env=env, cwd=tmp_path, timeout=60)
    plain = subprocess.run(
        [sys.executable, "-m", "crawler", "sql", "q.sql", "--csv"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60, check=False,
    )  # fmt: skip
    assert (forked.returncode, forked.stdout) == (plain.returncode, plain.stdout) == (0, "n\n0\n")
    # Where the call would import another crawler (or none), it is not forked.
    assert not fork.forkable(clean_env(tmp_path), tmp_path)
    other = tmp_path / "other"
    (other / "crawler").mkdir(parents=True)
    (other / "crawler" / "__init__.py").write_text("")
    assert not fork.forkable({**env, "PYTHONPATH": str(other)}, tmp_path)
    # Nor where PYTHONPATH holds a start-up hook (the interpreter's start, which a fork skips).
    (other / "sitecustomize.py").write_text("")
    assert not fork.forkable({**env, "PYTHONPATH": f"{other}:{ROOT}"}, tmp_path)
    assert fork.forkable({**env, "PYTHONPATH": f"{other / 'crawler'}:{ROOT}"}, tmp_path)


class _Finalized:
    def __del__(self) -> None:
        pass


def test_a_call_ends_without_the_teardown_only_where_the_teardown_has_nothing_to_do(tmp_path):
    """A forked call skips the teardown of the server's modules (cli_fork._exit_clean) only when
    ``leftovers`` is empty: what the call left open (a file's buffer, an SQLite connection, an
    object with a finalizer) makes it end with the interpreter's normal exit."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # a process with the server's objects frozen, as a forked call's are
        code = 1
        try:
            gc.freeze()
            before = cli_fork.leftovers()
            f = open(tmp_path / "left.txt", "w")  # noqa: SIM115 - left open on purpose
            f.write("buffered")
            con, obj = sqlite3.connect(":memory:"), _Finalized()
            left = cli_fork.leftovers()
            found = [any(o is x for o in left) for x in (f, con, obj)]
            del left
            f.close()
            con.close()
            del f, con, obj
            gc.collect()
            after = cli_fork.leftovers()
            os.write(write, json.dumps([len(before), found, len(after)]).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read) as pipe:
        report = json.loads(pipe.read())
    assert os.waitpid(pid, 0)[1] == 0
    assert report == [0, [True, True, True], 0]
    assert (tmp_path / "left.txt").read_text() == "buffered"
