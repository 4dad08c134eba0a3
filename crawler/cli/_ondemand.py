"""Wiring of on-demand discovery (:mod:`crawler.ondemand`) for ``quants search`` / ``compare``."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Annotated

import typer

from crawler.config import Settings

if TYPE_CHECKING:
    from crawler.watch import SearchFn

OfflineOpt = Annotated[
    bool,
    typer.Option(
        "--offline",
        help="Answer from the catalog alone; never look the model up on the Hub "
        "(also QUANTS_OFFLINE=1).",
    ),
]


def ensure_model(settings: Settings, query: str | None, offline: bool, search: SearchFn) -> None:
    """Look the model ``query`` names up on the Hub unless offline or looked up recently; the
    pass evaluates the watches with ``search`` afterwards, as a crawl does."""
    if not query or offline or settings.offline:
        return
    from crawler.catalog import Catalog
    from crawler.cli._output import human_bytes, safe_text
    from crawler.ondemand import ensure_model as ensure
    from crawler.progress import StderrProgress

    with Catalog.open(settings.resolved_db_url) as catalog:
        done = ensure(
            settings,
            query,
            catalog=catalog,
            max_age=timedelta(hours=settings.fresh_hours),
            progress=StderrProgress(),
            search=search,
            announce=lambda text: typer.echo(safe_text(text), err=True),
        )
    if done.action == "busy":
        typer.echo(
            safe_text(f"not looked up on the Hub: {done.note}; answering from what is stored"),
            err=True,
        )
    if done.summary is not None:
        s = done.summary
        bases = ", ".join(done.base_models) or "none"
        typer.echo(
            safe_text(
                f"looked up {' '.join(done.words)!r} on the Hub: {s.repos_seen} repos, "
                f"{s.files_analysed} headers read, {human_bytes(s.bytes_fetched)} in "
                f"{s.requests} requests (base models: {bases})"
            ),
            err=True,
        )
