"""quants publish / quants pull: a snapshot to and from a Hub dataset repo.

Publishing is ONE commit; a pull fetches only changed, manifest-named files; no token shown.
Details: docs/internals/snapshot.md#hubsync
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crawler.base.config import Settings
from crawler.base.errors import HubError, HubNotFound, HubUnavailable, SnapshotError
from crawler.catalog import Catalog
from crawler.catalog.scans import get_state, set_state
from crawler.snapshot.import_ import ImportSummary, import_snapshot, verify_snapshot
from crawler.snapshot.manifest import (
    FILES,
    MANIFEST_NAME,
    OPTIONAL_FILES,
    ManifestError,
    parse_manifest,
)

__all__ = ["PublishResult", "PullResult", "publish_snapshot", "pull_snapshot"]

REPO_TYPE = "dataset"


@dataclass(frozen=True, slots=True)
class PublishResult:
    """What ``publish_snapshot`` did."""

    repo_id: str
    commit: str | None
    files: int
    url: str

    def to_json(self) -> dict[str, Any]:
        """Stable JSON shape."""
        return {"repo": self.repo_id, "commit": self.commit, "files": self.files, "url": self.url}


@dataclass(frozen=True, slots=True)
class PullResult:
    """What ``pull_snapshot`` did; ``imported`` is None when the manifest was imported before."""

    repo_id: str
    commit: str | None
    bytes_downloaded: int
    imported: ImportSummary | None

    def to_json(self) -> dict[str, Any]:
        """Stable JSON shape."""
        return {
            "repo": self.repo_id,
            "commit": self.commit,
            "bytes_downloaded": self.bytes_downloaded,
            "imported": self.imported.to_json() if self.imported is not None else None,
        }


def _hub_error(exc: Exception, repo_id: str) -> HubError:
    """huggingface_hub's exception as ours (its messages name URLs, never the token)."""
    from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError

    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    if isinstance(exc, RepositoryNotFoundError):
        return HubNotFound(f"dataset {repo_id}: not found or no access", repo_id=repo_id)
    if isinstance(exc, HfHubHTTPError):
        status = exc.response.status_code if exc.response is not None else None
        if status in (401, 403):
            return HubError(
                f"dataset {repo_id}: not authorised (HTTP {status}); publishing needs a token "
                "with write access (HF_TOKEN or `hf auth login`)",
                repo_id=repo_id,
                status=status,
            )
        return HubError(f"dataset {repo_id}: {first}", repo_id=repo_id, status=status)
    return HubUnavailable(f"dataset {repo_id}: {first}", repo_id=repo_id)


def _api(settings: Settings) -> Any:
    from huggingface_hub import HfApi

    # token=None lets huggingface_hub find it (HF_TOKEN, then its token file).
    return HfApi(endpoint=settings.hf_endpoint, token=settings.hf_token or None)


def publish_snapshot(
    settings: Settings, snapshot: Path, repo_id: str, *, message: str | None = None
) -> PublishResult:
    """Upload the snapshot directory to dataset ``repo_id`` as one commit (created if needed)."""
    import httpx2
    from huggingface_hub import CommitOperationAdd, CommitOperationDelete
    from huggingface_hub.errors import HfHubHTTPError

    manifest = verify_snapshot(snapshot)  # never publish a damaged snapshot
    names = [*sorted(manifest.files), MANIFEST_NAME]
    api = _api(settings)
    created = False
    try:
        existed = api.repo_exists(repo_id, repo_type=REPO_TYPE)
        url = str(api.create_repo(repo_id, repo_type=REPO_TYPE, exist_ok=True))
        created = not existed
        remote = set(api.list_repo_files(repo_id, repo_type=REPO_TYPE))
        ops: list[Any] = [
            CommitOperationAdd(path_in_repo=name, path_or_fileobj=str(snapshot / name))
            for name in names
        ]
        known = {*FILES, *OPTIONAL_FILES}
        ops += [CommitOperationDelete(path) for path in sorted(remote & known - set(names))]
        info = api.create_commit(
            repo_id,
            operations=ops,
            repo_type=REPO_TYPE,
            commit_message=message or f"quants snapshot (scans to {manifest.scans_to})",
        )
    except (HfHubHTTPError, httpx2.HTTPError, OSError) as exc:
        error = _hub_error(exc, repo_id)
        if created:
            # The commit never happened: take away the empty dataset made for it, so no reader
            # ever finds a dataset without a snapshot.
            try:
                api.delete_repo(repo_id, repo_type=REPO_TYPE, missing_ok=True)
            except (HfHubHTTPError, httpx2.HTTPError, OSError):
                raise error from None
            error = type(error)(
                f"{error}; nothing was published (the new dataset was removed again)",
                repo_id=repo_id,
                status=error.status,
            )
        raise error from None
    return PublishResult(repo_id, getattr(info, "oid", None), len(names), url)


