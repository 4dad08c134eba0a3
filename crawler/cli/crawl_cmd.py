"""``quants crawl``: one crawl pass over the Hub into the catalog, with a progress bar on stderr."""

from __future__ import annotations

from typing import Annotated

import typer

from crawler.cli._app import app
from crawler.cli._options import DbOpt, JsonOpt

_SUMMARY_ROWS = (
    ("repos seen", "repos_seen"),
    ("repos new", "repos_new"),
    ("repos changed", "repos_changed"),
    ("repos unchanged", "repos_unchanged"),
    ("quants analysed", "quants_analysed"),
    ("files analysed", "files_analysed"),
    ("requests", "requests"),
    ("bytes fetched", "bytes_fetched"),
    ("errors", "errors"),
)


@app.command("crawl")
def crawl(
    endpoint: Annotated[
        str | None,
        typer.Option(
            "--endpoint",
            help="Hub base URL (default: $QUANTS_HF_ENDPOINT, else https://huggingface.co).",
            show_default=False,
        ),
    ] = None,
    author: Annotated[
        list[str] | None,
        typer.Option("--author", help="List this author's GGUF repos (repeatable)."),
    ] = None,
    search: Annotated[
        list[str] | None,
        typer.Option("--search", help="List GGUF repos matching this term (repeatable)."),
    ] = None,
    limit: Annotated[
        int | None, typer.Option("--limit", min=1, help="At most this many repos.")
    ] = None,
    concurrency: Annotated[
        int | None,
        typer.Option("--concurrency", min=1, max=256, help="Header reads in flight (default 8)."),
    ] = None,
    all_repos: Annotated[
        bool,
        typer.Option("--all", help="List every GGUF repo instead of the default uploaders."),
    ] = False,
    full: Annotated[
        bool,
        typer.Option(
            "--full",
            help="List every repo (refresh downloads/likes, find vanished repos), not only "
            "those changed since the last crawl.",
        ),
    ] = False,
    verify_imported: Annotated[
        bool,
        typer.Option(
            "--verify-imported",
            help="Also re-read every quant whose analysis was imported (pull/import), even "
            "where the repo's commit is unchanged; the local read replaces the imported one.",
        ),
    ] = False,
    as_json: JsonOpt = False,
    db: DbOpt = None,
) -> None:
    """Crawl GGUF repos into the catalog: read every new or changed quant's headers.

    Without --author/--search/--all, the default uploaders and search terms are listed. A second
    crawl only reads what changed; failures are recorded (`quants scans`) and retried.
    """
    import signal
    import threading

    from crawler.base.config import Settings
    from crawler.cli._output import human_bytes, print_json
    from crawler.crawl.logs import configure_logging
    from crawler.crawl.progress import StderrProgress
    from crawler.crawl.run import CrawlScope, crawl_pass

    settings = Settings.from_env().replace(
        db_url=db,
        hf_endpoint=endpoint.rstrip("/") if endpoint else None,
        concurrency=concurrency,
    )
    configure_logging(settings)
    scope = CrawlScope(
        authors=() if all_repos else (tuple(author) if author else None),
        searches=() if all_repos else (tuple(search) if search else None),
        limit=limit,
    )
    stop = threading.Event()
    # SIGTERM (service managers, `kill`): finish the repos in flight, record "interrupted".
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        # Watches are evaluated after every scan, manual or scheduled.
        summary = crawl_pass(
            settings,
            scope=scope,
            full=True if full else None,
            stop=stop,
            progress=StderrProgress(),
            verify_imported=verify_imported,
        )
    finally:
        signal.signal(signal.SIGTERM, previous)
    if summary.status == "failed":
        # Reached nothing: one line naming the cause and exit 4, not a zero summary.
        from crawler.base.errors import HubUnreachable

        raise HubUnreachable(f"crawl failed: {summary.message or 'nothing was reached'}")
    data = summary.to_json()
    if as_json:
        from crawler.schemas import versioned

        print_json(versioned(data))
        return
    for label, key in _SUMMARY_ROWS:
        value = data[key]
        shown = human_bytes(value) if key == "bytes_fetched" else str(value)
        typer.echo(f"{label:<16} {shown}")
    if summary.errors:
        typer.echo("see `quants scans` for the errors; the next crawl retries them", err=True)
    if summary.status != "ok":
        typer.echo(f"crawl {summary.status}: {summary.message or ''}".rstrip(), err=True)
