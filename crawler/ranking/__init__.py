"""Ranking (pure: no I/O): the search's model, bounds, search columns, order and commands.

The catalog imports its types and SQL builders; nothing here imports the catalog.
Details: docs/internals/ranking.md#overview
"""
