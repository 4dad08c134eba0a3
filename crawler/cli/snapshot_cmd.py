"""``quants export`` / ``import`` / ``publish`` / ``pull``: catalog snapshots (docs/snapshots.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from crawler.cli._app import DbOpt, JsonOpt, app


@app.command("export")
def export_command(
    path: Annotated[Path, typer.Argument(help="Directory to write the snapshot into.")],
    since: Annotated[
        str | None,
        typer.Option("--since", help="Only what changed since this scan id or ISO date."),
    ] = None,
    with_tensors: Annotated[
        bool, typer.Option("--with-tensors", help="Also write the raw tensor tables.")
    ] = False,
    as_json: JsonOpt = False,
    db: DbOpt = None,
) -> None:
    """Write the catalog as a snapshot: Parquet files and manifest.json."""
    from crawler.catalog import Catalog
    from crawler.cli._output import print_json
    from crawler.config import Settings
    from crawler.snapshot.export import export_snapshot, parse_since

    settings = Settings.from_env().replace(db_url=db)
    with Catalog.open(settings.resolved_db_url) as catalog:
        result = export_snapshot(
            catalog, path, since=parse_since(catalog, since), with_tensors=with_tensors
        )
    if as_json:
        print_json(result.manifest.to_json())
        return
    for name, entry in sorted(result.manifest.files.items()):
        typer.echo(f"{name:24} {entry.rows:>10} rows {entry.bytes:>12} bytes")
    typer.echo(f"wrote {result.path}")


@app.command("import")
def import_command(
    path: Annotated[Path, typer.Argument(help="Snapshot directory (from `quants export`).")],
    as_json: JsonOpt = False,
    db: DbOpt = None,
) -> None:
    """Merge a snapshot into the catalog (newer analyses win; nothing local is lost)."""
    from crawler.catalog import Catalog
    from crawler.config import Settings
    from crawler.lock import crawl_lock
    from crawler.snapshot.import_ import import_snapshot

    settings = Settings.from_env().replace(db_url=db)
    with (
        crawl_lock(settings, command="quants import"),
        Catalog.open(settings.resolved_db_url) as catalog,
    ):
        summary = import_snapshot(catalog, path)
    _render_import(summary.to_json(), as_json=as_json)


def _render_import(data: dict[str, object], *, as_json: bool) -> None:
    from crawler.cli._output import print_json

    if as_json:
        print_json(data)
        return
    for key, value in data.items():
        if key != "scans":
            typer.echo(f"{key:16} {value}")
