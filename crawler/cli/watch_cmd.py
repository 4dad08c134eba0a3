"""``quants watch add|list|remove|show|run``: saved searches evaluated after every scan."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from crawler.cli._app import app
from crawler.cli._options import DbOpt, JsonOpt, LimitOpt

if TYPE_CHECKING:
    from crawler.catalog.watches import WatchHitRecord

watch_app = typer.Typer(
    help="Saved searches: after every scan, new or re-uploaded results go to a feed.",
    no_args_is_help=True,
)
app.add_typer(watch_app, name="watch")

NameArg = Annotated[
    str, typer.Argument(metavar="NAME", help="The watch's name.", show_default=False)
]


def _hit_rows(hits: list[WatchHitRecord]) -> tuple[list[str], list[list[object]]]:
    from crawler.catalog.history import iso_utc
    from crawler.cli._output import human_bytes

    columns = ["at", "reason", "repo", "path", "label", "size", "max_ctx"]
    rows: list[list[object]] = [
        [
            (iso_utc(h.at) or "").replace("T", " "),
            h.payload.get("reason"),
            h.payload.get("repo"),
            h.payload.get("path"),
            h.payload.get("quant_label"),
            human_bytes(h.payload.get("size_bytes")),
            h.payload.get("max_ctx"),
        ]
        for h in hits
    ]
    return columns, rows


@watch_app.command("add")
def add(
    name: NameArg,
    search_args: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="-- SEARCH_OPTIONS...",
            help="The options of `quants search`, after `--`.",
            show_default=False,
        ),
    ] = None,
    db: DbOpt = None,
) -> None:
    """Save a search, e.g. `quants watch add 4090 -- --vram 24 --ctx 262144 --mtp`.

    The options given are stored by name and checked as `quants search` checks them.
    """
    from crawler.base.config import Settings
    from crawler.base.errors import UsageError
    from crawler.cli._output import safe_text
    from crawler.cli.search_cmd import search_options
    from crawler.crawl.catalogs import open_catalog
    from crawler.crawl.watch import add_watch

    if not search_args:
        raise UsageError("give the search options after `--`, e.g. -- --vram 24 --ctx 262144")
    options = search_options(search_args)
    settings = Settings.from_env().replace(db_url=db)
    with open_catalog(settings.resolved_db_url) as catalog:
        record, baseline = add_watch(settings, catalog, name, options)
    typer.echo(
        f"watch {safe_text(record.name)} saved; {baseline} current results taken as its "
        "baseline: from now on it reports new and re-uploaded results"
    )


@watch_app.command("list")
def list_(as_json: JsonOpt = False, db: DbOpt = None) -> None:
    """List the watches with their search options and how many results each has recorded."""
    import shlex

    from crawler.base.config import Settings
    from crawler.catalog.history import iso_utc
    from crawler.catalog.watches import list_watches
    from crawler.cli._output import format_table, print_json
    from crawler.cli.search_cmd import options_argv
    from crawler.crawl.catalogs import open_catalog

    settings = Settings.from_env().replace(db_url=db)
    with open_catalog(settings.resolved_db_url) as catalog:
        records = list_watches(catalog)
    if as_json:
        print_json([w.to_json() for w in records])
        return
    if not records:
        typer.echo("no watches: add one with `quants watch add NAME -- SEARCH_OPTIONS`", err=True)
        return
    rows = [
        [
            w.name,
            shlex.join(options_argv(w.options)),
            w.hits,
            (iso_utc(w.last_evaluated_at) or "never").replace("T", " "),
        ]
        for w in records
    ]
    typer.echo(
        format_table(["name", "search", "hits", "last evaluated"], rows, align_right=["hits"])
    )


@watch_app.command("remove")
def remove(name: NameArg, db: DbOpt = None) -> None:
    """Delete a watch and its recorded results (the feed files keep their entries)."""
    from crawler.base.config import Settings
    from crawler.catalog.watches import remove_watch
    from crawler.cli._output import safe_text
    from crawler.crawl.catalogs import open_catalog

    settings = Settings.from_env().replace(db_url=db)
    with open_catalog(settings.resolved_db_url) as catalog:
        remove_watch(catalog, name)
    typer.echo(f"watch {safe_text(name)} removed")


@watch_app.command("show")
def show(name: NameArg, limit: LimitOpt = 50, as_json: JsonOpt = False, db: DbOpt = None) -> None:
    """The results a watch reported (newest first; `baseline` = there when it was added)."""
    from crawler.base.config import Settings
    from crawler.catalog.watches import list_hits
    from crawler.cli._output import format_table, print_json
    from crawler.crawl.catalogs import open_catalog
    from crawler.crawl.watch import feed_paths

    settings = Settings.from_env().replace(db_url=db)
    with open_catalog(settings.resolved_db_url) as catalog:
        hits = list_hits(catalog, name, limit=limit)
    if as_json:
        print_json([h.to_json() for h in hits])
        return
    typer.echo(format_table(*_hit_rows(hits), align_right=["size", "max_ctx"]))
    atom, jsonl = feed_paths(settings)
    typer.echo(f"feed: {atom} (Atom), {jsonl} (JSON lines)", err=True)


@watch_app.command("run")
def run(as_json: JsonOpt = False, db: DbOpt = None) -> None:
    """Evaluate every watch now (a crawl does this after each scan); print what fired."""
    from crawler.base.config import Settings
    from crawler.cli._output import format_table, print_json
    from crawler.crawl.catalogs import open_catalog
    from crawler.crawl.watch import evaluate_watches

    settings = Settings.from_env().replace(db_url=db)
    with open_catalog(settings.resolved_db_url) as catalog:
        hits = evaluate_watches(settings, catalog, scan_id=None)
    if as_json:
        print_json([h.to_json() for h in hits])
        return
    if not hits:
        typer.echo("no new results", err=True)
        return
    columns, rows = _hit_rows(hits)
    typer.echo(
        format_table(
            ["watch", *columns],
            [[h.watch, *row] for h, row in zip(hits, rows, strict=True)],
            align_right=["size", "max_ctx"],
        )
    )
