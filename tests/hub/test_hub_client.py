"""crawler.hub.HubClient against the emulator: discovery, trees, ranged reads, retries, limits,
budgets and error mapping. Sleeps go to a fake clock, so retry tests take no real time."""

from __future__ import annotations

import logging
import threading
from datetime import UTC, datetime

import pytest
from huggingface_hub import HfApi

from crawler.base.config import Settings
from crawler.base.errors import (
    ConfigError,
    HubBudgetExhausted,
    HubGated,
    HubNotFound,
    HubRateLimited,
    HubUnavailable,
)
from crawler.hub import LISTING_EXPAND, RateLimiter
from tests.fixtures import world
from tests.hub_emulator import Blob, Fault

UNSLOTH = "unsloth/Qwen3.6-27B-GGUF"
GLM = "unsloth/GLM-4.5-Air-GGUF"
GATED = "google/gemma-3-12b-it-qat-q4_0-gguf"
PRIVATE = "quants-test/Private-Qwen3-8B-GGUF"
Q8 = "Qwen3.6-27B-Q8_0.gguf"
TOKEN = "hf_test_user"


def file_bytes(hub, repo_id, path, offset, length):
    blob = hub.state.repos[repo_id].head.files[path]
    return b"".join(blob.iter_range(offset, min(offset + length, blob.size) - 1))


def public_gguf(hub):
    repos = [r for r in hub.state.repos.values() if "gguf" in r.all_tags() and not r.private]
    return [r.repo_id for r in sorted(repos, key=lambda r: r.last_modified, reverse=True)]


# --- discovery ---------------------------------------------------------------------------------


def test_listing_sends_the_same_request_as_huggingface_hub(shared_hub, make_client):
    list(
        HfApi(endpoint=shared_hub.endpoint).list_models(
            filter="gguf", author="unsloth", sort="last_modified", limit=5, expand=LISTING_EXPAND
        )
    )
    list(make_client(shared_hub).iter_models(author="unsloth", limit=5))
    theirs, ours = shared_hub.requests(path="/api/models")
    assert ours.params == theirs.params


