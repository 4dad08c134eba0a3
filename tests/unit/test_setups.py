"""Partial offload, expert offload and vision against the real llama-server.

Every single-GPU row of ``tests/fixtures/llamacpp/server-measurements.jsonl`` (llama.cpp
0c1e57098 on an H200, branch ``measure``) is predicted from the measured model's header and must be
within max(3%, 256 MiB) of the device memory the server really used (nvidia-smi, after one
completion). Two-GPU rows are left for the multi-GPU model (not built yet). The same through
``quants estimate``: tests/e2e/test_setups_cli.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from crawler.fit import RunConfig, estimate
from crawler.fit.offload import auto_gpu_layers, estimate_offload, n_slots
from crawler.fit.setup import resolve_setup
from tests.fixtures.llamacpp.server import single_gpu_rows, used_bytes

MIB = 1024**2
MEASURED = single_gpu_rows()


def _cfg(c: dict[str, Any]) -> RunConfig:
    return RunConfig(
        ctx=c["ctx"],
        type_k=c["ctk"],
        type_v=c["ctv"],
        flash_attn=c.get("fa", "on"),
        parallel=c.get("np", 1),
        ubatch=c.get("ub", 512),
        cpu_moe=bool(c.get("cpumoe")),
        n_cpu_moe=c.get("ncmoe", 0),
        mtp=bool(c.get("mtp")),
        type_k_draft=c.get("ctkd", "f16"),
        type_v_draft=c.get("ctvd", "f16"),
    )


def predicted(row: dict[str, Any], coeffs, mmproj) -> int:
    c = row["config"]
    co = coeffs[c["model"]]
    ngl = c.get("ngl", -1)
    setup = resolve_setup(
        co, _cfg(c), n_slots(co) if ngl < 0 else ngl, None, mmproj if c.get("mmproj") else None
    )
    return setup.total


def test_the_fixture_has_partial_expert_and_vision_rows():
    kinds = {("ngl" in r["config"], "ncmoe" in r["config"] or "cpumoe" in r["config"],
              "mmproj" in r["config"]) for r in MEASURED}  # fmt: skip
    assert (True, False, False) in kinds and (False, True, False) in kinds
    assert any(k[2] for k in kinds)


@pytest.mark.parametrize("row", MEASURED, ids=lambda r: f"{r['index']:02d}-{r['config']['model']}")
def test_prediction_within_max_3pct_or_256_mib_of_the_real_server(
    row, server_coeffs, server_mmproj
):
    used = used_bytes(row)[0]
    pred = predicted(row, server_coeffs, server_mmproj)
    assert abs(pred - used) <= max(0.03 * used, 256 * MIB), (pred / MIB, used / MIB)


# (model, MTP drafting): MTP only where the model carries a head (qwen36-27b / -35b-a3b do).
_NGL_CASES = [
    ("llama8b", False), ("qwen36-27b", False), ("qwen36-27b", True),
    ("qwen36-35b-a3b", False), ("qwen36-35b-a3b", True), ("gemma3-12b", False),
]  # fmt: skip


@pytest.mark.parametrize(("model", "mtp"), _NGL_CASES)
@pytest.mark.parametrize("ctx,cache", [(32768, "f16"), (262144, "q4_0")])
def test_device_bytes_fall_and_host_bytes_rise_as_ngl_falls(server_coeffs, model, ctx, cache, mtp):
    co = server_coeffs[model]
    assert co.mtp_available or not mtp
    cfg = RunConfig(ctx=ctx, type_k=cache, type_v=cache, flash_attn="on", mtp=mtp)
    prev = estimate_offload(co, cfg, n_slots(co))
    assert prev.total == estimate(co, cfg).total
    rises = 0
    for ngl in range(n_slots(co) - 1, -1, -1):
        e = estimate_offload(co, cfg, ngl)
        assert e.host_bytes >= prev.host_bytes and e.weights <= prev.weights, ngl
        assert e.kv <= prev.kv
        # Every step moves bytes off the GPU; the device total may still rise where the
        # op-offload copy area grows (the first slot to leave, or the first full-attention
        # layer among SWA ones: a long quantized cache's copy outweighs the layer that left),
        # by no more than that growth.
        if e.total > prev.total:
            rises += 1
            assert e.total - prev.total <= e.compute - prev.compute, ngl
        prev = e
    assert rises <= 2
    assert prev is not None and prev.weights == 0 and prev.kv == 0  # -ngl 0: nothing on the GPU


def test_ngl_order_output_first_then_last_blocks(server_coeffs):
    co = server_coeffs["llama8b"]
    cfg = RunConfig(ctx=4096, flash_attn="on")
    out_dev = co.output_weights[0]
    one = estimate_offload(co, cfg, 1)  # only the output layer (load_tensors: the last slot)
    assert one.weights == out_dev and one.kv == 0
    two = estimate_offload(co, cfg, 2)  # + the last block and its KV
    last = {il: d for il, d, _ in co.layer_weights}[co.n_layer - 1]
    assert two.weights == out_dev + last and two.kv > 0


@pytest.mark.parametrize("budget_gib", [2, 4, 6, 8, 12])
def test_ngl_auto_is_the_largest_that_fits(server_coeffs, budget_gib):
    co = server_coeffs["qwen36-27b"]
    cfg = RunConfig(ctx=65536, type_k="q4_0", type_v="q4_0", flash_attn="on")
    budget = budget_gib * 1024**3
    n = auto_gpu_layers(co, cfg, budget)
    assert n is not None and estimate_offload(co, cfg, n).total <= budget
    if n < n_slots(co):
        assert estimate_offload(co, cfg, n + 1).total > budget


# --- llama.cpp's spellings -------------------------------------------------------------------


def test_search_accepts_llama_cpp_spellings():
    from crawler.base.errors import UsageError
    from crawler.cli.search_cmd import request_from_argv

    def req(*argv: str):
        return request_from_argv(["--vram", "24", *argv])

    assert req("-c", "4096").spec == req("--ctx", "4096").spec
    assert (
        req("-ctk", "q8_0", "-ctv", "q8_0").spec
        == req("--cache-type-k", "q8_0", "--cache-type-v", "q8_0").spec
    )
    assert req("--auto-cache").spec == req().spec  # the default; the flag is a no-op alias
    assert req("--no-mtp").spec.mtp_auto is False and req().spec.mtp_auto is True
    assert req("-fa", "off").spec.flash_attn == "off" == req("--flash-attn", "off").spec.flash_attn
    assert req("-np", "2").spec.parallel == 2 and req("-ub", "256").spec.ubatch == 256
    assert req("--n-cpu-moe", "10").spec.n_cpu_moe == 10
    assert (
        req("-ngl", "20").spec.n_gpu_layers == 20 == req("--n-gpu-layers", "20").spec.n_gpu_layers
    )
    assert req("-ngl", "auto").spec.tier == "partial" and req("-ngl", "all").spec == req().spec
    assert req("--mmproj").spec.vision and req("--mmproj").filters.vision
    assert req("--no-mmproj").spec == req().spec
    with pytest.raises(UsageError):
        req("-ngl", "many")
    with pytest.raises(UsageError):
        req("-ngl", "20", "--tier", "partial")


# --- several GPUs (modelled only) --------------------------------------------------------------

SPLITS = [(1.0,), (1.0, 1.0), (3.0, 1.0), (1.0, 3.0), (1.0, 1.0, 2.0), (0.0, 1.0)]


@pytest.mark.parametrize("split", SPLITS)
@pytest.mark.parametrize("model", ["llama8b", "qwen36-27b", "qwen36-35b-a3b"])
def test_layer_split_covers_every_slot_once_and_the_bytes_add_up(server_coeffs, model, split):
    from crawler.fit.devices import estimate_devices

    co = server_coeffs[model]
    cfg = RunConfig(ctx=32768, flash_attn="on")
    shares = estimate_devices(co, cfg, split, [80 * 1024**3] * len(split))
    covered = [il for s in shares for il in range(s.first, s.last)]
    assert covered == list(range(n_slots(co)))  # contiguous, in device order, output last
    full = estimate(co, cfg)
    assert sum(s.static for s in shares) == full.weights + full.kv + full.mtp_kv + full.recurrent
    if len(split) == 1:
        assert shares[0].total == full.total
    assert all(s.overhead == full.overhead for s in shares)  # one CUDA context per device


@pytest.mark.parametrize("split", SPLITS[1:])
@pytest.mark.parametrize("budget_mib", [2000, 4000, 6000, 9000, 14000])
def test_the_per_device_maximum_decides_the_fit(server_coeffs, split, budget_mib):
    from crawler.fit.devices import estimate_devices, fits_all

    co = server_coeffs["qwen36-27b"]
    cfg = RunConfig(ctx=65536, type_k="q4_0", type_v="q4_0", flash_attn="on")
    budget = budget_mib * MIB
    shares = estimate_devices(co, cfg, split, [budget] * len(split))
    assert fits_all(shares) == (max(s.total for s in shares) <= budget)
    # the sum may be under the summed budget while one device is over: still no fit
    if not fits_all(shares):
        assert any(s.total > budget for s in shares)


# --- Apple silicon (modelled only) ---------------------------------------------------------------


@pytest.mark.parametrize("model", ["llama8b", "qwen36-27b", "gemma3-12b"])
def test_metal_buffers_have_no_row_padding_and_no_cuda_context(server_coeffs, model):
    from crawler.fit.apple import metal_estimate

    co = server_coeffs[model]
    cfg = RunConfig(ctx=32768, type_k="q8_0", type_v="q8_0", flash_attn="on")
    cuda, metal = estimate(co, cfg), metal_estimate(co, cfg)
    assert metal.overhead == 0 < cuda.overhead
    assert metal.weights <= cuda.weights and metal.kv <= cuda.kv
    assert metal.compute == cuda.compute


# --- the cache / MTP policy --------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["auto", "on", "off"])
@pytest.mark.parametrize("budget_gib", [14, 16, 17, 18, 20, 22, 24, 40])
def test_choose_config_is_the_first_trial_that_fits(server_coeffs, mode, budget_gib):
    """The skip of MTP trials (when the step without the head does not fit) changes nothing."""
    from crawler.base.errors import InvalidConfig
    from crawler.fit.choose import choose_config, trials

    co = server_coeffs["qwen36-27b"]
    base = RunConfig(ctx=262144, flash_attn="on")
    budget = budget_gib * 1024**3
    expected = None
    for cfg in trials(base, auto_cache=True, mtp=mode, mtp_usable=True):  # type: ignore[arg-type]
        try:
            if estimate(co, cfg).total <= budget:
                expected = cfg
                break
        except InvalidConfig:
            continue
    got, est = choose_config(co, base, budget, auto_cache=True, mtp=mode, mtp_usable=True)  # type: ignore[arg-type]
    assert got == expected
    if got is not None:
        assert est is not None and est.total <= budget and got.mtp == (mode != "off" and got.mtp)


# --- the margin bound of --sort margin with the default per-quant cache ------------------------


@pytest.mark.parametrize("tier", ["gpu", "experts_cpu"])
@pytest.mark.parametrize("mtp_auto", [True, False])
def test_the_ladder_margin_bound_holds_for_every_measured_model(server_coeffs, mtp_auto, tier):
    """--sort margin streams quants by crawler.ranking.bounds.margin_upper_bound: the margin
    ranking gives (first cache step that fits, MTP where usable) never exceeds it, and it is
    tighter than the budget less the lower bound where a quant fits at f16."""
    from crawler.ranking.bounds import lower_bound_bytes, margin_upper_bound
    from crawler.ranking.model import Budget, RunSpec
    from crawler.ranking.rank import rank_candidates
    from tests.unit.rank_helpers import candidate

    checked = tighter = stepped = in_ram = 0
    for name, co in sorted(server_coeffs.items()):
        for ctx in (4096, 32768, 131072, 262144):
            spec = RunSpec(ctx=ctx, auto_cache=True, mtp_auto=mtp_auto, tier=tier)
            for gib in (2, 4, 6, 8, 12, 16, 20, 24, 32, 48, 80):
                budget = Budget.from_gib(gib)
                c = candidate(1, name, 1.0, coefficients=co, mtp=co.mtp_available)
                results = rank_candidates([c], budget, spec).results
                bound = margin_upper_bound(co, spec, budget)
                if results:
                    checked += 1
                    assert results[0].margin_bytes <= bound, (name, ctx, gib)
                    stepped += results[0].config.type_k != "f16"  # f16 did not fit
                    in_ram += results[0].config.cpu_moe  # experts_cpu: the experts in RAM
                tighter += bound < budget.device_bytes - lower_bound_bytes(co, spec)
    assert checked > 50 and tighter > 50 and stepped > 10
    assert (in_ram > 10) if tier == "experts_cpu" else not in_ram, in_ram


@pytest.mark.parametrize("ctx", [None, 32768])
def test_the_ladder_ctx_bound_holds_for_every_measured_model(server_coeffs, ctx):
    """--sort ctx streams quants by crawler.ranking.bounds.ctx_bound_sql (evaluated here by
    SQLite over the columns a crawl stores): no largest context ranking finds exceeds it."""
    from crawler.ranking.bounds import ctx_bound_sql
    from crawler.ranking.model import Budget, RunSpec
    from crawler.ranking.rank import rank_candidates
    from tests.unit.rank_helpers import candidate, sql_value, stored_row

    checked = 0
    for name, co in sorted(server_coeffs.items()):
        spec = RunSpec(ctx=ctx, auto_cache=True, mtp_auto=True)
        for gib in (2, 4, 6, 8, 12, 16, 24, 32, 48, 80):
            budget = Budget.from_gib(gib)
            c = candidate(1, name, 1.0, coefficients=co, mtp=co.mtp_available)
            results = rank_candidates([c], budget, spec, sort="ctx").results
            if results:
                checked += 1
                bound = sql_value(*ctx_bound_sql(spec, budget), stored_row(co))
                assert results[0].max_ctx <= bound, (name, gib, results[0].max_ctx, bound)
    assert checked > 20
