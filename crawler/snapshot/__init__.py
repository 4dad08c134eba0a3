"""Catalog snapshots: versioned Parquet files + manifest.json, shared through a Hub dataset.

May import: base, catalog, fit, profile (part).
Details: docs/internals/snapshot.md
"""
