"""On-demand discovery: answer quants search QUERY for a model no crawl has stored yet.

Resolves the name on the Hub, runs one locked crawl pass, and records when it looked.
Details: docs/internals/crawl.md#ondemand
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from crawler.base.errors import HubError, HubUnreachable

if TYPE_CHECKING:
    from crawler.base.config import Settings
    from crawler.catalog import Catalog
    from crawler.crawl.progress import Progress
    from crawler.crawl.repo import ScanHub
    from crawler.crawl.scan import ScanSummary
    from crawler.hub import RepoListing

__all__ = [
    "DEFAULT_MAX_AGE",
    "OnDemand",
    "ensure_model",
    "name_words",
    "search_terms",
]

#: A model looked up less than this long ago is answered from the catalog.
DEFAULT_MAX_AGE = timedelta(hours=24)
#: Repos read from each name search while resolving base models.
RESOLVE_LIMIT = 50
#: Base models followed per query (a name rarely resolves to more than a few).
MAX_BASE_MODELS = 6
#: Repos one on-demand pass may list in all (a guard against a too-broad query).
MAX_REPOS = 60
# Words are split on separators; "." stays inside a word ("qwen3.6", "v0.1").
_SPLIT = re.compile(r"[\s_\-/:,]+")
_REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*")
# Suffixes of quant repo names that are not part of the model's name.
_REPO_SUFFIXES = ("gguf", "i1", "imatrix")


@dataclass(frozen=True, slots=True)
class OnDemand:
    """What ``ensure_model`` did: ``action`` is ``offline``, ``fresh``, ``busy`` (another crawl
    pass holds the catalog; ``note`` says which) or ``scanned``."""

    action: str
    words: tuple[str, ...]
    searches: tuple[str, ...] = ()
    base_models: tuple[str, ...] = ()
    summary: ScanSummary | None = None
    note: str = ""


def name_words(query: str) -> tuple[str, ...]:
    """The query's words, lowercased: ``"Qwen3.6-27B"`` and ``"qwen3.6 27b"`` give the same."""
    return tuple(w for w in _SPLIT.split(query.strip().lower()) if w)


def search_terms(words: Sequence[str]) -> tuple[str, ...]:
    """Strings for the Hub's substring search: the words joined as repo names spell them."""
    words = [w for w in words if w not in _REPO_SUFFIXES]
    if not words:
        return ()
    terms = ["-".join(words)]
    if len(words) > 1:
        terms.append("".join(words))  # "llama 2" also as "llama2"
    return tuple(dict.fromkeys(terms))


def state_key(words: Sequence[str]) -> str:
    """The ``crawl_state`` key recording when these words were looked up."""
    return "ondemand:" + " ".join(words)


def resolve_base_models(hub: ScanHub, terms: Sequence[str], query: str) -> list[str]:
    """Base models the name resolves to, from the Hub's name search (any library).

    A listed repo counts when the query matches its id as ``quants search`` would match it
    (crawler.ranking.query.QueryMatcher: every word, typos in long words forgiven).
    """
    from crawler.ranking.query import QueryMatcher

    matcher = QueryMatcher(query)
    bases: dict[str, None] = {}
    for term in terms:
        for listing in _iter_named(hub, term):
            if not matcher.matches_names(listing.repo_id, None, "", None, None):
                continue
            if "gguf" in listing.tags:
                for base in (*listing.card_base_models, *listing.quantized_from):
                    bases.setdefault(base, None)
            else:
                bases.setdefault(listing.repo_id, None)
    return list(bases)[:MAX_BASE_MODELS]


def _iter_named(hub: ScanHub, term: str) -> list[RepoListing]:
    iter_models = getattr(hub, "iter_models", None)
    if iter_models is None:
        return []
    return list(iter_models(search=term, filters=(), limit=RESOLVE_LIMIT))


def has_fresh_quants(catalog: Catalog, query: str, since: datetime) -> bool:
    """Whether the catalog holds a live quant analysed after ``since`` (by a crawl or an earlier
    on-demand pass) that ``quants search QUERY`` would match."""
    from crawler.catalog.store import live_names_analysed_since
    from crawler.ranking.query import QueryMatcher

    matcher = QueryMatcher(query)
    return any(matcher.matches_names(*names) for names in live_names_analysed_since(catalog, since))


