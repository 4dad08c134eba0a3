"""``quants reprofile``: recompute profiles and memory models from stored headers (no network)."""

from __future__ import annotations

import typer

from crawler.cli._app import app
from crawler.cli._options import DbOpt, JsonOpt


@app.command("reprofile")
def reprofile_command(as_json: JsonOpt = False, db: DbOpt = None) -> None:
    """Recompute every quant's profile and memory model from the stored tensor tables.

    Run it after upgrading quants: verdicts follow the new rules without touching the Hub.
    """
    from crawler.base.config import Settings
    from crawler.cli._output import print_json, safe_text
    from crawler.crawl.catalogs import open_catalog
    from crawler.crawl.lock import crawl_lock
    from crawler.crawl.reprofile import reprofile

    settings = Settings.from_env().replace(db_url=db)
    # A crawl writing the same rows at the same time would race with us: share its lock.
    with (
        crawl_lock(settings, command="quants reprofile"),
        open_catalog(settings.resolved_db_url) as catalog,
    ):
        summary = reprofile(catalog)
    if as_json:
        from crawler.schemas import versioned

        print_json(versioned(summary.to_json()))
        return
    typer.echo(f"quants    {summary.quants}")
    typer.echo(f"changed   {summary.changed}")
    typer.echo(f"failed    {summary.failed}")
    for name in summary.changed_quants:
        typer.echo(f"  changed: {safe_text(name)}")
