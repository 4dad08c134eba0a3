"""Routes of the emulated Hub and CDN: request -> Reply, with the Hub's access rules.

Access (huggingface_hub utils/_http.py, live contract of 2026-09): a missing or private repo is a
401 without error code for anonymous callers and ``404 RepoNotFound`` with a token; a gated repo's
metadata and tree are public, its files answer ``401 GatedRepo`` (anonymous) or ``403 GatedRepo``
(token without access); a token the Hub does not know gets 401 "Invalid credentials in
Authorization header".
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, quote, unquote

from tests.hub_emulator import datasets, render
from tests.hub_emulator.reply import Reply, error_reply, json_reply
from tests.hub_emulator.state import Blob, Commit, Repo

if TYPE_CHECKING:
    from tests.hub_emulator.server import HubEmulator
    from tests.hub_emulator.state import Blob, Commit

_RANGE = re.compile(r"bytes=(\d*)-(\d*)")


@dataclass(frozen=True, slots=True)
class Request:
    """The parts of an HTTP request the routes look at."""

    method: str
    path: str
    params: list[tuple[str, str]]
    headers: dict[str, str]
    body: bytes
    token: str | None
    ignore_range: bool = False

    def get(self, key: str) -> str | None:
        """First value of a query parameter."""
        return next((v for k, v in self.params if k == key), None)

    def all(self, *keys: str) -> list[str]:
        """Every value of the given query parameters, in order."""
        return [v for k, v in self.params if k in keys]

    def flag(self, key: str) -> bool:
        """A boolean query parameter (``true``/``1``)."""
        return (self.get(key) or "").lower() in ("true", "1")


def route(emu: HubEmulator, origin: str, req: Request) -> Reply:
    """Dispatch one request."""

    parts = req.path.split("/")[1:]
    if origin == "cdn":
        return _cdn(emu, req)
    if datasets.handles(parts):  # dataset repos and the commit/LFS write path
        return datasets.route(emu, req, parts)
    if parts[:2] == ["api", "models"] and len(parts) == 2 and req.method == "GET":
        return _list_models(emu, req)
    if parts[:2] == ["api", "models"] and len(parts) >= 4:
        repo_id = f"{unquote(parts[2])}/{unquote(parts[3])}"
        rest = parts[4:]
        if not rest and req.method == "GET":
            return _model_info(emu, req, repo_id, "main")
        if rest[:1] == ["revision"] and len(rest) == 2 and req.method == "GET":
            return _model_info(emu, req, repo_id, unquote(rest[1]))
        if rest[:1] == ["tree"] and len(rest) >= 2 and req.method == "GET":
            folder = unquote("/".join(rest[2:])).strip("/")
            return _tree(emu, req, repo_id, unquote(rest[1]), folder)
        if rest[:1] == ["paths-info"] and len(rest) == 2 and req.method == "POST":
            return _paths_info(emu, req, repo_id, unquote(rest[1]))
        if rest == ["refs"] and req.method == "GET":
            return _refs(emu, req, repo_id)
    if parts[:3] == ["api", "resolve-cache", "models"] and len(parts) >= 7:
        repo_id = f"{parts[3]}/{parts[4]}"
        return _resolve(emu, req, repo_id, parts[5], unquote("/".join(parts[6:])), cache=True)
    if len(parts) >= 5 and parts[2] == "resolve" and req.method in ("GET", "HEAD"):
        repo_id = f"{parts[0]}/{parts[1]}"
        return _resolve(emu, req, repo_id, unquote(parts[3]), unquote("/".join(parts[4:])))
    return error_reply(404, "Sorry, we can't find the page you are looking for.")


# --- access -----------------------------------------------------------------------------------


def _access(emu: HubEmulator, req: Request, repo_id: str, *, content: bool) -> Repo | Reply:

    state = emu.state
    if req.token is not None and req.token not in state.valid_tokens:
        return error_reply(401, "Invalid credentials in Authorization header")
    repo = state.get(repo_id)
    if repo is None or (repo.private and req.token not in repo.granted):
        if req.token is None:
            return error_reply(
                401,
                "Invalid username or password.",
                extra={"WWW-Authenticate": 'Bearer realm="Authentication required"'},
            )
        return error_reply(404, "Repository not found", "RepoNotFound")
    if repo.disabled:
        return error_reply(403, "Access to this resource is disabled.")
    if content and repo.gated and req.token not in repo.granted:
        message = (
            f"Access to model {repo_id} is restricted. You must have access to it and be "
            "authenticated to access it. Please log in."
        )
        return error_reply(401 if req.token is None else 403, message, "GatedRepo")
    return repo


def _commit(repo: Repo, revision: str) -> Commit | Reply:

    commit = repo.find_commit(revision)
    if commit is None:
        return error_reply(404, f"Invalid rev id: {revision}", "RevisionNotFound")
    return commit


def _repo_commit(
    emu: HubEmulator, req: Request, repo_id: str, revision: str, *, content: bool
) -> tuple[Repo, Commit] | Reply:
    """The repo (access checked as _access) and its commit at ``revision``, or the error."""
    repo = _access(emu, req, repo_id, content=content)
    if not isinstance(repo, Repo):
        return repo
    commit = _commit(repo, revision)
    if not isinstance(commit, Commit):
        return commit
    return repo, commit


def _visible(repo: Repo, token: str | None) -> bool:
    return not repo.private or token in repo.granted


# --- API ----------------------------------------------------------------------------------------


def _list_models(emu: HubEmulator, req: Request) -> Reply:

    if req.token is not None and req.token not in emu.state.valid_tokens:
        return error_reply(401, "Invalid credentials in Authorization header")
    expand = req.all("expand", "expand[]")
    unknown = [e for e in expand if e not in render.EXPAND_PROPERTIES]
    if unknown:
        return error_reply(400, f'"expand" must be one of the allowed values, got {unknown[0]}')
    if expand and (req.flag("full") or req.flag("cardData") or req.flag("config")):
        return error_reply(400, '"expand" cannot be combined with "full", "cardData" or "config"')
    sort = req.get("sort") or "trendingScore"
    if sort not in render.SORT_KEYS:
        return error_reply(400, f'"sort" must be one of {list(render.SORT_KEYS)}')
    try:
        limit = int(req.get("limit") or emu.max_page_size)
    except ValueError:
        return error_reply(400, '"limit" must be a number')
    page_size = max(1, min(limit, emu.max_page_size))
    filters = req.all("filter")
    author = (req.get("author") or "").lower()
    search = (req.get("search") or "").lower()
    with emu.state.lock:
        repos = [
            r
            for r in emu.state.repos.values()
            if _visible(r, req.token)
            and all(f in r.all_tags() or f == r.library_name for f in filters)
            and (not author or r.author.lower() == author)
            and (not search or search in r.repo_id.lower())
        ]
        cursor = req.get("cursor")
        decoded = render.decode_cursor(cursor) if cursor else None
        if cursor and decoded is None:
            return error_reply(400, "Invalid cursor")
        # ``direction``: "-1 sorts by descending order while all other values sort by ascending
        # order" (huggingface_hub hf_api.py list_models docstring, 0.x); absent = descending, as
        # the Hub's own Link URLs show (``sort=likes&direction=-1``).
        direction = req.get("direction")
        descending = direction is None or direction == "-1"
        ordered = render.after_cursor(repos, sort, decoded, descending=descending)
        page = ordered[:page_size]
        items = [
            render.listing_item(
                r,
                expand=expand,
                full=req.flag("full"),
                card_data=req.flag("cardData"),
                config=req.flag("config"),
            )
            for r in page
        ]
    headers: dict[str, str] = {}
    if len(ordered) > page_size:
        last = page[-1]
        cursor = render.encode_cursor(render.sort_value(last, sort), last.object_id)
        headers["Link"] = emu.link(req.path, req.params, cursor)
    return json_reply(items, headers=headers)


def _model_info(emu: HubEmulator, req: Request, repo_id: str, revision: str) -> Reply:

    expand = req.all("expand", "expand[]")
    if any(e not in render.EXPAND_PROPERTIES for e in expand):
        return error_reply(400, '"expand" must be one of the allowed values')
    with emu.state.lock:
        found = _repo_commit(emu, req, repo_id, revision, content=False)
        if not isinstance(found, tuple):
            return found
        repo, commit = found
        return json_reply(render.info_item(repo, commit, expand=expand, blobs=req.flag("blobs")))


def _tree(emu: HubEmulator, req: Request, repo_id: str, revision: str, folder: str) -> Reply:

    with emu.state.lock:
        found = _repo_commit(emu, req, repo_id, revision, content=False)
        if not isinstance(found, tuple):
            return found
        _repo, commit = found
        expand = req.flag("expand")
        entries = render.tree_entries(
            commit, folder, recursive=req.flag("recursive"), expand=expand
        )
    if entries is None:
        return error_reply(
            404,
            f'{folder} does not exist on "{revision}"',
            "EntryNotFound",
            extra={"X-Repo-Commit": commit.sha},
        )
    # Keyset on the path: a cursor names the last path of the previous page.
    cursor = req.get("cursor")
    if cursor:
        entries = [e for e in entries if e["path"] > unquote(cursor)]
    size = emu.tree_expand_page_size if expand else emu.tree_page_size
    page = entries[:size]
    headers: dict[str, str] = {}
    if len(entries) > size:
        headers["Link"] = emu.link(req.path, req.params, quote(page[-1]["path"], safe=""))
    return json_reply(page, headers=headers)


def _paths_info(emu: HubEmulator, req: Request, repo_id: str, revision: str) -> Reply:
    if req.headers.get("content-type", "").startswith("application/json"):
        data = json.loads(req.body or b"{}")
        wanted = list(data.get("paths", []))
        expand = bool(data.get("expand"))
    else:
        form = parse_qsl(req.body.decode(), keep_blank_values=True)
        wanted = [v for k, v in form if k == "paths"]
        expand = any(k == "expand" and v.lower() == "true" for k, v in form)
    with emu.state.lock:
        found = _repo_commit(emu, req, repo_id, revision, content=False)
        if not isinstance(found, tuple):
            return found
        _repo, commit = found
        everything = render.tree_entries(commit, "", recursive=True, expand=expand) or []
    by_path = {e["path"]: e for e in everything}
    return json_reply([by_path[p] for p in wanted if p in by_path])


def _refs(emu: HubEmulator, req: Request, repo_id: str) -> Reply:

    with emu.state.lock:
        repo = _access(emu, req, repo_id, content=False)
        if not isinstance(repo, Repo):
            return repo
        head = repo.head.sha
    branch = {"name": "main", "ref": "refs/heads/main", "targetCommit": head}
    return json_reply({"branches": [branch], "tags": [], "converts": []})


# --- files ------------------------------------------------------------------------------------


def _resolve(
    emu: HubEmulator, req: Request, repo_id: str, revision: str, path: str, cache: bool = False
) -> Reply:
    """``/{repo}/resolve/{rev}/{path}``: LFS files 302 to the CDN; git files 307 to the
    same-host ``/api/resolve-cache/...`` URL, which serves them (reference 3.1)."""

    with emu.state.lock:
        found = _repo_commit(emu, req, repo_id, revision, content=True)
        if not isinstance(found, tuple):
            return found
        _repo, commit = found
        blob = commit.files.get(path)
    return resolve_reply(emu, req, "models", repo_id, commit, path, blob, cache=cache)


def resolve_reply(
    emu: HubEmulator,
    req: Request,
    kind: str,
    repo_id: str,
    commit: Commit,
    path: str,
    blob: Blob | None,
    *,
    cache: bool = False,
) -> Reply:
    """The answer of ``resolve`` for ``blob`` at ``commit`` (models and datasets alike, ``kind``
    being the URL's repo type): 404 without it, else the cache's bytes or the redirect."""
    if blob is None:
        return error_reply(
            404, "Entry not found", "EntryNotFound", extra={"X-Repo-Commit": commit.sha}
        )
    etag = blob.sha256 if blob.lfs else blob.git_oid
    headers = {
        "X-Repo-Commit": commit.sha,
        "X-Linked-Size": str(blob.size),
        "X-Linked-Etag": f'"{etag}"',
        "ETag": f'"{etag}"',
        "Accept-Ranges": "bytes",
        "Cache-Control": "no-store",
        "Access-Control-Expose-Headers": (
            "X-Repo-Commit,X-Request-Id,X-Error-Code,X-Error-Message,X-Total-Count,ETag,Link,"
            "Accept-Ranges,Content-Range,X-Linked-Size,X-Linked-ETag,X-Xet-Hash"
        ),
    }
    if cache:
        return serve_blob(req, blob, {"ETag": f'"{etag}"', "X-Repo-Commit": commit.sha})
    if blob.lfs:
        location = emu.cdn_url(blob)
        body = f"Found. Redirecting to {location}".encode()
        return Reply(302, {**headers, "Location": location, "Content-Type": "text/plain"}, body)
    location = f"/api/resolve-cache/{kind}/{repo_id}/{commit.sha}/{quote(path)}"
    body = f"Temporary Redirect. Redirecting to {location}".encode()
    return Reply(307, {**headers, "Location": location, "Content-Type": "text/plain"}, body)


def _cdn(emu: HubEmulator, req: Request) -> Reply:

    parts = req.path.split("/")
    sha256 = parts[-1]
    expires = req.get("Expires") or ""
    if not expires.isdigit() or req.get("Signature") != emu.sign(req.path, int(expires)):
        return error_reply(403, "AccessDenied: bad signature")
    if int(expires) < time.time():
        return error_reply(403, "AccessDenied: Request has expired")
    blob = emu.state.blobs.get(sha256)
    if blob is None:
        return error_reply(404, "NoSuchKey")
    # The CDN's ETag is its own object hash, not the sha256 (reference 3.1: the Xet hash).
    etag = hashlib.sha1(sha256.encode(), usedforsecurity=False).hexdigest()
    return serve_blob(req, blob, {"ETag": f'"{etag}"'})


def serve_blob(req: Request, blob: Blob, extra: dict[str, str]) -> Reply:
    """200 with the whole file, or 206 for a satisfiable ``Range``, or 416."""

    headers = {"Accept-Ranges": "bytes", "Content-Type": "application/octet-stream", **extra}
    wanted = None if req.ignore_range else req.headers.get("range")
    match = _RANGE.fullmatch(wanted.strip()) if wanted else None
    if match is None or match.group(1) == match.group(2) == "":
        # No Range, or one we do not understand: RFC 9110 says ignore it.
        return Reply(200, headers, blob=blob, start=0, end=blob.size - 1)
    first, last = match.groups()
    if first == "":  # suffix range: the last N bytes
        start, end = max(0, blob.size - int(last)), blob.size - 1
        unsatisfiable = int(last) == 0
    else:
        start = int(first)
        end = min(int(last), blob.size - 1) if last else blob.size - 1
        unsatisfiable = start >= blob.size or (last != "" and int(last) < start)
    if unsatisfiable:
        return Reply(416, {**headers, "Content-Range": f"bytes */{blob.size}"})
    headers["Content-Range"] = f"bytes {start}-{end}/{blob.size}"
    return Reply(206, headers, blob=blob, start=start, end=end)
