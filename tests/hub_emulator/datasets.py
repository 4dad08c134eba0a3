"""Dataset repos and the write path of the emulated Hub: what ``quants publish`` / ``pull`` use.

Every shape below is read from huggingface_hub 2.4's source (the client these routes serve):

- ``POST /api/repos/create`` {name, organization, type} -> ``{"url"}``; 409 when it exists
- ``DELETE /api/repos/delete`` {name, organization, type} -> 200; 404 RepoNotFound when missing
  (hf_api.py ``delete_repo``)
  (hf_api.py ``create_repo``: ``exist_ok`` swallows a 409, reads ``r.json()["url"]``).
- ``GET /api/datasets/{repo}[/revision/{rev}]`` -> DatasetInfo keys (hf_api.py ``dataset_info``,
  ``DatasetInfo.__init__``: ``id, sha, lastModified, private, siblings[rfilename]``...).
- ``GET /api/datasets/{repo}/tree/{rev}[/{path}]`` and ``POST .../paths-info/{rev}``: the model
  routes' shapes (hf_api.py ``list_repo_tree`` / ``get_paths_info``).
- ``POST /api/datasets/{repo}/preupload/{rev}`` {files[path, sample, size]} ->
  ``{files[path, uploadMode lfs|regular, shouldIgnore, oid?]}`` (_commit_api.py
  ``_fetch_upload_modes`` / ``_validate_preupload_info``; ``oid`` = the remote file's sha256 for
  LFS files and git sha1 for regular ones, compared with ``CommitOperationAdd._local_oid`` to drop
  unchanged files from the commit).
- ``POST /datasets/{repo}.git/info/lfs/objects/batch`` (lfs.py ``post_lfs_batch_info``, the Git
  LFS batch API) -> ``{transfer: basic, objects[oid, size, actions{upload{href}, verify{href}}]}``;
  an object the server already has gets no ``actions`` (lfs.py ``lfs_upload``: "already present
  upstream"). The upload is one ``PUT`` of the bytes to ``href`` (lfs.py ``_upload_single_part``),
  then ``POST`` verify {oid, size}.
- ``POST /api/datasets/{repo}/commit/{rev}`` ndjson lines ``{key: header|file|lfsFile|deletedFile,
  value}`` (_commit_api.py ``_prepare_commit_payload`` / ``_send_commit``) ->
  ``{commitUrl, commitOid}``.
- ``GET|HEAD /datasets/{repo}/resolve/{rev}/{path}``: as for models (file_download.py):
  LFS files 302 to the CDN, git files 307 to ``/api/resolve-cache/datasets/...``.

Not emulated: Xet. huggingface_hub uploads through Xet whenever ``hf_xet`` is installed
(_commit_api.py ``_upload_files``: ``if is_xet_available()``), whatever the server says; the
documented switch ``HF_HUB_DISABLE_XET=1`` (constants.py) forces the LFS batch path above, so the
tests set it. Downloads stay plain HTTP because no entry carries ``xetHash`` / ``X-Xet-Hash``.
Write access: any valid token may create a dataset and commit to it; anonymous writes get 401.
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import TYPE_CHECKING
from urllib.parse import unquote

from tests.hub_emulator import render
from tests.hub_emulator.reply import Reply, error_reply, json_reply
from tests.hub_emulator.state import Blob, Commit, Repo

if TYPE_CHECKING:
    from tests.hub_emulator.routes import Request
    from tests.hub_emulator.server import HubEmulator

# The default .gitattributes of a new dataset repo stores these in LFS (plus anything >= 10 MB).
LFS_SUFFIXES = (".parquet", ".arrow", ".bin", ".gz", ".zst", ".tar", ".zip")
_GITATTRIBUTES = b"*.parquet filter=lfs diff=lfs merge=lfs -text\n"


def handles(parts: list[str]) -> bool:
    """Whether a request path (split on '/', leading '' dropped) is one of these routes."""
    return (
        parts[:2] in (["api", "datasets"], ["api", "repos"])
        or parts[:3] == ["api", "resolve-cache", "datasets"]
        or parts[:1] in (["datasets"], ["lfs-upload"], ["lfs-verify"])
    )


def route(emu: HubEmulator, req: Request, parts: list[str]) -> Reply:
    """Dispatch one dataset or write request."""
    if parts == ["api", "repos", "create"] and req.method == "POST":
        return _create(emu, req)
    if parts == ["api", "repos", "delete"] and req.method == "DELETE":
        return _delete(emu, req)
    if parts[:1] == ["lfs-upload"] and len(parts) == 2 and req.method == "PUT":
        return _lfs_put(emu, req, parts[1])
    if parts[:1] == ["lfs-verify"] and req.method == "POST":
        return _lfs_verify(emu, req)
    if parts[:2] == ["api", "datasets"] and len(parts) >= 4:
        repo_id = f"{unquote(parts[2])}/{unquote(parts[3])}"
        rest = parts[4:]
        if not rest and req.method == "GET":
            return _info(emu, req, repo_id, "main")
        if rest[:1] == ["revision"] and len(rest) == 2 and req.method == "GET":
            return _info(emu, req, repo_id, unquote(rest[1]))
        if rest[:1] == ["tree"] and len(rest) >= 2 and req.method == "GET":
            return _tree(emu, req, repo_id, unquote(rest[1]), unquote("/".join(rest[2:])))
        if rest[:1] == ["paths-info"] and len(rest) == 2 and req.method == "POST":
            return _paths_info(emu, req, repo_id, unquote(rest[1]))
        if rest[:1] == ["preupload"] and len(rest) == 2 and req.method == "POST":
            return _preupload(emu, req, repo_id, unquote(rest[1]))
        if rest[:1] == ["commit"] and len(rest) == 2 and req.method == "POST":
            return _commit(emu, req, repo_id, unquote(rest[1]))
    if parts[:3] == ["api", "resolve-cache", "datasets"] and len(parts) >= 7:
        repo_id = f"{parts[3]}/{parts[4]}"
        return _resolve(emu, req, repo_id, parts[5], unquote("/".join(parts[6:])), cache=True)
    if parts[:1] == ["datasets"] and len(parts) >= 3:
        name = unquote(parts[2])
        if name.endswith(".git") and parts[3:] == ["info", "lfs", "objects", "batch"]:
            return _lfs_batch(emu, req, f"{unquote(parts[1])}/{name.removesuffix('.git')}")
        if len(parts) >= 6 and parts[3] == "resolve" and req.method in ("GET", "HEAD"):
            repo_id = f"{unquote(parts[1])}/{name}"
            return _resolve(emu, req, repo_id, unquote(parts[4]), unquote("/".join(parts[5:])))
    return error_reply(404, "Sorry, we can't find the page you are looking for.")


# --- access -------------------------------------------------------------------------------------


def _token_error(emu: HubEmulator, req: Request, *, write: bool) -> Reply | None:
    if req.token is not None and req.token not in emu.state.valid_tokens:
        return error_reply(401, "Invalid credentials in Authorization header")
    if write and req.token is None:
        return error_reply(401, "Invalid username or password.")
    return None


def _found(
    emu: HubEmulator, req: Request, repo_id: str, revision: str, *, write: bool = False
) -> tuple[Repo, Commit] | Reply:
    bad = _token_error(emu, req, write=write)
    if bad is not None:
        return bad
    repo = emu.state.datasets.get(repo_id)
    if repo is None:
        return error_reply(404, "Repository not found", "RepoNotFound")
    commit = repo.find_commit(revision)
    if commit is None:
        return error_reply(404, f"Invalid rev id: {revision}", "RevisionNotFound")
    return repo, commit


# --- repo ---------------------------------------------------------------------------------------


def _create(emu: HubEmulator, req: Request) -> Reply:
    bad = _token_error(emu, req, write=True)
    if bad is not None:
        return bad
    data = json.loads(req.body or b"{}")
    if data.get("type") != "dataset":
        return error_reply(400, "the emulator creates dataset repos only")
    name, org = data.get("name"), data.get("organization")
    if not name or not org:
        return error_reply(400, "name and organization are required")
    repo_id = f"{org}/{name}"
    url = f"{emu.endpoint}/datasets/{repo_id}"
    with emu.state.lock:
        if repo_id in emu.state.datasets:
            # hf_api.py create_repo reads r.json()["url"] after swallowing this 409 (exist_ok).
            message = "You already created this dataset repo"
            return json_reply(
                {"error": message, "url": url}, 409, headers={"X-Error-Message": message}
            )
        gitattributes = Blob.from_bytes(_GITATTRIBUTES, lfs=False)
        emu.state.create_dataset(repo_id, {".gitattributes": gitattributes})
    return json_reply({"url": url, "name": repo_id})


def _delete(emu: HubEmulator, req: Request) -> Reply:
    """hf_api.py ``delete_repo``: DELETE /api/repos/delete {name, organization, type}; a missing
    repo is a 404 RepositoryNotFoundError (``missing_ok`` swallows it)."""
    bad = _token_error(emu, req, write=True)
    if bad is not None:
        return bad
    data = json.loads(req.body or b"{}")
    if data.get("type") != "dataset":
        return error_reply(400, "the emulator deletes dataset repos only")
    repo_id = f"{data.get('organization')}/{data.get('name')}"
    with emu.state.lock:
        if emu.state.datasets.pop(repo_id, None) is None:
            return error_reply(404, "Repository not found", "RepoNotFound")
    return json_reply({})


def _info(emu: HubEmulator, req: Request, repo_id: str, revision: str) -> Reply:
    with emu.state.lock:
        found = _found(emu, req, repo_id, revision)
        if not isinstance(found, tuple):
            return found
        repo, commit = found
        return json_reply(
            {
                "_id": repo.object_id,
                "id": repo.repo_id,
                "author": repo.author,
                "sha": commit.sha,
                "lastModified": render.iso(commit.date),
                "createdAt": render.iso(repo.created_at),
                "private": False,
                "gated": False,
                "disabled": False,
                "downloads": 0,
                "likes": 0,
                "tags": [],
                "cardData": None,
                "siblings": [{"rfilename": p} for p in sorted(commit.files)],
                "usedStorage": sum(b.size for b in commit.files.values()),
            }
        )


def _tree(emu: HubEmulator, req: Request, repo_id: str, revision: str, folder: str) -> Reply:
    with emu.state.lock:
        found = _found(emu, req, repo_id, revision)
        if not isinstance(found, tuple):
            return found
        entries = render.tree_entries(
            found[1], folder.strip("/"), recursive=req.flag("recursive"), expand=req.flag("expand")
        )
    if entries is None:
        return error_reply(404, f'{folder} does not exist on "{revision}"', "EntryNotFound")
    return json_reply(entries)


def _paths_info(emu: HubEmulator, req: Request, repo_id: str, revision: str) -> Reply:
    from urllib.parse import parse_qsl

    form = parse_qsl(req.body.decode(), keep_blank_values=True)
    wanted = [v for k, v in form if k == "paths"]
    with emu.state.lock:
        found = _found(emu, req, repo_id, revision)
        if not isinstance(found, tuple):
            return found
        everything = render.tree_entries(found[1], "", recursive=True, expand=False) or []
    by_path = {e["path"]: e for e in everything}
    return json_reply([by_path[p] for p in wanted if p in by_path])


# --- writes -------------------------------------------------------------------------------------


def _wants_lfs(path: str, size: int) -> bool:
    return path.endswith(LFS_SUFFIXES) or size >= 10 * 1024 * 1024


def _preupload(emu: HubEmulator, req: Request, repo_id: str, revision: str) -> Reply:
    with emu.state.lock:
        found = _found(emu, req, repo_id, revision, write=True)
        if not isinstance(found, tuple):
            return found
        files = found[1].files
        out = []
        for item in json.loads(req.body or b"{}").get("files", []):
            path, size = item["path"], int(item["size"])
            lfs = _wants_lfs(path, size)
            entry = {"path": path, "uploadMode": "lfs" if lfs else "regular", "shouldIgnore": False}
            remote = files.get(path)
            if remote is not None:
                entry["oid"] = remote.sha256 if remote.lfs else remote.git_oid
            out.append(entry)
    return json_reply({"files": out, "commitOid": found[1].sha})


def _lfs_batch(emu: HubEmulator, req: Request, repo_id: str) -> Reply:
    with emu.state.lock:
        found = _found(emu, req, repo_id, "main", write=True)
        if not isinstance(found, tuple):
            return found
        data = json.loads(req.body or b"{}")
        if data.get("operation") != "upload" or "basic" not in data.get("transfers", ["basic"]):
            return error_reply(422, "only basic uploads are emulated")
        objects = []
        for obj in data.get("objects", []):
            oid, size = obj["oid"], int(obj["size"])
            item: dict[str, object] = {"oid": oid, "size": size, "authenticated": True}
            if oid not in emu.state.blobs:
                item["actions"] = {
                    "upload": {"href": f"{emu.endpoint}/lfs-upload/{oid}", "header": {}},
                    "verify": {"href": f"{emu.endpoint}/lfs-verify", "header": {}},
                }
            objects.append(item)
    return json_reply({"transfer": "basic", "objects": objects})


def _lfs_put(emu: HubEmulator, req: Request, oid: str) -> Reply:
    if hashlib.sha256(req.body).hexdigest() != oid:
        return error_reply(400, "uploaded content does not match its oid")
    with emu.state.lock:
        emu.state.blobs.setdefault(oid, Blob.from_bytes(req.body, lfs=True))
    return Reply(200, {"Content-Type": "text/plain"}, b"")


def _lfs_verify(emu: HubEmulator, req: Request) -> Reply:
    data = json.loads(req.body or b"{}")
    blob = emu.state.blobs.get(str(data.get("oid")))
    if blob is None or blob.size != data.get("size"):
        return error_reply(404, "object not uploaded")
    return json_reply({"success": True})


def _commit(emu: HubEmulator, req: Request, repo_id: str, revision: str) -> Reply:
    if not req.headers.get("content-type", "").startswith("application/x-ndjson"):
        return error_reply(400, "expected application/x-ndjson")
    lines = [json.loads(line) for line in req.body.splitlines() if line.strip()]
    if not lines or lines[0].get("key") != "header":
        return error_reply(400, "the first line must be the commit header")
    header = lines[0]["value"]
    with emu.state.lock:
        found = _found(emu, req, repo_id, revision, write=True)
        if not isinstance(found, tuple):
            return found
        repo, head = found
        if header.get("parentCommit") not in (None, head.sha):
            return error_reply(412, "A commit has happened since. Please refresh and try again.")
        put: dict[str, Blob] = {}
        delete: list[str] = []
        for line in lines[1:]:
            key, value = line.get("key"), line.get("value") or {}
            if key == "file":
                content = base64.b64decode(value["content"])
                put[value["path"]] = Blob.from_bytes(content, lfs=False)
            elif key == "lfsFile":
                blob = emu.state.blobs.get(value["oid"])
                if blob is None:
                    return error_reply(422, f"LFS object {value['oid']} was not uploaded")
                put[value["path"]] = blob
            elif key == "deletedFile":
                if value["path"] not in head.files:
                    return error_reply(404, "A file with this name doesn't exist")
                delete.append(value["path"])
            else:
                return error_reply(400, f"unknown commit operation {key!r}")
        commit = emu.state.commit_dataset(repo.repo_id, put, delete, title=header.get("summary"))
    url = f"{emu.endpoint}/datasets/{repo_id}/commit/{commit.sha}"
    return json_reply({"success": True, "commitOid": commit.sha, "commitUrl": url})


# --- reads --------------------------------------------------------------------------------------


def _resolve(
    emu: HubEmulator, req: Request, repo_id: str, revision: str, path: str, cache: bool = False
) -> Reply:
    from tests.hub_emulator.routes import resolve_reply

    with emu.state.lock:
        found = _found(emu, req, repo_id, revision)
        if not isinstance(found, tuple):
            return found
        commit = found[1]
        blob = commit.files.get(path)
    return resolve_reply(emu, req, "datasets", repo_id, commit, path, blob, cache=cache)
