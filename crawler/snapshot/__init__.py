"""Catalog snapshots: versioned Parquet files + manifest.json, shared through a Hub dataset.

manifest defines the format; export, import_ and hubsync write, merge, publish and pull.
Details: docs/internals/snapshot.md
"""