def ensure_model(
    settings: Settings,
    query: str,
    *,
    catalog: Catalog,
    hub: ScanHub | None = None,
    offline: bool = False,
    max_age: timedelta = DEFAULT_MAX_AGE,
    progress: Progress | None = None,
    now: datetime | None = None,
    watches: bool = False,
    announce: Callable[[str], None] | None = None,
) -> OnDemand:
    """Make the catalog hold the quants of the model query names (docs/internals/crawl.md#ondemand).

    ``watches``: evaluate the watches after the pass, as after any crawl (False: they wait for
    the next one). ``announce`` is told before the first request to the Hub. Raises
    HubUnreachable when the Hub cannot be reached at all (nothing is recorded as looked up then,
    so the next search tries again).
    """
    import threading

    from crawler.base.errors import LockHeld
    from crawler.catalog.scans import get_state, set_state
    from crawler.crawl.progress import NullProgress
    from crawler.crawl.run import CrawlScope, locked_pass, scan_step, watch_step

    words = name_words(query)
    if offline or not words:
        return OnDemand("offline", words)
    now = now or datetime.now(UTC)
    key = state_key(words)
    last = get_state(catalog, key)
    if last is not None:
        try:
            if now - datetime.fromisoformat(last) < max_age:
                return OnDemand("fresh", words)
        except ValueError:
            pass
    if has_fresh_quants(catalog, query, now - max_age):
        return OnDemand("fresh", words)
    # "owner/name" names a repo: search its name, and take it as a base model as it is.
    given = query.strip() if _REPO_ID.fullmatch(query.strip()) else None
    terms = search_terms(name_words(given.rsplit("/", 1)[1] if given else query))
    own_hub = hub is None
    if hub is None:
        from crawler.hub import HubClient

        # Two retries (1 + 2 s) rather than five, and a Hub that never answered is not retried:
        # a person is waiting for the answer.
        hub = HubClient(settings, max_retries=min(2, settings.retries), fail_fast=True)
    if announce is not None:
        announce(f"looking up {query.strip()!r} on the Hub ({settings.hf_endpoint}) ...")
    client: ScanHub = hub
    bases: list[str] = []

    def scan(settings: Settings, stop: threading.Event, progress: Progress) -> Any:
        """Under the crawl lock: resolve the base models, then scan them and the names."""
        try:
            bases.extend(resolve_base_models(client, terms, query))
        except HubUnreachable as exc:
            raise HubUnreachable(f"{exc}; --offline answers from what is stored") from None
        except HubError as exc:
            raise HubUnreachable(
                f"cannot reach the Hub at {settings.hf_endpoint} ({exc}); "
                "--offline answers from what is stored"
            ) from None
        if given is not None and given not in bases:
            bases.insert(0, given)
        scope = CrawlScope(authors=(), searches=terms, limit=MAX_REPOS, base_models=tuple(bases))
        step = scan_step(scope, trigger="search", full=True, hub=client, catalog=catalog)
        return step(settings, stop, progress)

    try:
        summary: ScanSummary = locked_pass(
            settings,
            command="quants search (on-demand look-up)",
            scan=scan,
            after_scan=watch_step if watches else _no_watches,
            stop=threading.Event(),
            progress=progress or NullProgress(),
        )
    except LockHeld as exc:
        return OnDemand("busy", words, terms, note=str(exc))
    finally:
        if own_hub:
            close = getattr(hub, "close", None)
            if callable(close):
                close()
    if summary.status == "failed":
        raise HubUnreachable(
            f"cannot reach the Hub at {settings.hf_endpoint} ({summary.message}); "
            "--offline answers from what is stored"
        )
    set_state(catalog, key, now.isoformat(), forward_only=True)
    return OnDemand("scanned", words, terms, tuple(bases), summary)


def _no_watches(settings: Settings, summary: object) -> None:
    """After an on-demand pass whose caller did not ask for the watches: they wait for the next."""


def look_up(
    settings: Settings,
    query: str | None,
    offline: bool,
    progress: Progress | None = None,
    on_lookup: Callable[[OnDemand], None] | None = None,
    watches: bool = False,
    announce: Callable[[str], None] | None = None,
) -> OnDemand | None:
    """What search and compare run first: ensure_model on the catalog at the settings' URL,
    unless offline or no query; ``on_lookup`` hears what it did."""
    if not query or offline or settings.offline:
        return None
    from crawler.crawl.catalogs import open_catalog

    with open_catalog(settings.resolved_db_url) as catalog:
        done = ensure_model(
            settings,
            query,
            catalog=catalog,
            max_age=timedelta(hours=settings.fresh_hours),
            progress=progress,
            watches=watches,
            announce=announce,
        )
    if on_lookup is not None:
        on_lookup(done)
    return done
