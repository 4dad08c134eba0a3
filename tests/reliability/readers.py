"""A reader process for tests/reliability/test_concurrency.py: runs ``quants search`` or
``quants sql`` in a loop (the real ``crawler.cli.main``, imported once so the loop is fast) until a
stop file appears, and writes every call's exit code, stdout and stderr as JSON lines.

    python -m tests.reliability.readers search|sql DB_URL OUT.jsonl STOP_FILE
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import time
from pathlib import Path

#: One statement, so one snapshot: per analysed quant, its tensor groups, memory model and tensor
#: table; a quant seen without them is a torn read (they are written in its repo's transaction).
COMPLETENESS_SQL = (
    "SELECT r.repo_id, q.path,"
    " (SELECT count(*) FROM tensor_groups g WHERE g.quant_id = q.id) AS n_groups,"
    " (SELECT count(*) FROM memory_models m WHERE m.quant_id = q.id) AS n_memory,"
    " (SELECT count(*) FROM tensor_tables t WHERE t.quant_id = q.id) AS n_tables,"
    " r.scanned_sha = r.sha AS done"
    " FROM quants q JOIN repos r ON r.id = q.repo_pk WHERE q.analysed_at IS NOT NULL"
    " ORDER BY r.repo_id, q.path"
)
SEARCH_ARGS = ["--vram", "24", "--ctx", "8192", "--json", "--limit", "1000"]


def _call(argv: list[str]) -> tuple[int, str, str]:
    from crawler.cli import main

    out, err = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    return code, out.getvalue(), err.getvalue()


def run(kind: str, db: str, out_path: Path, stop: Path, max_s: float = 120.0) -> None:
    """Loop until ``stop`` exists (then once more, to read the final state)."""
    argv = (
        ["search", *SEARCH_ARGS, "--db", db]
        if kind == "search"
        else ["sql", COMPLETENESS_SQL, "--json", "--db", db]
    )
    start = time.monotonic()
    with out_path.open("w", encoding="utf-8") as fh:
        last = False
        while True:
            last = stop.exists() or time.monotonic() - start > max_s
            code, stdout, stderr = _call(argv)
            fh.write(json.dumps({"code": code, "out": stdout, "err": stderr}) + "\n")
            fh.flush()
            if last:
                break


if __name__ == "__main__":
    run(sys.argv[1], sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4]))
