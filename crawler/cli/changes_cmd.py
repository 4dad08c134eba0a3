"""``quants changes``: new quants, re-uploads (with what changed), vanished files and repos."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from crawler.cli._app import app
from crawler.cli._options import DbOpt, JsonOpt

if TYPE_CHECKING:
    from crawler.catalog.changes import ChangeReport


@app.command()
def changes(
    since: Annotated[
        str | None,
        typer.Option(
            "--since",
            metavar="SCAN|DATE",
            help="A scan id (changes made after it) or a UTC date/time such as 2026-05-01. "
            "Default: the changes of the latest scan.",
            show_default=False,
        ),
    ] = None,
    as_json: JsonOpt = False,
    db: DbOpt = None,
) -> None:
    """What changed in the catalog: new quants, re-uploads under the same name, vanished ones."""
    from crawler.base.config import Settings
    from crawler.catalog.changes import changes_since
    from crawler.catalog.history import iso_utc
    from crawler.cli._output import print_json, safe_text
    from crawler.crawl.catalogs import open_catalog

    settings = Settings.from_env().replace(db_url=db)
    with open_catalog(settings.resolved_db_url) as catalog:
        report = changes_since(catalog, since)
    if as_json:
        from crawler.schemas import versioned

        print_json(versioned(report.to_json()))
        return
    if report.since is None:
        typer.echo("no scans yet: run `quants crawl` or `quants schedule`", err=True)
        return
    scans = ", ".join(str(i) for i in report.scan_ids) or "none"
    typer.echo(f"changes since {iso_utc(report.since)} (scans: {scans})")
    if report.empty:
        typer.echo("nothing changed")
        return
    for line in _lines(report):
        typer.echo(safe_text(line))


def _lines(report: ChangeReport) -> list[str]:
    from crawler.cli._output import human_bytes

    def label(text: str | None) -> str:
        return f" [{text}]" if text else ""

    out = [
        f"new        {q.repo_id}/{q.path}{label(q.quant_label)}  {human_bytes(q.size_bytes)}"
        for q in report.new_quants
    ]
    for r in report.reuploads:
        out.append(f"re-upload  {r.repo_id}/{r.path}{label(r.quant_label)}")
        out.extend(f"             {change}" for change in r.changes)
    out.extend(f"vanished   {v.repo_id}/{v.path}" for v in report.vanished_quants)
    out.extend(f"vanished   {f.repo_id}/{f.path} ({f.kind})" for f in report.vanished_files)
    out.extend(f"vanished   repo {g.repo_id} ({g.quants} quants)" for g in report.vanished_repos)
    return out
