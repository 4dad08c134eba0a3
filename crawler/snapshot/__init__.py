"""Catalog snapshots: versioned Parquet files + ``manifest.json``, shared through a Hub dataset.

manifest (pure) defines the files and columns; .export writes a
snapshot, .import_ merges one into a catalog in one transaction, .hubsync
publishes a snapshot to a Hub dataset repo and pulls one back. docs/snapshots.md documents the
format column by column.
"""