def _check_complete(folder: Path, repo_id: str, commit: str) -> None:
    """SnapshotError naming what a pulled dataset lacks: the manifest, or the files it lists."""
    from crawler.snapshot.manifest import ManifestError, parse_manifest

    where = f"dataset {repo_id} at {commit[:12]}"
    manifest = folder / MANIFEST_NAME
    if not manifest.is_file():
        raise SnapshotError(
            f"{where} holds no quants snapshot (no {MANIFEST_NAME}): nothing was published to it,"
            " or it is not a quants dataset"
        )
    try:
        listed = parse_manifest(manifest.read_text("utf-8", errors="replace")).files
    except ManifestError:
        return  # verify_snapshot names the fault
    missing = sorted(name for name in listed if not (folder / name).is_file())
    if missing:
        raise SnapshotError(
            f"{where} is incomplete: {MANIFEST_NAME} lists {', '.join(missing)}, which the"
            " dataset does not hold"
        )


def _blob_bytes(cache: Path) -> int:
    return sum(p.stat().st_size for p in cache.rglob("blobs/*") if p.is_file())


#: A manifest is a few hundred bytes a file; anything this large is not one.
MAX_MANIFEST_BYTES = 1024 * 1024


def _refuse(repo_id: str, message: str) -> SnapshotError:
    return SnapshotError(f"dataset {repo_id}: {message}; nothing was downloaded or imported")


def pull_snapshot(
    settings: Settings, catalog: Catalog, repo_id: str, *, revision: str | None = None
) -> PullResult:
    """Download dataset ``repo_id`` (at ``revision``) and import it into ``catalog``.

    A dataset is untrusted input: the manifest is fetched first (bounded), then ONLY the files
    it names, each after the Hub's listing of it agrees with the size (and, for LFS files, the
    sha256) the manifest declares; verify_snapshot then checks every downloaded byte's sha256
    and every row before the import writes anything. Other files of the dataset are never read.
    """
    import httpx2
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import HfHubHTTPError

    cache = settings.resolved_data_dir / "hub-cache"
    cache.mkdir(parents=True, exist_ok=True)
    before = _blob_bytes(cache)
    api = _api(settings)
    token = settings.hf_token or None

    def download(name: str, commit: str) -> Path:
        return Path(
            hf_hub_download(
                repo_id,
                name,
                repo_type=REPO_TYPE,
                revision=commit,
                cache_dir=cache,
                endpoint=settings.hf_endpoint,
                token=token,
            )
        )

    try:
        commit = str(api.dataset_info(repo_id, revision=revision).sha)
        listed = {
            p.path: p
            for p in api.get_paths_info(
                repo_id, [MANIFEST_NAME], repo_type=REPO_TYPE, revision=commit
            )
        }
        entry = listed.get(MANIFEST_NAME)
        if entry is None or not hasattr(entry, "size"):
            raise _refuse(repo_id, f"no {MANIFEST_NAME} (not a quants snapshot)")
        if entry.size > MAX_MANIFEST_BYTES:
            raise _refuse(repo_id, f"{MANIFEST_NAME} is {entry.size} bytes, not a manifest")
        manifest_file = download(MANIFEST_NAME, commit)
        try:
            manifest = parse_manifest(manifest_file.read_text("utf-8", errors="replace"))
        except ManifestError as exc:
            raise _refuse(repo_id, str(exc)) from None
        names = sorted(manifest.files)
        listed = {
            p.path: p
            for p in api.get_paths_info(repo_id, names, repo_type=REPO_TYPE, revision=commit)
        }
        for name in names:
            want = manifest.files[name]
            have = listed.get(name)
            if have is None or not hasattr(have, "size"):
                raise _refuse(repo_id, f"{name}: named by the manifest but not in the dataset")
            if have.size != want.bytes:
                raise _refuse(
                    repo_id, f"{name}: {have.size} bytes on the Hub, the manifest says {want.bytes}"
                )
            lfs = getattr(have, "lfs", None)
            if lfs is not None and lfs.sha256 != want.sha256:
                raise _refuse(repo_id, f"{name}: sha256 on the Hub differs from the manifest's")
        for name in names:
            download(name, commit)
    except (HfHubHTTPError, httpx2.HTTPError, OSError) as exc:
        raise _hub_error(exc, repo_id) from None
    downloaded = _blob_bytes(cache) - before
    folder = manifest_file.parent
    _check_complete(folder, repo_id, commit)
    verify_snapshot(folder)  # sizes, sha256 and every row: a clear error, no import
    manifest_sha = hashlib.sha256(manifest_file.read_bytes()).hexdigest()
    key = f"snapshot:{repo_id}"
    if get_state(catalog, key) == manifest_sha:
        return PullResult(repo_id, commit, downloaded, None)
    summary = import_snapshot(
        catalog, folder, source=f"dataset {repo_id}", source_revision=commit[:64]
    )
    set_state(catalog, key, manifest_sha)
    return PullResult(repo_id, commit, downloaded, summary)
