"""quants serve: a local, read-only web app over the catalog (search, model, quant, scans).

A thin layer over the CLI's library calls, with no third-party script; only quants serve imports it.
Details: docs/internals/web.md#overview
"""

from __future__ import annotations

from crawler.web.app import create_app

__all__ = ["create_app"]
