"""Watches: saved searches evaluated after every scan, whose new results go to a feed.

A result fires once per content; hits go to the catalog and to a JSONL and an Atom feed.
Details: docs/internals/crawl.md#watch
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote
from xml.etree import ElementTree as ET

from crawler.base.errors import NothingFits, QuantsError

if TYPE_CHECKING:
    from crawler.base.config import Settings
    from crawler.catalog import Catalog
    from crawler.catalog.watches import WatchHitRecord, WatchRecord
    from crawler.library.search_request import SearchRequest

logger = logging.getLogger(__name__)

__all__ = [
    "FEED_ENTRIES",
    "SearchFn",
    "add_watch",
    "evaluate_after_scan",
    "evaluate_watches",
    "feed_paths",
    "result_key",
    "search_results",
    "watch_request",
    "write_atom",
]

# A search: (catalog, checked request) -> results in the `search --json` shape.
SearchFn = Callable[["Catalog", "SearchRequest"], list[dict[str, Any]]]

# Entries kept in the Atom file; the JSON-lines file keeps everything.
FEED_ENTRIES = 200
_ATOM_NS = "http://www.w3.org/2005/Atom"
# XML 1.0 forbids most C0 controls even escaped; Hub text may hold them (they are dropped here,
# the JSON-lines feed keeps them escaped).
_XML_INVALID = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def feed_paths(settings: Settings) -> tuple[Path, Path]:
    """(Atom file, JSON-lines file) in the data directory."""
    feeds = settings.resolved_data_dir / "feeds"
    return feeds / "watches.atom", feeds / "watches.jsonl"


def result_key(result: Mapping[str, Any], content_key: str | None) -> str:
    """``repo:path@content_key``; a re-upload under the same name gives a new key."""
    return f"{result.get('repo')}:{result.get('path')}@{content_key or '?'}"


def watch_request(settings: Settings, options: Mapping[str, Any]) -> SearchRequest:
    """The request a watch's options make (UsageError for a bad one); without ``headroom``,
    the settings' (as ``quants search`` takes QUANTS_HEADROOM)."""
    from crawler.library.search_request import checked_request

    return checked_request(options, headroom_gib=settings.headroom_gib)


def search_results(catalog: Catalog, req: SearchRequest) -> list[dict[str, Any]]:
    """The ``results`` of ``quants search --json`` for ``req`` on ``catalog`` (NothingFits when
    none fits). A watch needs no count of what fits, so ranking may stop early."""
    from crawler.library.search import search
    from crawler.library.search_json import search_json

    with catalog.reader() as reader:
        res = search(reader, dataclasses.replace(req, count_cap=None))
    results: list[dict[str, Any]] = search_json(res)["results"]
    return results


def _run_search(
    settings: Settings, catalog: Catalog, options: Mapping[str, Any], search: SearchFn
) -> list[tuple[str, dict[str, Any]]]:
    from crawler.catalog.watches import content_keys

    req = watch_request(settings, options)  # raises on bad options
    try:
        results = search(catalog, req)
    except NothingFits:
        return []
    keys = content_keys(catalog, [(str(r.get("repo")), str(r.get("path"))) for r in results])
    return [
        (result_key(r, keys.get((str(r.get("repo")), str(r.get("path"))))), dict(r))
        for r in results
    ]


def _stem(key: str) -> str:
    return key.rsplit("@", 1)[0]


def add_watch(
    settings: Settings,
    catalog: Catalog,
    name: str,
    options: Mapping[str, Any],
    *,
    search: SearchFn = search_results,
) -> tuple[WatchRecord, int]:
    """Save a watch after checking its options; return it and its number of current results.

    The current results become the watch's baseline: recorded, not reported, so the watch
    speaks only of what appears (or is re-uploaded) from now on.
    """
    from crawler.catalog import watches

    results = _run_search(settings, catalog, options, search)  # raises on bad options
    record = watches.add_watch(catalog, name, options)
    watches.record_hits(
        catalog,
        record.id,
        [(key, {**payload, "reason": "baseline"}) for key, payload in results],
        scan_id=None,
    )
    return record, len(results)


