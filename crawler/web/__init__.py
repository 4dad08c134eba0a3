"""quants serve: a local, read-only web app over the catalog (search, model, quant, scans).

May import: base, fit, profile, ranking, charts, catalog, library.
Details: docs/internals/web.md#overview
"""

from __future__ import annotations

from crawler.web.app import create_app

__all__ = ["create_app"]
