"""Run every ``bench/bench_*.py`` (or the ones named on the command line) and print their tables.

Each benchmark module has a ``main(argv: list[str]) -> None`` that prints a table to stdout.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path


def main() -> None:
    names = sys.argv[1:] or sorted(p.stem for p in Path(__file__).parent.glob("bench_*.py"))
    for name in names:
        module = importlib.import_module(f"bench.{name.removesuffix('.py')}")
        print(f"== {module.__name__} ==", flush=True)
        module.main([])
        print(flush=True)


if __name__ == "__main__":
    main()
