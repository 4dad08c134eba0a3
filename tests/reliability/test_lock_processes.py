"""The crawl lock across processes: a second process is refused and told who holds it; the lock
of a killed process is free. Within one process: tests/unit/test_lock.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from crawler.base.errors import LockHeld
from crawler.crawl.lock import CrawlLock, read_holder

# A child process that takes the lock, says so, and holds it until stdin closes or it is killed.
_HOLDER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from crawler.crawl.lock import CrawlLock
    lock = CrawlLock(Path(sys.argv[1]), command="quants schedule")
    lock.acquire()
    print("locked", flush=True)
    sys.stdin.read()
    lock.release()
    print("released", flush=True)
    """
)


def _start_holder(path: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "locked"
    return proc


def test_lock_contention_between_two_processes(tmp_path: Path) -> None:
    path = tmp_path / "c.lock"
    proc = _start_holder(path)
    try:
        with pytest.raises(LockHeld) as info:
            CrawlLock(path, command="quants crawl").acquire()
        message = str(info.value)
        assert f"pid {proc.pid}" in message
        assert "quants schedule" in message
        holder = read_holder(path)
        assert holder is not None and holder.pid == proc.pid and holder.started_at
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "released"
        assert proc.wait(timeout=10) == 0
    with CrawlLock(path, command="quants crawl") as lock:
        assert lock.held


def test_lock_of_a_killed_process_is_free(tmp_path: Path) -> None:
    path = tmp_path / "c.lock"
    proc = _start_holder(path)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    # The dead holder's record is still in the file, but the OS dropped its flock.
    stale = read_holder(path)
    assert stale is not None and stale.pid == proc.pid
    with CrawlLock(path, command="quants crawl"):
        holder = read_holder(path)
        assert holder is not None and holder.pid == os.getpid()
