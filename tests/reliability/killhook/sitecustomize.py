"""Test harness for tests/reliability/test_crash_safety.py: SIGKILL a ``quants`` process at the
Nth catalog write statement or the Nth commit (put this folder on PYTHONPATH and set
``QUANTS_TEST_KILL_AT``). Python imports ``sitecustomize`` at start-up; nothing here runs unless
the variable is set.

``stmt:N``   kill just before the Nth statement that is not a SELECT (DDL of the migrations,
             INSERT/UPDATE/DELETE of a crawl): inside a transaction, between its statements.
``commit:N`` kill when the Nth transaction is about to commit: every write sent, none committed.
``count:PATH`` kill nothing; write {"stmt": n, "commit": n} to PATH at exit.
"""

from __future__ import annotations

import os

_SPEC = os.environ.get("QUANTS_TEST_KILL_AT", "")

if _SPEC:
    import atexit
    import json
    import signal
    import threading

    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    _kind, _, _arg = _SPEC.partition(":")
    _counts = {"stmt": 0, "commit": 0}
    _lock = threading.Lock()

    def _hit(what: str) -> None:
        with _lock:
            _counts[what] += 1
            n = _counts[what]
        if _kind == what and n == int(_arg):
            os.kill(os.getpid(), signal.SIGKILL)

    @event.listens_for(Engine, "before_cursor_execute")
    def _statement(conn, cursor, statement, parameters, context, executemany):  # type: ignore[no-untyped-def]
        if not statement.lstrip().upper().startswith(("SELECT", "PRAGMA", "SHOW", "WITH")):
            _hit("stmt")

    @event.listens_for(Engine, "commit")
    def _commit(conn):  # type: ignore[no-untyped-def]
        _hit("commit")

    if _kind == "count":

        def _write() -> None:
            with open(_arg, "w", encoding="utf-8") as fh:
                json.dump(_counts, fh)

        atexit.register(_write)
