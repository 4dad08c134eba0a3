"""Catalog snapshots: versioned Parquet files + ``manifest.json``, shared through a Hub dataset.

:mod:`~crawler.snapshot.manifest` (pure) defines the files and columns; :mod:`.export` writes a
snapshot, :mod:`.import_` merges one into a catalog in one transaction, :mod:`.hubsync`
publishes a snapshot to a Hub dataset repo and pulls one back. docs/snapshots.md documents the
format column by column.
"""
