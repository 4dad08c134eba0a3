"""The base every layer may import: settings, errors, units, the budget rule, shared helpers.

May import: base.
Details: docs/internals/base.md
"""
