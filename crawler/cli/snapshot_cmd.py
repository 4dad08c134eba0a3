"""``quants export`` / ``import`` / ``publish`` / ``pull``: snapshots, docs/snapshots.md."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from crawler.cli._app import app
from crawler.cli._options import DbOpt, JsonOpt

if TYPE_CHECKING:
    from crawler.snapshot.export import ExportResult

WithTensorsOpt = Annotated[
    bool, typer.Option("--with-tensors", help="Also export the raw tensor tables.")
]
EndpointOpt = Annotated[
    str | None, typer.Option("--endpoint", help="Hub URL (default: $QUANTS_HF_ENDPOINT).")
]


@app.command("export")
def export_command(
    path: Annotated[Path, typer.Argument(help="Directory to write the snapshot into.")],
    since: Annotated[
        str | None,
        typer.Option("--since", help="Only what changed since this scan id or ISO date."),
    ] = None,
    with_tensors: WithTensorsOpt = False,
    as_json: JsonOpt = False,
    db: DbOpt = None,
) -> None:
    """Write the catalog as a snapshot: Parquet files and manifest.json."""
    from crawler.base.config import Settings
    from crawler.cli._output import print_json
    from crawler.crawl.catalogs import open_catalog
    from crawler.snapshot.export import export_snapshot, parse_since

    settings = Settings.from_env().replace(db_url=db)
    with open_catalog(settings.resolved_db_url) as catalog:
        result = export_snapshot(
            catalog, path, since=parse_since(catalog, since), with_tensors=with_tensors
        )
    if as_json:
        print_json(result.manifest.to_json())
        return
    for name, entry in sorted(result.manifest.files.items()):
        typer.echo(f"{name:24} {entry.rows:>10} rows {entry.bytes:>12} bytes")
    _render_left_out(result)
    typer.echo(f"wrote {result.path}")


def _render_left_out(result: ExportResult, *, err: bool = False) -> None:
    """The rows the export left out because `quants import` refuses them, by file and reason."""
    from crawler.cli._output import safe_text

    total = result.manifest.rows_left_out
    if not total:
        return
    typer.echo(
        f"left out {total} rows that `quants import` refuses (a repo that lost rows is exported"
        " as not fully read, for an importer's crawl to read):",
        err=err,
    )
    for name, reasons in sorted(result.manifest.left_out.items()):
        for reason, rows in sorted(reasons.items()):
            example = result.examples.get((name, reason))
            why = f"{reason}: {example}" if example else reason.replace("_", " ")
            unit = "row " if rows == 1 else "rows"
            typer.echo(safe_text(f"  {name:24} {rows:>8} {unit}  {why}"), err=err)


@app.command("import")
def import_command(
    path: Annotated[Path, typer.Argument(help="Snapshot directory (from `quants export`).")],
    as_json: JsonOpt = False,
    db: DbOpt = None,
) -> None:
    """Merge a snapshot into the catalog (newer analyses win; nothing local is lost)."""
    from crawler.base.config import Settings
    from crawler.crawl.catalogs import open_catalog
    from crawler.crawl.lock import crawl_lock
    from crawler.snapshot.import_ import import_snapshot

    settings = Settings.from_env().replace(db_url=db)
    with (
        crawl_lock(settings, command="quants import"),
        open_catalog(settings.resolved_db_url) as catalog,
    ):
        summary = import_snapshot(catalog, path)
    _render_import(summary.to_json(), as_json=as_json)


def _render_import(data: dict[str, object], *, as_json: bool) -> None:
    from crawler.cli._output import print_json

    left_out = data.get("left_out")
    if isinstance(left_out, dict) and left_out:
        rows = sum(n for reasons in left_out.values() for n in reasons.values())
        typer.echo(
            f"note: the snapshot's export left out {rows} rows that an import refuses"
            " (its manifest's left_out counts them by file and reason)",
            err=True,
        )
    differ = data.get("kinds_differ")
    if differ:
        typer.echo(
            f"note: {differ} files of the snapshot are grouped differently by this version's"
            " naming rules; `quants crawl --full` regroups their repos",
            err=True,
        )
    if as_json:
        print_json(data)
        return
    for key, value in data.items():
        if key not in ("scans", "left_out"):
            typer.echo(f"{key:16} {value}")


@app.command("publish")
def publish_command(
    dataset_repo: Annotated[str, typer.Argument(help="Hub dataset repo, e.g. you/quants-catalog.")],
    path: Annotated[
        Path | None,
        typer.Option("--path", help="Publish this snapshot directory instead of exporting now."),
    ] = None,
    with_tensors: WithTensorsOpt = False,
    endpoint: EndpointOpt = None,
    as_json: JsonOpt = False,
    db: DbOpt = None,
) -> None:
    """Export the catalog and upload it to a Hub dataset repo as one commit.

    The token comes from HF_TOKEN or `hf auth login`; it is never printed.
    """
    import tempfile

    from huggingface_hub.utils.tqdm import disable_progress_bars

    from crawler.base.config import Settings
    from crawler.cli._output import print_json, safe_text
    from crawler.crawl.catalogs import open_catalog
    from crawler.snapshot.export import export_snapshot
    from crawler.snapshot.hubsync import publish_snapshot

    disable_progress_bars()
    settings = Settings.from_env().replace(db_url=db, hf_endpoint=endpoint)
    with tempfile.TemporaryDirectory(prefix="quants-publish-") as tmp:
        if path is None:
            path = Path(tmp) / "snapshot"
            with open_catalog(settings.resolved_db_url) as catalog:
                exported = export_snapshot(catalog, path, with_tensors=with_tensors)
            _render_left_out(exported, err=True)
        typer.echo(
            safe_text(
                f"publishing to dataset {dataset_repo} on the Hub ({settings.hf_endpoint}) ..."
            ),
            err=True,
        )
        result = publish_snapshot(settings, path, dataset_repo)
    if as_json:
        print_json(result.to_json())
        return
    typer.echo(f"published {result.files} files to {result.url} (commit {result.commit})")


@app.command("pull")
def pull_command(
    dataset_repo: Annotated[str, typer.Argument(help="Hub dataset repo to pull a snapshot from.")],
    revision: Annotated[
        str | None, typer.Option("--revision", help="Branch, tag or commit (default: main).")
    ] = None,
    endpoint: EndpointOpt = None,
    as_json: JsonOpt = False,
    db: DbOpt = None,
) -> None:
    """Download a published snapshot (changed files only) and import it into the catalog."""
    from huggingface_hub.utils.tqdm import disable_progress_bars

    from crawler.base.config import Settings
    from crawler.cli._output import print_json, safe_text
    from crawler.crawl.catalogs import open_catalog
    from crawler.crawl.lock import crawl_lock
    from crawler.snapshot.hubsync import pull_snapshot

    disable_progress_bars()
    settings = Settings.from_env().replace(db_url=db, hf_endpoint=endpoint)
    with (
        crawl_lock(settings, command="quants pull"),
        open_catalog(settings.resolved_db_url) as catalog,
    ):
        typer.echo(
            safe_text(f"pulling dataset {dataset_repo} from the Hub ({settings.hf_endpoint}) ..."),
            err=True,
        )
        result = pull_snapshot(settings, catalog, dataset_repo, revision=revision)
    if as_json:
        print_json(result.to_json())
        return
    typer.echo(f"pulled {dataset_repo} at {result.commit}: {result.bytes_downloaded} bytes")
    if result.imported is None:
        typer.echo("snapshot already imported; nothing to do")
    else:
        _render_import(result.imported.to_json(), as_json=False)
