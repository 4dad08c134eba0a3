"""``quants scans``: the history of crawl passes, newest first."""

from __future__ import annotations

from typing import Annotated

import typer

from crawler.cli._app import app
from crawler.cli._options import DbOpt, JsonOpt


@app.command()
def scans(
    limit: Annotated[int, typer.Option("--limit", min=1, help="At most this many scans.")] = 20,
    as_json: JsonOpt = False,
    db: DbOpt = None,
) -> None:
    """List crawl passes: start, end, duration, status, repos, files, requests, bytes, errors."""
    from crawler.base.config import Settings
    from crawler.catalog.history import iso_utc, list_scans
    from crawler.cli._output import format_table, human_bytes, print_json
    from crawler.crawl.catalogs import open_catalog

    settings = Settings.from_env().replace(db_url=db)
    with open_catalog(settings.resolved_db_url) as catalog:
        records = list_scans(catalog, limit=limit)
    if as_json:
        print_json([r.to_json() for r in records])
        return
    if not records:
        typer.echo("no scans yet: run `quants crawl` or `quants schedule`", err=True)
        return
    columns = [
        "id",
        "started",
        "duration",
        "status",
        "trigger",
        "seen",
        "new",
        "changed",
        "files",
        "requests",
        "bytes",
        "errors",
    ]
    rows = [
        [
            r.id,
            (iso_utc(r.started_at) or "").replace("T", " "),
            "-" if r.duration_s is None else f"{r.duration_s:.0f} s",
            r.status,
            r.trigger,
            r.repos_seen,
            r.repos_new,
            r.repos_changed,
            r.files_analysed,
            r.requests,
            human_bytes(r.bytes_fetched),
            r.errors,
        ]
        for r in records
    ]
    right = ["id", "duration", "seen", "new", "changed", "files", "requests", "bytes", "errors"]
    typer.echo(format_table(columns, rows, align_right=right))
