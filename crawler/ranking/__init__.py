"""Ranking (pure: no I/O): the search's model, bounds, search columns, order and commands.

May import: base, fit, profile.
Details: docs/internals/ranking.md#overview
"""
