"""``quants db upgrade|current``: create or migrate the catalog schema."""

from __future__ import annotations

import typer

from crawler.cli._app import app
from crawler.cli._options import DbOpt

db_app = typer.Typer(help="Create or migrate the catalog database.", no_args_is_help=True)
app.add_typer(db_app, name="db")


@db_app.command("upgrade")
def upgrade(db: DbOpt = None) -> None:
    """Apply pending migrations (the catalog is also upgraded automatically on first use)."""
    from crawler.base.config import Settings
    from crawler.catalog import redact_url
    from crawler.cli._output import safe_text
    from crawler.crawl.catalogs import open_catalog

    url = Settings.from_env().replace(db_url=db).resolved_db_url
    with open_catalog(url) as catalog:
        typer.echo(f"{safe_text(redact_url(url))}: at revision {catalog.current_revision()}")


@db_app.command("current")
def current(db: DbOpt = None) -> None:
    """Print the catalog's schema revision and the one this quants needs (changes nothing)."""
    from crawler.base.config import Settings
    from crawler.crawl.catalogs import open_catalog

    url = Settings.from_env().replace(db_url=db).resolved_db_url
    with open_catalog(url, upgrade=False, check=False) as catalog:
        typer.echo(f"current: {catalog.current_revision() or 'empty'}")
        typer.echo(f"head:    {catalog.head_revision()}")
