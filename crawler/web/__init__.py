"""``quants serve``: a local, read-only web app over the catalog (search, model, quant, scans).

A thin layer over the library calls the CLI makes (crawler.web.views), with server-side
SVG charts (crawler.charts) and no third-party script: every file it serves ships in this
package (``templates/``, ``static/``). Imported only by ``quants serve``, so the other commands
never pay for Starlette and Jinja2.
"""

from __future__ import annotations

from crawler.web.app import create_app

__all__ = ["create_app"]
