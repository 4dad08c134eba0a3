"""``python -m crawler`` runs the ``quants`` CLI."""

from crawler.cli import main

main()
