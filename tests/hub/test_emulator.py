"""The emulator against the real huggingface_hub 2.4 client: shapes, pagination, redirects,
ranges, errors and faults behave as the live Hub does (huggingface_hub 2.4's calls)."""

from __future__ import annotations

import hashlib
import json
import os

import httpx2
import pytest
from huggingface_hub import (
    HfApi,
    constants,
    get_hf_file_metadata,
    get_session,
    hf_hub_download,
    hf_hub_url,
)
from huggingface_hub.errors import (
    GatedRepoError,
    HfHubHTTPError,
    RemoteEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)

from tests.fixtures import world
from tests.hub_emulator import Blob, Fault, HubEmulator

UNSLOTH = "unsloth/Qwen3.6-27B-GGUF"
GLM = "unsloth/GLM-4.5-Air-GGUF"
GATED = "google/gemma-3-12b-it-qat-q4_0-gguf"
PRIVATE = "quants-test/Private-Qwen3-8B-GGUF"
EXPAND = ["sha", "lastModified", "tags", "cardData", "gated"]


def gguf_repos(hub: HubEmulator) -> list[str]:
    """Public GGUF repos of the world, newest commit first."""
    repos = [r for r in hub.state.repos.values() if "gguf" in r.all_tags() and not r.private]
    return [r.repo_id for r in sorted(repos, key=lambda r: r.last_modified, reverse=True)]


