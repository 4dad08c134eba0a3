"""Run every ``bench/bench_*.py`` (or the ones named on the command line) and print their tables.

``python -m bench [bench_NAME ...] [OPTIONS]``: each benchmark module has a
``main(argv: list[str]) -> None`` that prints a table to stdout; OPTIONS (the arguments that are
not benchmark names, e.g. ``bench_search --db URL``) are passed to every one named.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path


def main() -> None:
    args = sys.argv[1:]
    names = [a for a in args if a.startswith("bench_")]
    options = [a for a in args if not a.startswith("bench_")]
    for name in names or sorted(p.stem for p in Path(__file__).parent.glob("bench_*.py")):
        module = importlib.import_module(f"bench.{name.removesuffix('.py')}")
        print(f"== {module.__name__} ==", flush=True)
        module.main(options)
        print(flush=True)


if __name__ == "__main__":
    main()
