"""Wiring of on-demand discovery (crawler.crawl.ondemand) for ``quants search`` / ``compare``: the
library looks the model up (crawler.api); this shows the pass on stderr."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from crawler.cli._options import Option

if TYPE_CHECKING:
    from crawler.crawl.ondemand import OnDemand

OfflineOpt = Annotated[
    bool,
    Option(
        "--offline",
        help="Answer from the catalog alone; never look the model up on the Hub "
        "(also QUANTS_OFFLINE=1).",
    ),
]


def lookup_hooks() -> dict[str, Any]:
    """The ``progress`` and ``on_lookup`` hooks of crawler.api.search / compare for a terminal."""
    from crawler.cli._output import echo, safe_text
    from crawler.crawl.progress import StderrProgress

    return {
        "progress": StderrProgress(),
        "on_lookup": report_lookup,
        "announce": lambda text: echo(safe_text(text), err=True),
    }


def report_lookup(done: OnDemand) -> None:
    """One stderr line on what the Hub lookup did (nothing when it was not needed)."""
    from crawler.cli._output import echo, human_bytes, safe_text

    if done.action == "busy":
        echo(
            safe_text(f"not looked up on the Hub: {done.note}; answering from what is stored"),
            err=True,
        )
    if done.summary is not None:
        s = done.summary
        bases = ", ".join(done.base_models) or "none"
        echo(
            safe_text(
                f"looked up {' '.join(done.words)!r} on the Hub: {s.repos_seen} repos, "
                f"{s.files_analysed} headers read, {human_bytes(s.bytes_fetched)} in "
                f"{s.requests} requests (base models: {bases})"
            ),
            err=True,
        )