def test_list_models_paginates_with_absolute_links_and_keeps_params(shared_hub):
    shared_hub.max_page_size = 3
    api = HfApi(endpoint=shared_hub.endpoint)
    models = list(api.list_models(filter="gguf", sort="last_modified", expand=EXPAND))
    expected = gguf_repos(shared_hub)
    assert [m.id for m in models] == expected
    pages = shared_hub.requests(path="/api/models")
    assert len(pages) == -(-len(expected) // 3)
    for page in pages:  # every page carries the original query (paginate follows Link verbatim)
        assert ("filter", "gguf") in page.params
        assert ("sort", "lastModified") in page.params
        assert [v for k, v in page.params if k == "expand"] == EXPAND
    assert all(("cursor" in dict(p.params)) for p in pages[1:])
    first = models[0]
    assert set(first.__dict__) >= {"id", "sha", "last_modified", "tags", "card_data", "_id"}
    assert first.downloads is None  # expand returns only what was asked
    assert first.last_modified == shared_hub.state.repos[first.id].last_modified


def test_list_models_stops_fetching_when_the_caller_stops(shared_hub):
    shared_hub.max_page_size = 2
    api = HfApi(endpoint=shared_hub.endpoint)
    for i, _ in enumerate(api.list_models(filter="gguf", sort="last_modified")):
        if i == 2:
            break
    assert len(shared_hub.requests(path="/api/models")) == 2


def test_list_models_filters_search_author_and_base_model_tags(shared_hub):
    api = HfApi(endpoint=shared_hub.endpoint)
    by_author = [m.id for m in api.list_models(filter="gguf", author="unsloth")]
    assert sorted(by_author) == sorted(
        r for r in gguf_repos(shared_hub) if r.startswith("unsloth/")
    )
    searched = {m.id for m in api.list_models(filter="gguf", search="mtp")}
    assert searched == {
        "havenoammo/Qwen3.6-27B-MTP-UD-GGUF",
        "localweights/Qwen3.6-27B-MTP-IMAT-IQ4_XS-Q8nextn-GGUF",
        "someone/Qwen3.6-27B-NoMTP-Q4_K_M-GGUF",  # search is a substring match, case-insensitive
    }
    lineage = {m.id for m in api.list_models(filter=["gguf", "base_model:quantized:Qwen/Qwen3-8B"])}
    assert lineage == {"lmstudio-community/Qwen3-8B-GGUF", "broken/Malformed-GGUF"}
    # Not a GGUF repo: absent from filter=gguf, present without it.
    assert "Qwen/Qwen3-8B" not in gguf_repos(shared_hub)
    assert "Qwen/Qwen3-8B" in {m.id for m in api.list_models(search="Qwen3-8B")}


def test_list_models_direction_ascending_pages_the_other_way(shared_hub):
    # huggingface_hub 0.x list_models(direction=...): "-1 sorts by descending order while all
    # other values sort by ascending order"; the Hub's Link URLs carry it on (direction=-1).
    import httpx2

    shared_hub.max_page_size = 3
    url: str | None = f"{shared_hub.endpoint}/api/models?filter=gguf&sort=lastModified&direction=1"
    seen: list[str] = []
    while url:
        reply = httpx2.get(url)
        seen += [m["id"] for m in reply.json()]
        url = reply.links.get("next", {}).get("url")
        assert url is None or "direction=1" in url
    assert sorted(seen) == sorted(gguf_repos(shared_hub))  # each repo once, across the pages
    dates = [shared_hub.state.repos[r].last_modified for r in seen]
    assert dates == sorted(dates)


def test_list_models_full_and_bracketed_expand(shared_hub):
    api = HfApi(endpoint=shared_hub.endpoint)
    full = next(iter(api.list_models(author="bartowski", full=True)))
    assert full.sha and full.siblings
    assert all(s.size is None and s.lfs is None for s in full.siblings)  # rfilename only
    # The web UI's expand[]= form is accepted too.
    r = get_session().get(
        f"{shared_hub.endpoint}/api/models",
        params=[("author", "bartowski"), ("expand[]", "sha"), ("expand[]", "gguf")],
    )
    item = r.json()[0]
    assert set(item) == {"_id", "id", "sha", "gguf"}
    assert item["gguf"]["architecture"] == "gemma3"
    bad = get_session().get(f"{shared_hub.endpoint}/api/models", params={"expand": "nope"})
    assert bad.status_code == 400


def test_model_info_shapes_blobs_and_revisions(hub):
    api = HfApi(endpoint=hub.endpoint)
    info = api.model_info(UNSLOTH, files_metadata=True)
    repo = hub.state.repos[UNSLOTH]
    assert info.sha == repo.head.sha and len(info.sha) == 40
    assert info.card_data.base_model == "Qwen/Qwen3.6-27B"
    assert "base_model:quantized:Qwen/Qwen3.6-27B" in info.tags
    assert info.gguf["architecture"] == "qwen35"
    siblings = {s.rfilename: s for s in info.siblings}
    q8 = siblings["Qwen3.6-27B-Q8_0.gguf"]
    assert q8.lfs.sha256 == repo.head.files["Qwen3.6-27B-Q8_0.gguf"].sha256
    assert siblings["README.md"].lfs is None and siblings["README.md"].size > 0
    old = info.sha
    new = hub.state.commit(UNSLOTH, {"README.md": Blob.from_bytes(b"# v2\n")})
    assert api.model_info(UNSLOTH).sha == new.sha
    assert api.model_info(UNSLOTH, revision=old).sha == old  # history stays resolvable
    assert api.model_info(UNSLOTH, revision=old[:7]).sha == old
    with pytest.raises(RevisionNotFoundError):
        api.model_info(UNSLOTH, revision="refs/pr/1")
    assert hub.requests(path="/revision/refs%2Fpr%2F1")  # encoded as the client sends it


def test_list_repo_tree_recursive_folders_and_paging(shared_hub):
    api = HfApi(endpoint=shared_hub.endpoint)
    entries = list(api.list_repo_tree(GLM, recursive=True))
    kinds = {e.path: type(e).__name__ for e in entries}
    assert kinds["UD-Q4_K_XL"] == "RepoFolder"
    shard = "UD-Q4_K_XL/GLM-4.5-Air-UD-Q4_K_XL-00001-of-00002.gguf"
    assert kinds[shard] == "RepoFile"
    by_path = {e.path: e for e in entries}
    blob = shared_hub.state.repos[GLM].head.files[shard]
    assert by_path[shard].lfs.sha256 == blob.sha256 and by_path[shard].size == blob.size
    sub = list(api.list_repo_tree(GLM, path_in_repo="UD-Q4_K_XL"))
    assert sorted(e.path for e in sub) == sorted(p for p in kinds if p.startswith("UD-Q4_K_XL/"))
    assert shared_hub.requests(path="/tree/main/UD-Q4_K_XL")
    with pytest.raises(RemoteEntryNotFoundError):
        list(api.list_repo_tree(GLM, path_in_repo="nope"))
    shared_hub.tree_page_size = 2
    shared_hub.clear_log()
    assert [e.path for e in api.list_repo_tree(GLM, recursive=True)] == [e.path for e in entries]
    assert len(shared_hub.requests(path="/tree/")) == -(-len(entries) // 2)


def test_ranged_get_follows_302_to_cdn_without_the_token(shared_hub):
    path = "Qwen3.6-27B-Q8_0.gguf"
    blob = shared_hub.state.repos[UNSLOTH].head.files[path]
    url = hf_hub_url(UNSLOTH, path, endpoint=shared_hub.endpoint)
    r = get_session().get(
        url, headers={"Range": "bytes=0-1023", "authorization": "Bearer hf_test_user"}
    )
    assert r.status_code == 206
    assert r.headers["content-range"] == f"bytes 0-1023/{blob.size}"
    assert r.content[:4] == b"GGUF" and len(r.content) == 1024
    assert [h.status_code for h in r.history] == [302]
    hop = r.history[0].headers
    assert hop["x-linked-etag"] == f'"{blob.sha256}"'
    assert hop["x-linked-size"] == str(blob.size)
    assert hop["x-repo-commit"] == shared_hub.state.repos[UNSLOTH].head.sha
    hub_req, cdn_req = shared_hub.requests()
    assert (hub_req.origin, hub_req.authorization, hub_req.status) == ("hub", True, 302)
    assert (cdn_req.origin, cdn_req.authorization, cdn_req.status) == ("cdn", False, 206)
    assert cdn_req.range == "bytes=0-1023" and cdn_req.bytes_sent == 1024


def test_file_metadata_stops_at_the_cdn_and_small_files_use_resolve_cache(shared_hub):
    path = "Qwen3.6-27B-Q8_0.gguf"
    blob = shared_hub.state.repos[UNSLOTH].head.files[path]
    meta = get_hf_file_metadata(hf_hub_url(UNSLOTH, path, endpoint=shared_hub.endpoint))
    assert (meta.etag, meta.size) == (blob.sha256, blob.size)
    assert meta.commit_hash == shared_hub.state.repos[UNSLOTH].head.sha
    assert not shared_hub.requests(origin="cdn")
    readme = hf_hub_download(UNSLOTH, "README.md", endpoint=shared_hub.endpoint)
    with open(readme, encoding="utf-8") as fh:
        assert fh.read().startswith("---\nlibrary_name: gguf")
    assert shared_hub.requests(path="/api/resolve-cache/models/unsloth/")
    # An LFS file: HEAD stops at the 302, then the CDN serves the whole file.
    mmproj = hf_hub_download(UNSLOTH, "mmproj-F16.gguf", endpoint=shared_hub.endpoint)
    blob = shared_hub.state.repos[UNSLOTH].head.files["mmproj-F16.gguf"]
    assert os.path.getsize(mmproj) == blob.size
    with open(mmproj, "rb") as fh:
        assert hashlib.sha256(fh.read()).hexdigest() == blob.sha256  # exact below 8 MiB


def test_range_edge_cases(shared_hub):
    path = "Qwen3.6-27B-Q8_0.gguf"
    size = shared_hub.state.repos[UNSLOTH].head.files[path].size
    url = hf_hub_url(UNSLOTH, path, endpoint=shared_hub.endpoint)
    session = get_session()
    beyond = session.get(url, headers={"Range": f"bytes={size}-{size + 10}"})
    assert beyond.status_code == 416 and beyond.headers["content-range"] == f"bytes */{size}"
    tail = session.get(url, headers={"Range": f"bytes={size - 10}-{size + 100}"})
    assert tail.status_code == 206 and len(tail.content) == 10
    suffix = session.get(url, headers={"Range": "bytes=-5"})
    assert suffix.headers["content-range"] == f"bytes {size - 5}-{size - 1}/{size}"
    head = session.head(url, follow_redirects=True)
    assert head.status_code == 200 and head.headers["content-length"] == str(size)


def test_gated_repo_metadata_is_public_files_are_not(shared_hub):
    api = HfApi(endpoint=shared_hub.endpoint)
    assert api.model_info(GATED).gated == "manual"
    files = [e.path for e in api.list_repo_tree(GATED)]
    assert "gemma-3-12b-it-q4_0.gguf" in files
    url = hf_hub_url(GATED, "gemma-3-12b-it-q4_0.gguf", endpoint=shared_hub.endpoint)
    with pytest.raises(GatedRepoError) as anon:
        get_hf_file_metadata(url)
    assert anon.value.response.status_code == 401
    with pytest.raises(GatedRepoError) as denied:
        get_hf_file_metadata(url, token="hf_test_user")
    assert denied.value.response.status_code == 403
    assert get_hf_file_metadata(url, token="hf_test_granted").size > 0


def test_private_and_missing_repos(shared_hub):
    api = HfApi(endpoint=shared_hub.endpoint)
    # Anonymous: 401 without an error code. On an http:// endpoint huggingface_hub cannot map it
    # to RepositoryNotFoundError (REPO_API_REGEX wants https://): reference section 4.2.
    with pytest.raises(HfHubHTTPError) as anon:
        api.model_info(PRIVATE)
    assert anon.value.response.status_code == 401
    assert anon.value.response.headers.get("x-error-code") is None
    with pytest.raises(RepositoryNotFoundError):
        api.model_info(PRIVATE, token="hf_test_user")
    with pytest.raises(RepositoryNotFoundError):
        api.model_info("nobody/nothing", token="hf_test_user")
    assert api.model_info(PRIVATE, token="hf_test_granted").private is True
    assert PRIVATE not in {m.id for m in api.list_models(filter="gguf")}
    assert PRIVATE in {m.id for m in api.list_models(filter="gguf", token="hf_test_granted")}
    with pytest.raises(HfHubHTTPError) as bad:
        api.model_info(UNSLOTH, token="hf_wrong")
    assert bad.value.server_message == "Invalid credentials in Authorization header"


def test_429_is_retried_by_listings_but_not_by_model_info(shared_hub):
    api = HfApi(endpoint=shared_hub.endpoint)
    shared_hub.faults.add(Fault.rate_limited(retry_after=0), path="/api/models", nth=1)
    assert len(list(api.list_models(author="bartowski"))) == 1  # http_backoff: 1 s, then 200
    assert [r.status for r in shared_hub.requests(path="/api/models")] == [429, 200]
    shared_hub.faults.add(Fault.rate_limited(retry_after=0, reset_s=60), regex=r"^/api/models/")
    with pytest.raises(HfHubHTTPError) as err:
        api.model_info(UNSLOTH)
    assert err.value.response.status_code == 429
    assert "'api' rate limit" in str(err.value)
    assert err.value.response.headers["ratelimit"] == '"api";r=0;t=60'


def test_5xx_then_success_on_tree(shared_hub):
    api = HfApi(endpoint=shared_hub.endpoint)
    shared_hub.faults.add(Fault.http(503), path="/tree/", nth=1)
    assert list(api.list_repo_tree(GLM))
    assert [r.status for r in shared_hub.requests(path="/tree/")] == [503, 200]


def test_socket_faults_reach_the_client_as_httpx_errors(shared_hub):
    url = hf_hub_url(UNSLOTH, "Qwen3.6-27B-Q8_0.gguf", endpoint=shared_hub.endpoint)
    session = get_session()
    shared_hub.faults.add(Fault.reset(), origin="cdn", nth=1)
    with pytest.raises((httpx2.NetworkError, httpx2.RemoteProtocolError)):
        session.get(url, headers={"Range": "bytes=0-99"})
    shared_hub.faults.add(Fault.truncate(after_bytes=10), origin="cdn", nth=1)
    with pytest.raises(httpx2.RemoteProtocolError):
        session.get(url, headers={"Range": "bytes=0-99"})
    assert session.get(url, headers={"Range": "bytes=0-99"}).status_code == 206
    faults = [r.fault for r in shared_hub.requests(origin="cdn")]
    assert faults == ["reset", "truncate", None]


def test_ignored_range_streams_and_a_client_can_stop_early(hub, tmp_path):
    big = tmp_path / "big.gguf"
    with big.open("wb") as fh:
        fh.write(b"GGUF")
        fh.truncate(1 << 30)  # 1 GiB, sparse
    hub.state.create_repo("big/Big-GGUF", {"big.gguf": Blob.from_file(big)})
    hub.faults.add(Fault.ignore_range(), origin="cdn")
    url = hf_hub_url("big/Big-GGUF", "big.gguf", endpoint=hub.endpoint)
    with get_session().stream("GET", url, headers={"Range": "bytes=0-99"}) as r:
        assert r.status_code == 200 and r.headers["content-length"] == str(1 << 30)
        first = next(r.iter_bytes(4096))
    assert first.startswith(b"GGUF")
    sent = hub.requests(origin="cdn")[0].bytes_sent
    assert sent < 64 << 20  # the server stopped when the client went away


def test_sparse_file_served_without_reading_it_whole(hub, tmp_path):
    huge = tmp_path / "huge.gguf"
    with huge.open("wb") as fh:
        fh.write(b"GGUF")
        fh.truncate(100 << 30)  # 100 GiB logical
    blob = Blob.from_file(huge)
    hub.state.create_repo("big/Huge-GGUF", {"huge.gguf": blob})
    url = hf_hub_url("big/Huge-GGUF", "huge.gguf", endpoint=hub.endpoint)
    r = get_session().get(url, headers={"Range": f"bytes={(100 << 30) - 8}-"})
    assert r.status_code == 206 and r.content == b"\0" * 8


def test_repo_changes_and_vanishes_between_calls(hub, world_cache):
    api = HfApi(endpoint=hub.endpoint)
    path = "Qwen3.5-35B-A3B-UD-Q4_K_XL.gguf"
    repo_id = "unsloth/Qwen3.5-35B-A3B-GGUF"
    before = {e.path: e for e in api.list_repo_tree(repo_id)}[path]
    old_sha = api.model_info(repo_id).sha
    fixed = world.Quant(path, "qwen35", "UD-Q4_K_XL")  # the silent re-upload, same name
    hub.faults.add(Fault.run(lambda: world.reupload(hub.state, world_cache, repo_id, fixed)), nth=1)
    after = {e.path: e for e in api.list_repo_tree(repo_id)}[path]
    assert after.lfs.sha256 != before.lfs.sha256
    assert api.model_info(repo_id).sha != old_sha
    old = get_hf_file_metadata(hf_hub_url(repo_id, path, revision=old_sha, endpoint=hub.endpoint))
    assert old.etag == before.lfs.sha256  # the old commit still serves the old bytes
    hub.state.delete_repo(repo_id)
    with pytest.raises(RepositoryNotFoundError):
        api.model_info(repo_id, token="hf_test_user")


def test_fault_schedules_nth_times_and_seeded_rate(hub):
    session, base = get_session(), hub.endpoint
    rule = hub.faults.add(Fault.http(500), path="/refs", times=2)
    codes = [session.get(f"{base}/api/models/{GLM}/refs").status_code for _ in range(4)]
    assert codes == [500, 500, 200, 200] and (rule.matched, rule.fired) == (4, 2)
    hub.faults.clear()
    hub.faults.add(Fault.http(502), path="/refs", rate=0.5, seed=7)
    first = [session.get(f"{base}/api/models/{GLM}/refs").status_code for _ in range(20)]
    hub.faults.clear()
    hub.faults.add(Fault.http(502), path="/refs", rate=0.5, seed=7)
    second = [session.get(f"{base}/api/models/{GLM}/refs").status_code for _ in range(20)]
    assert first == second and 502 in first and 200 in first


def test_ratelimit_headers_and_quota(hub):
    hub.quotas = {"api": 2, "resolvers": 10}
    session = get_session()
    replies = [session.get(f"{hub.endpoint}/api/models/{GLM}") for _ in range(3)]
    assert [r.status_code for r in replies] == [200, 200, 429]
    assert replies[0].headers["ratelimit"].startswith('"api";r=1;t=')
    assert replies[1].headers["ratelimit"].startswith('"api";r=0;t=')
    assert replies[2].headers["ratelimit-policy"] == '"fixed window";"api";q=2;w=300'
    assert int(replies[2].headers["retry-after"]) > 0


def test_paths_info_refs_and_expired_cdn_urls(shared_hub):
    api = HfApi(endpoint=shared_hub.endpoint)
    infos = api.get_paths_info(GLM, ["GLM-4.5-Air-Q8_0.gguf", "missing.gguf", "UD-Q4_K_XL"])
    assert sorted(i.path for i in infos) == ["GLM-4.5-Air-Q8_0.gguf", "UD-Q4_K_XL"]
    refs = api.list_repo_refs(GLM)
    assert refs.branches[0].target_commit == shared_hub.state.repos[GLM].head.sha
    shared_hub.cdn_url_ttl_s = -10
    url = hf_hub_url(GLM, "GLM-4.5-Air-Q8_0.gguf", endpoint=shared_hub.endpoint)
    assert get_session().get(url, headers={"Range": "bytes=0-9"}).status_code == 403


def test_hostile_text_survives_json_intact(shared_hub):
    info = HfApi(endpoint=shared_hub.endpoint).model_info("evil/Hostile-Names-GGUF")
    assert info.card_data.model_name == world.HOSTILE
    raw = get_session().get(f"{shared_hub.endpoint}/api/models/evil/Hostile-Names-GGUF")
    assert (
        "\\u001b[2J" in raw.text and json.loads(raw.text)["cardData"]["model_name"] == world.HOSTILE
    )


def test_endpoint_is_per_client(shared_hub):
    # HfApi(endpoint=...) and hf_hub_url(endpoint=...) aim at the emulator without touching the
    # import-time constant (constants.py ENDPOINT).
    assert shared_hub.endpoint != constants.ENDPOINT
    assert HfApi(endpoint=shared_hub.endpoint).model_info(GLM).id == GLM