def test_iter_models_pages_lazily_newest_first(shared_hub, make_client):
    shared_hub.max_page_size = 4
    client = make_client(shared_hub)
    listings = list(client.iter_models())
    assert [r.repo_id for r in listings] == public_gguf(shared_hub)
    assert len(shared_hub.requests(path="/api/models")) == -(-len(listings) // 4)
    head = listings[0]
    repo = shared_hub.state.repos[head.repo_id]
    assert (head.sha, head.last_modified) == (repo.head.sha, repo.last_modified)
    assert head.card_base_models == ("Qwen/Qwen3.8-27B",)
    assert head.base_model_relation == "quantized"
    assert head.quantized_from == ("Qwen/Qwen3.8-27B",)
    gated = next(r for r in listings if r.repo_id == GATED)
    assert gated.gated == "manual" and gated.downloads == 70_000


def test_since_stops_the_listing_early(shared_hub, make_client):
    shared_hub.max_page_size = 2
    since = datetime(2026, 9, 1, tzinfo=UTC)
    got = [r.repo_id for r in make_client(shared_hub).iter_models(since=since)]
    assert got == [
        r for r in public_gguf(shared_hub) if shared_hub.state.repos[r].last_modified >= since
    ]
    assert "ggml-org/Qwen3.6-27B-GGUF" in got  # exactly at the watermark: kept (overlap-safe)
    assert len(shared_hub.requests(path="/api/models")) == 3  # not all 9 pages
    naive = [
        r.repo_id for r in make_client(shared_hub).iter_models(since=since.replace(tzinfo=None))
    ]
    assert naive == got  # a naive watermark is taken as UTC


def test_discover_merges_queries_once_per_repo(shared_hub, make_client):
    client = make_client(shared_hub)
    found = [
        r.repo_id
        for r in client.discover(
            authors=["unsloth", "havenoammo"],
            searches=["MTP"],
            base_models=["Qwen/Qwen3.6-27B"],
        )
    ]
    assert len(found) == len(set(found))
    assert set(found) == {
        "unsloth/Qwen3.6-27B-GGUF",
        "unsloth/Qwen3.5-35B-A3B-GGUF",
        "unsloth/GLM-4.5-Air-GGUF",
        "unsloth/DeepSeek-V2-Lite-Chat-GGUF",
        "havenoammo/Qwen3.6-27B-MTP-UD-GGUF",
        "localweights/Qwen3.6-27B-MTP-IMAT-IQ4_XS-Q8nextn-GGUF",
        "someone/Qwen3.6-27B-NoMTP-Q4_K_M-GGUF",
        "ggml-org/Qwen3.6-27B-GGUF",
    }
    assert ("filter", "base_model:quantized:Qwen/Qwen3.6-27B") in shared_hub.requests()[-1].params
    assert len(list(client.discover(authors=["unsloth"], limit=2))) == 2


def test_repo_info_and_not_found(shared_hub, make_client):
    client = make_client(shared_hub)
    info = client.repo_info(UNSLOTH)
    assert info.sha == shared_hub.state.repos[UNSLOTH].head.sha
    assert client.repo_info(UNSLOTH, revision=info.sha).sha == info.sha
    with pytest.raises(HubNotFound) as anon:
        client.repo_info(PRIVATE)  # anonymous: 401 without code
    assert (anon.value.repo_id, anon.value.status, anon.value.code) == (PRIVATE, 401, None)
    with pytest.raises(HubNotFound) as missing:
        make_client(shared_hub, hf_token=TOKEN).repo_info("nobody/nothing")
    assert (missing.value.status, missing.value.code) == (404, "RepoNotFound")
    with pytest.raises(HubNotFound):
        client.repo_info(UNSLOTH, revision="0" * 40)  # RevisionNotFound
    assert make_client(shared_hub, hf_token="hf_test_granted").repo_info(PRIVATE).private


# --- files and ranges ------------------------------------------------------------------------


def test_list_files_gives_sizes_and_lfs_oids(shared_hub, make_client):
    shared_hub.tree_page_size = 3
    files = {f.path: f for f in make_client(shared_hub).list_files(GLM, "main")}
    head = shared_hub.state.repos[GLM].head
    assert set(files) == set(head.files)  # folders descended, folder entries dropped
    for path, blob in head.files.items():
        assert files[path].size == blob.size
        assert files[path].lfs_oid == (blob.sha256 if blob.lfs else None)
        assert files[path].content_key == (blob.sha256 if blob.lfs else blob.git_oid)
    assert len(shared_hub.requests(path="/tree/")) > 1


def test_range_reader_reads_exact_bytes_via_the_cdn(shared_hub, make_client):
    client = make_client(shared_hub, hf_token=TOKEN)
    sha = shared_hub.state.repos[UNSLOTH].head.sha
    read = client.range_reader(UNSLOTH, Q8, sha)
    assert read(0, 4096) == file_bytes(shared_hub, UNSLOTH, Q8, 0, 4096)
    assert read(10_000, 777) == file_bytes(shared_hub, UNSLOTH, Q8, 10_000, 777)
    blob = shared_hub.state.repos[UNSLOTH].head.files[Q8]
    assert (read.size, read.etag, read.commit) == (blob.size, blob.sha256, sha)
    # The second read goes straight to the signed CDN URL: 3 requests, not 4.
    assert (read.requests, read.bytes_fetched) == (3, 4096 + 777)
    hub_side = shared_hub.requests(origin="hub")
    cdn_side = shared_hub.requests(origin="cdn")
    assert [r.authorization for r in hub_side] == [True]
    assert [r.authorization for r in cdn_side] == [False, False]  # token never leaves the Hub
    assert cdn_side[1].range == "bytes=10000-10776"
    stats = client.stats
    assert (stats.requests, stats.resolver_requests, stats.cdn_requests) == (3, 1, 2)


def test_a_refused_cdn_url_falls_back_to_the_hub(shared_hub, make_client):
    client = make_client(shared_hub)
    read = client.range_reader(UNSLOTH, Q8, "main")
    read(0, 100)
    shared_hub.faults.add(Fault.http(403, "Request has expired"), origin="cdn", nth=1)
    assert read(100, 100) == file_bytes(shared_hub, UNSLOTH, Q8, 100, 100)
    statuses = [(r.origin, r.status) for r in shared_hub.requests()]
    assert statuses == [("hub", 302), ("cdn", 206), ("cdn", 403), ("hub", 302), ("cdn", 206)]


def test_reads_at_and_past_the_end(shared_hub, make_client):
    client = make_client(shared_hub)
    read = client.range_reader(UNSLOTH, Q8, "main")
    size = shared_hub.state.repos[UNSLOTH].head.files[Q8].size
    assert read(size - 10, 100) == file_bytes(shared_hub, UNSLOTH, Q8, size - 10, 10)
    assert read(size, 10) == b""  # known size: no request
    fresh = client.range_reader(UNSLOTH, Q8, "main")
    assert fresh(size + 5, 10) == b""  # 416
    assert shared_hub.requests(status=416)


def test_small_git_files_resolve_on_the_hub(shared_hub, make_client):
    read = make_client(shared_hub).range_reader(UNSLOTH, "README.md", "main")
    assert read(0, 3) == b"---"
    assert not shared_hub.requests(origin="cdn")


def test_gated_and_private_files(shared_hub, make_client):
    path = "gemma-3-12b-it-q4_0.gguf"
    with pytest.raises(HubGated):
        make_client(shared_hub).read_range(GATED, path, "main", 0, 16)
    with pytest.raises(HubGated) as denied:
        make_client(shared_hub, hf_token=TOKEN).read_range(GATED, path, "main", 0, 16)
    assert (denied.value.status, denied.value.code) == (403, "GatedRepo")
    granted = make_client(shared_hub, hf_token="hf_test_granted")
    assert granted.read_range(GATED, path, "main", 0, 4) == b"GGUF"
    assert make_client(shared_hub).list_files(GATED, "main")  # the tree stays public
    with pytest.raises(HubNotFound):
        make_client(shared_hub).read_range(PRIVATE, "Private-Qwen3-8B-Q4_K_M.gguf", "main", 0, 4)
    with pytest.raises(HubNotFound):
        make_client(shared_hub).read_range(UNSLOTH, "missing.gguf", "main", 0, 4)


def test_a_rejected_token_is_a_config_error(shared_hub, make_client):
    with pytest.raises(ConfigError):
        make_client(shared_hub, hf_token="hf_not_a_real_token").repo_info(UNSLOTH)


# --- faults ------------------------------------------------------------------------------------


def test_429_waits_what_the_hub_says_then_succeeds(shared_hub, make_client, clock):
    shared_hub.faults.add(Fault.rate_limited(retry_after=7), origin="cdn", nth=1)
    shared_hub.faults.add(Fault.rate_limited(retry_after=None, reset_s=30), regex="^/api/", nth=1)
    client = make_client(shared_hub)
    assert client.read_range(UNSLOTH, Q8, "main", 0, 4) == b"GGUF"
    assert client.repo_info(UNSLOTH).repo_id == UNSLOTH  # model_info retried, unlike the library
    assert clock.sleeps == [7.0, 31.0]  # Retry-After; RateLimit r=0;t=30 -> t + 1 (as http_backoff)
    assert client.stats.retries == 2


def test_a_long_rate_limit_is_reported_not_waited(shared_hub, make_client, clock):
    shared_hub.faults.add(Fault.rate_limited(retry_after=3600), path="/tree/")
    with pytest.raises(HubRateLimited) as err:
        make_client(shared_hub).list_files(GLM, "main")
    assert err.value.retry_after == 3600 and err.value.repo_id == GLM
    assert clock.sleeps == []


def test_persistent_429_gives_up_as_rate_limited(shared_hub, make_client, clock):
    shared_hub.faults.add(Fault.rate_limited(retry_after=2), path="/tree/")
    with pytest.raises(HubRateLimited):
        make_client(shared_hub, max_retries=3).list_files(GLM, "main")
    assert clock.sleeps == [2.0, 2.0, 2.0]
    assert len(shared_hub.requests(path="/tree/")) == 4


def test_5xx_backoff_then_success_and_then_giving_up(shared_hub, make_client, clock):
    shared_hub.faults.add(Fault.http(502), regex="^/api/models/", times=2)
    assert make_client(shared_hub).repo_info(GLM).repo_id == GLM
    assert clock.sleeps == [1.0, 2.0]  # huggingface_hub's schedule: 1, 2, 4, 8, 8
    shared_hub.faults.add(Fault.http(503), path="/tree/")
    with pytest.raises(HubUnavailable) as err:
        make_client(shared_hub, max_retries=5).list_files(GLM, "main")
    assert clock.sleeps[2:] == [1.0, 2.0, 4.0, 8.0, 8.0]
    assert "503" in str(err.value)


def test_retries_and_backoff_come_from_the_settings(shared_hub, clock):
    # QUANTS_RETRIES / QUANTS_BACKOFF: the same doubling schedule, scaled; the Hub's own
    # Retry-After stays as asked.
    from crawler.hub import HubClient

    env = {
        "QUANTS_HF_ENDPOINT": shared_hub.endpoint,
        "QUANTS_RETRIES": "3",
        "QUANTS_BACKOFF": "0.25",
    }
    settings = Settings.from_env(env)
    assert (settings.retries, settings.backoff_s) == (3, 0.25)
    client = HubClient(settings, sleep=clock.sleep, clock=clock)
    shared_hub.faults.add(Fault.http(503), path="/tree/")
    with pytest.raises(HubUnavailable, match="gave up after 3 retries"):
        client.list_files(GLM, "main")
    assert clock.sleeps == [0.25, 0.5, 1.0]
    assert len(shared_hub.requests(path="/tree/")) == 4
    shared_hub.reset()
    shared_hub.faults.add(Fault.rate_limited(retry_after=2), path="/tree/", times=1)
    assert client.list_files(GLM, "main")
    assert clock.sleeps[3:] == [2.0]
    for bad in ({"QUANTS_RETRIES": "-1"}, {"QUANTS_BACKOFF": "-0.5"}, {"QUANTS_RETRIES": "x"}):
        with pytest.raises(ConfigError):
            Settings.from_env(bad)


def test_reset_and_truncated_body_are_retried(shared_hub, make_client):
    shared_hub.faults.add(Fault.reset(), origin="cdn", nth=1)
    shared_hub.faults.add(Fault.truncate(after_bytes=100), origin="cdn", nth=2)
    client = make_client(shared_hub)
    assert client.read_range(UNSLOTH, Q8, "main", 0, 5000) == file_bytes(
        shared_hub, UNSLOTH, Q8, 0, 5000
    )
    assert [r.fault for r in shared_hub.requests(origin="cdn")] == ["reset", "truncate", None]
    assert client.stats.retries == 2


def test_a_slow_body_times_out_and_is_retried(shared_hub, make_client):
    shared_hub.faults.add(Fault.slow(chunk=512, pause_s=0.05), origin="cdn", nth=1)
    client = make_client(shared_hub, timeout_s=0.3)
    assert client.read_range(UNSLOTH, Q8, "main", 0, 64_000)[:4] == b"GGUF"
    assert client.stats.retries == 1


def test_ignored_range_is_cut_after_the_bytes_needed(hub, make_client, tmp_path):
    big = tmp_path / "Big-Q4_K_M.gguf"
    with big.open("wb") as fh:
        fh.write(bytes(range(256)) * 64)
        fh.truncate(2 << 30)  # 2 GiB, sparse
    hub.state.create_repo("big/Big-GGUF", {big.name: Blob.from_file(big)})
    hub.faults.add(Fault.ignore_range(), origin="cdn")
    client = make_client(hub)
    read = client.range_reader("big/Big-GGUF", big.name, "main")
    assert read(1000, 500) == (bytes(range(256)) * 64)[1000:1500]
    assert read.size == 2 << 30
    assert client.stats.range_ignored == 1
    assert client.stats.bytes_fetched < 1 << 20  # stopped after the wanted bytes
    assert hub.requests(origin="cdn")[0].status == 200


def test_file_replaced_between_two_reads_is_detected(hub, make_client, world_cache):
    repo_id, path = "unsloth/Qwen3.5-35B-A3B-GGUF", "Qwen3.5-35B-A3B-UD-Q4_K_XL.gguf"
    client = make_client(hub)
    old_sha = hub.state.repos[repo_id].head.sha
    on_main = client.range_reader(repo_id, path, "main")
    pinned = client.range_reader(repo_id, path, old_sha)
    first, pinned_first = on_main(0, 64), pinned(0, 64)
    world.reupload(hub.state, world_cache, repo_id, world.Quant(path, "qwen35", "UD-Q4_K_XL"))
    # The remembered CDN URL names the old content: reads stay consistent...
    assert on_main(0, 64) == first
    # ...until it is refused; then main resolves to the new file and the change is detected.
    hub.faults.add(Fault.http(403), origin="cdn", nth=1)
    with pytest.raises(HubUnavailable, match="changed"):
        on_main(64, 64)
    assert pinned(0, 64) == pinned_first == first  # a commit sha keeps serving its bytes
    hub.state.delete_repo(repo_id)
    with pytest.raises(HubNotFound):
        client.range_reader(repo_id, path, old_sha)(0, 64)


# --- budgets, limiter, endpoint, secrecy ---------------------------------------------------------


def test_request_and_byte_budgets(shared_hub, make_client):
    client = make_client(shared_hub, max_requests=3)
    client.repo_info(UNSLOTH)
    client.read_range(UNSLOTH, Q8, "main", 0, 10)  # 2 requests: Hub + CDN
    with pytest.raises(HubBudgetExhausted):
        client.repo_info(UNSLOTH)
    assert client.stats.requests == 3
    client = make_client(shared_hub, max_bytes=50_000)
    client.read_range(UNSLOTH, Q8, "main", 0, 40_000)
    with pytest.raises(HubBudgetExhausted):
        client.read_range(UNSLOTH, Q8, "main", 0, 40_000)


def test_rate_limiter_paces_per_bucket_and_honours_blocks():
    now = [0.0]
    limiter = RateLimiter({"api": 2, "resolvers": 100}, window_s=10, clock=lambda: now[0])
    assert [limiter.reserve("api") for _ in range(3)] == [0.0, 0.0, 10.0]
    assert limiter.reserve("resolvers") == 0.0  # buckets are independent
    limiter.block("resolvers", 5)
    assert limiter.reserve("resolvers") == 5.0
    now[0] = 20.0
    assert limiter.reserve("api") == 0.0  # the window slid past
    anon, token = RateLimiter.for_hub(authenticated=False), RateLimiter.for_hub(authenticated=True)
    assert (anon.quotas["api"], token.quotas["api"]) == (500, 1000)  # docs/hub/rate-limits.md


def test_spent_ratelimit_window_holds_the_next_request(shared_hub, make_client, clock):
    shared_hub.quotas = {"api": 1, "resolvers": 100}
    client = make_client(shared_hub)
    client.repo_info(UNSLOTH)  # answered 200 with RateLimit r=0;t=300
    assert clock.sleeps == []
    with pytest.raises(HubRateLimited):  # waits out the window, then the emulator's 429 persists
        client.repo_info(UNSLOTH)
    assert clock.sleeps and clock.sleeps[0] >= 290


def test_two_clients_two_endpoints_one_process(hub, shared_hub, make_client):
    hub.state.delete_repo(GLM)
    with pytest.raises(HubNotFound):
        make_client(hub).repo_info(GLM)
    assert make_client(shared_hub).repo_info(GLM).repo_id == GLM


def test_token_never_appears_in_errors_or_logs(shared_hub, make_client, caplog):
    secret = "hf_test_granted"
    shared_hub.state.valid_tokens.add(secret)
    caplog.set_level(logging.DEBUG)
    client = make_client(shared_hub, hf_token=secret, max_retries=1)
    shared_hub.faults.add(Fault.http(500, message=f"echo {secret}"), path="/tree/")
    errors = []
    for call in (
        lambda: client.list_files(GLM, "main"),
        lambda: client.repo_info("nobody/nothing"),
        lambda: client.read_range(GATED, "missing.gguf", "main", 0, 4),
    ):
        with pytest.raises(Exception) as err:
            call()
        errors.append(f"{err.value!r} {err.value}")
    assert secret not in " ".join(errors)
    # (httpcore's own DEBUG trace shows response headers, here the server's echo: not ours.)
    ours = [r.getMessage() for r in caplog.records if not r.name.startswith("httpcore")]
    assert not [m for m in ours if secret in m]
    assert any(m.startswith("HTTP GET") for m in ours)  # one INFO line per request
    assert secret not in repr(Settings(hf_token=secret))


def test_concurrent_reads_share_one_client(shared_hub, make_client):
    client = make_client(shared_hub)
    sha = shared_hub.state.repos[UNSLOTH].head.sha
    paths = [p for p in shared_hub.state.repos[UNSLOTH].head.files if p.endswith(".gguf")]
    results: dict[str, bytes] = {}

    def work(path: str) -> None:
        results[path] = client.read_range(UNSLOTH, path, sha, 0, 8192)

    threads = [threading.Thread(target=work, args=(p,)) for p in paths * 2]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(results[p] == file_bytes(shared_hub, UNSLOTH, p, 0, 8192) for p in paths)
    assert client.stats.requests == len(shared_hub.requests()) == 4 * len(paths)