def evaluate_watches(
    settings: Settings,
    catalog: Catalog,
    *,
    scan_id: int | None,
    search: SearchFn = search_results,
    now: datetime | None = None,
) -> list[WatchHitRecord]:
    """Run every watch; record and feed the results each has not seen; return them.

    A watch whose options no longer check (or whose search fails) is logged and skipped; the
    others still run.
    """
    from crawler.catalog import watches

    moment = now or datetime.now(UTC)
    fired: list[WatchHitRecord] = []
    for watch in watches.list_watches(catalog):
        try:
            results = _run_search(settings, catalog, watch.options, search)
        except QuantsError as exc:
            logger.error("watch %s: search failed: %s", watch.name, exc)
            continue
        known = watches.known_keys(catalog, watch.id)
        known_stems = {_stem(k) for k in known}
        fresh = [
            (key, _news(catalog, payload, reupload=_stem(key) in known_stems))
            for key, payload in results
            if key not in known
        ]
        hits = watches.record_hits(catalog, watch.id, fresh, scan_id=scan_id, at=moment)
        for hit in hits:
            logger.info("watch %s: %s %s", watch.name, hit.payload.get("reason"), hit.result_key)
        fired.extend(hits)
    if fired:
        append_jsonl(feed_paths(settings)[1], fired)
    recent = watches.recent_hits(catalog, limit=FEED_ENTRIES)
    write_atom(feed_paths(settings)[0], recent, endpoint=settings.hf_endpoint)
    return fired


def _news(catalog: Catalog, payload: dict[str, Any], *, reupload: bool) -> dict[str, Any]:
    """The feed payload: the search result, why it fired, and for a re-upload what changed."""
    if not reupload:
        return {**payload, "reason": "new"}
    from crawler.catalog.changes import latest_changes

    changes = latest_changes(catalog, str(payload.get("repo")), str(payload.get("path")))
    return {**payload, "reason": "reupload", "changes": list(changes)}


def evaluate_after_scan(settings: Settings, summary: Any) -> list[WatchHitRecord]:
    """Evaluate the watches after a crawl pass (skipped when the pass failed)."""
    from crawler.crawl.catalogs import open_catalog

    if getattr(summary, "status", "ok") == "failed":
        logger.warning("scan failed: watches not evaluated")
        return []
    with open_catalog(settings.resolved_db_url) as catalog:
        return evaluate_watches(settings, catalog, scan_id=getattr(summary, "scan_id", None))


def append_jsonl(path: Path, hits: Iterable[WatchHitRecord]) -> None:
    """Append one JSON object a line (ASCII: no control character reaches a terminal raw)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = "".join(json.dumps(h.to_json(), ensure_ascii=True, default=str) + "\n" for h in hits)
    with path.open("a", encoding="utf-8") as fh:
        fh.write(lines)


def _xml_text(value: object) -> str:
    return _XML_INVALID.sub("", str(value))


def _entry_title(hit: WatchHitRecord) -> str:
    p = hit.payload
    label = f" ({p.get('quant_label')})" if p.get("quant_label") else ""
    what = "re-uploaded" if p.get("reason") == "reupload" else "new"
    return f"{hit.watch}: {what} {p.get('repo')}/{p.get('path')}{label}"


def _entry_summary(hit: WatchHitRecord) -> str:
    p = hit.payload
    parts = [
        f"{k}: {p[k]}"
        for k in ("size_bytes", "total_bytes", "margin_bytes", "max_ctx", "quality", "tok_s")
        if p.get(k) is not None
    ]
    changes = p.get("changes")
    if isinstance(changes, list) and changes:
        parts.append("changed: " + "; ".join(str(c) for c in changes))
    if p.get("command"):
        parts.append(f"command: {p['command']}")
    return "\n".join(parts)


def write_atom(path: Path, hits: Sequence[WatchHitRecord], *, endpoint: str) -> None:
    """Rewrite the Atom feed with ``hits`` (newest first), atomically; links go to ``endpoint``."""
    ET.register_namespace("", _ATOM_NS)

    def sub(parent: ET.Element, tag: str, text: str | None = None, **attrs: str) -> ET.Element:
        clean = {key: _xml_text(value) for key, value in attrs.items()}
        element = ET.SubElement(parent, f"{{{_ATOM_NS}}}{tag}", clean)
        if text is not None:
            element.text = _xml_text(text)
        return element

    def stamp(moment: datetime) -> str:
        return moment.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")

    feed = ET.Element(f"{{{_ATOM_NS}}}feed")
    sub(feed, "id", "tag:quants,2026:watches")
    sub(feed, "title", "quants watches")
    sub(feed, "updated", stamp(hits[0].at if hits else datetime.now(UTC)))
    author = sub(feed, "author")
    sub(author, "name", "quants")
    for hit in hits:
        entry = sub(feed, "entry")
        digest = hashlib.sha256(hit.result_key.encode("utf-8")).hexdigest()[:32]
        sub(entry, "id", f"tag:quants,2026:watch/{hit.watch}/{digest}")
        sub(entry, "title", _entry_title(hit))
        sub(entry, "updated", stamp(hit.at))
        sub(entry, "category", term=hit.watch)
        repo = hit.payload.get("repo")
        if isinstance(repo, str) and repo:
            sub(entry, "link", href=f"{endpoint.rstrip('/')}/{quote(repo, safe='/')}")
        sub(entry, "content", _entry_summary(hit), type="text")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    ET.ElementTree(feed).write(tmp, encoding="utf-8", xml_declaration=True)
    os.replace(tmp, path)
