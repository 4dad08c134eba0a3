"""quants search: the best quants that fit a GPU at a context, with the command to run them.

Also an argv's search options by name and back, for saved searches (quants watch).
Details: docs/internals/cli.md#search_cmd
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from crawler.cli._emit import check_emit, write_launchers
from crawler.cli._llama_opts import (
    CacheTypeKOpt,
    CacheTypeVOpt,
    CpuMoeOpt,
    FlashAttnOpt,
    GpusOpt,
    NCpuMoeOpt,
    NGpuLayersOpt,
    ParallelOpt,
    SpecDraftNMaxOpt,
    TensorSplitOpt,
    UbatchOpt,
)
from crawler.cli._ondemand import OfflineOpt
from crawler.cli._options import (
    Argument,
    CtxOpt,
    DbOpt,
    HeadroomOpt,
    JsonOpt,
    LimitOpt,
    Option,
    VramOpt,
    command,
    gib_value,
)
from crawler.ranking.speed import DEFAULT_ACCEPTANCE

if TYPE_CHECKING:
    from crawler.library.search import SearchResult
    from crawler.library.search_request import SearchRequest

_EQUIVALENT_ROWS = 3
#: Options of this command that are not part of the search request.
_NOT_SEARCH = frozenset({"as_json", "db", "offline", "emit", "out"})
_SORT_HELP = "quality | speed | size | margin | ctx | downloads | updated (best first)."


@command("search")
def search(
    query: Annotated[
        str | None,
        Argument(
            help="Free text matched fuzzily against repo, base model, file and architecture.",
            show_default=False,
        ),
    ] = None,
    vram: VramOpt = None,
    ctx: CtxOpt[int | None] = None,
    gpu: GpusOpt[list[str] | None] = None,
    headroom: HeadroomOpt = None,
    cache_type_k: CacheTypeKOpt[str | None] = None,
    cache_type_v: CacheTypeVOpt[str | None] = None,
    auto_cache: Annotated[
        bool,
        Option(
            "--auto-cache", help="The default: per quant, the least lossy cache reaching --ctx."
        ),
    ] = False,
    mtp: Annotated[
        bool | None,
        Option(
            "--mtp/--no-mtp",
            help="--mtp: only quants that run with their MTP head (>= 6 bit); --no-mtp: never"
            " draft. Default: MTP on where the quant has a usable head and it still fits.",
        ),
    ] = None,
    spec_draft_n_max: SpecDraftNMaxOpt[int | None] = None,
    mtp_acceptance: Annotated[
        float,
        Option(
            "--mtp-acceptance",
            help="Per-token MTP draft acceptance A the tok/s estimate assumes (default 0.789:"
            " the median of five published rates, docs/models.md).",
        ),
    ] = DEFAULT_ACCEPTANCE,
    min_attn_bits: Annotated[
        float | None, Option("--min-attn-bits", help="Attention weights at >= B bits.")
    ] = None,
    arch: Annotated[str | None, Option("--arch", help="GGUF architecture.")] = None,
    author: Annotated[str | None, Option("--author", help="Uploader.")] = None,
    base: Annotated[str | None, Option("--base", help="Base model id.")] = None,
    label: Annotated[str | None, Option("--label", help="Quant label, e.g. Q4_K_M.")] = None,
    loadable: Annotated[
        bool, Option("--loadable", help="Only files mainline llama.cpp can load.")
    ] = False,
    cpu_moe: CpuMoeOpt[bool] = False,
    n_cpu_moe: NCpuMoeOpt[int] = 0,
    n_gpu_layers: NGpuLayersOpt[str | None] = None,
    flash_attn: FlashAttnOpt[str] = "on",
    parallel: ParallelOpt[int] = 1,
    ubatch: UbatchOpt[int] = 512,
    tensor_split: TensorSplitOpt[str | None] = None,
    vision: Annotated[
        bool,
        Option(
            "--vision/--no-mmproj",
            "--mmproj/",
            help="--vision (alias --mmproj): with the repo's vision projector; repos without one"
            " are left out. --no-mmproj (the default): no projector.",
        ),
    ] = False,
    tier: Annotated[
        str,
        Option(
            "--tier",
            help="Highest tier: gpu (all on the GPU), experts_cpu (a MoE's experts in RAM),"
            " partial (-ngl auto). Each result says its tier.",
        ),
    ] = "gpu",
    ram: Annotated[
        float | None,
        Option("--ram", parser=gib_value, metavar="GIB", help="Host memory in GiB (--cpu-moe)."),
    ] = None,
    sort: Annotated[str, Option("--sort", help=_SORT_HELP)] = "quality",
    limit: LimitOpt = 20,
    as_json: JsonOpt = False,
    db: DbOpt = None,
    offline: OfflineOpt = False,
    emit: Annotated[
        str | None,
        Option(
            "--emit",
            help="Write the results as launcher configs: llama-swap | ollama | lmstudio"
            " (docs/launchers.md); stdout unless --out.",
        ),
    ] = None,
    out: Annotated[
        Path | None,
        Option(
            "--out",
            help="With --emit: the llama-swap config FILE, or the FOLDER that gets one"
            " Modelfile / model.yaml per result.",
        ),
    ] = None,
) -> None:
    """List the GGUF quants that fit a VRAM budget at a context, best first, with commands.

    A QUERY naming a model not looked up in the last 24 h (QUANTS_FRESH_HOURS) is first looked
    up on the Hub and its quants' headers read into the catalog (docs/ondemand.md).
    """
    from crawler import api
    from crawler.cli._ondemand import lookup_hooks
    from crawler.cli._output import echo, print_answer

    check_emit(emit, out, as_json)
    answer = api.search(
        query, vram=vram, ctx=ctx, gpu=gpu, headroom=headroom, cache_type_k=cache_type_k,
        cache_type_v=cache_type_v, auto_cache=auto_cache, mtp=mtp,
        spec_draft_n_max=spec_draft_n_max, mtp_acceptance=mtp_acceptance,
        min_attn_bits=min_attn_bits, arch=arch, author=author, base=base, label=label,
        loadable=loadable, cpu_moe=cpu_moe, n_cpu_moe=n_cpu_moe, n_gpu_layers=n_gpu_layers,
        flash_attn=flash_attn, parallel=parallel, ubatch=ubatch, tensor_split=tensor_split,
        vision=vision, tier=tier, ram=ram, sort=sort, limit=limit, db=db, offline=offline,
        **lookup_hooks(), watches=True,
    )  # fmt: skip
    res = answer.result
    if res.gpu is not None:
        n = len(res.budget.devices)
        echo(res.gpu.describe() + (f"; {n} GPUs: {res.budget.gpu_name}" if n else ""), err=True)
    if emit is not None:
        write_launchers(answer, emit, out)
        if out is None:
            return
    if as_json:
        print_answer(answer)
        return
    echo(_render(res))
    echo(_footer(res), err=True)


def search_options(argv: Sequence[str]) -> dict[str, Any]:
    """The options ``quants search ARGV`` gives, by name (only those given; a watch stores
    them), parsed by this command's own parser; UsageError for a bad one. Output options
    (--json, --db, --offline, --emit, --out) are accepted and left out."""
    from crawler.base.errors import UsageError

    sub = _click_command()
    try:
        ctx = sub.make_context("search", list(argv))
    except Exception as exc:  # the vendored click's UsageError / BadParameter
        format_message = getattr(exc, "format_message", None)
        message = format_message() if callable(format_message) else str(exc)
        raise UsageError(f"search options {list(argv)}: {message}") from None
    return {
        name: value
        for name, value in ctx.params.items()
        if name not in _NOT_SEARCH and _given(ctx.get_parameter_source(name))
    }


def _click_command() -> Any:
    """This command as typer builds it (typer is imported here, not to run a search)."""
    import typer.main

    from crawler.cli import register

    return typer.main.get_command(register("search")).commands["search"]  # type: ignore[attr-defined]


def _given(source: Any) -> bool:
    """The option was on the command line (not its default): typer's vendored click's
    ParameterSource, read by name."""
    return getattr(source, "name", None) == "COMMANDLINE"


def request_from_argv(argv: Sequence[str]) -> SearchRequest:
    """The request ``quants search ARGV`` makes (checked as api.search checks it); without
    --headroom, QUANTS_HEADROOM's (the one budget rule, crawler.base.budget)."""
    from crawler.base.config import Settings
    from crawler.library.search_request import checked_request

    return checked_request(search_options(argv), headroom_gib=Settings.from_env().headroom_gib)


def options_argv(options: Mapping[str, Any]) -> list[str]:
    """A watch's stored options as ``quants search`` arguments (the flags this command
    declares), to show them as they would be typed."""
    params = {p.name: p for p in _click_command().params}
    argv: list[str] = []
    for name, value in options.items():
        param = params.get(name)
        if param is not None and param.param_type_name != "option":
            argv.insert(0, str(value))  # QUERY, first as it is usually typed
        elif param is None:
            argv.append(f"{name}={value}")
        elif isinstance(value, bool):
            flags = param.opts if value else param.secondary_opts
            argv += flags[:1] if flags else [f"{name}={value}"]
        else:
            for item in value if isinstance(value, list) else [value]:
                argv += [param.opts[0], f"{item:g}" if isinstance(item, float) else str(item)]
    return argv


# --- rendering -------------------------------------------------------------------------------


def _bits(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def _mtp_cell(r: Any) -> str:
    c = r.candidate
    state = c.mtp_state or ("present" if c.mtp_present else None)
    if state in (None, "absent"):
        return "-"
    if state != "present":
        return str(state)
    text = f"{_bits(c.mtp_min_bits)}b"
    if c.mtp_preserved is False:
        text += " LOW"
    return text + (" on" if r.config.mtp else " slower" if r.mtp_declined is not None else "")


def _tier_cell(r: Any) -> str:
    from crawler.fit.tiers import tier_of

    tier = tier_of(r.config)
    return f"partial {r.config.n_gpu_layers}" if tier == "partial" else tier


def _measured_text(m: Any) -> str:
    """One published measurement: value, corpus and its source (beside the estimate)."""
    corpus = m.corpus or "corpus not stated"
    return f"{m.label()}, {corpus}; {m.source_url}"


def _render(res: SearchResult) -> str:
    from crawler.cli._output import format_table, human_bytes, safe_text

    rows = []
    for r in res.outcome.results:
        c = r.candidate
        attn = _bits(c.attn_min_bits) + (" LOW" if c.attn_preserved is False else "")
        speed = "-"
        if r.speed is not None:
            speed = f"{r.speed.tok_s:.0f}/{r.speed.tok_s_at_ctx:.0f}"
        rows.append(
            [
                r.rank,
                f"{c.repo_id}:{c.quant_label or c.path}",
                human_bytes(c.size_bytes),
                human_bytes(r.estimate.total),
                human_bytes(r.margin_bytes),
                r.max_ctx if r.max_ctx is not None else "-",
                f"{r.config.type_k}/{r.config.type_v}",
                _tier_cell(r),
                _mtp_cell(r),
                attn,
                # the size prior is part of the score: show the parameters it used
                f"{r.quality.score:.1f} @{r.quality.effective_params / 1e9:.3g}B"
                if r.quality
                else "-",
                speed,
            ]
        )
    columns = ["#", "quant", "size", "total", "margin", "max ctx", "cache", "tier", "MTP",
               "attn bits", "quality", "tok/s*"]  # fmt: skip
    right = ["#", "size", "total", "margin", "max ctx", "quality", "tok/s*"]
    lines = [format_table(columns, rows, align_right=right), ""]
    for r in res.outcome.results:
        shown = r.command or (
            "(no command: mainline llama.cpp cannot load this file)"
            if r.candidate.loadable_by_mainline is False
            else "(no command: a name holds a character no shell line can carry)"
        )
        lines.append(f"{r.rank:>2}  {safe_text(shown)}")
        lines.extend(f"    measured:  {safe_text(_measured_text(m))}" for m in r.measured)
        if r.devices:
            per = ", ".join(
                f"GPU{d.index} {human_bytes(d.total)} of {human_bytes(d.budget)}" for d in r.devices
            )
            lines.append(f"    devices:   {per}")
        # Other runtimes for the first rows only (--json has them for every row).
        if r.ollama and r.rank <= _EQUIVALENT_ROWS:
            lines.append(f"    ollama:    {safe_text(r.ollama)}")
        if r.lm_studio and r.rank <= _EQUIVALENT_ROWS:
            lines.append(f"    lm studio: {safe_text(r.lm_studio)}")
    return "\n".join(lines)


def _footer(res: SearchResult) -> str:
    from crawler.base.budget import budget_text
    from crawler.cli._output import safe_text

    o = res.outcome
    if res.fit_count_exact:
        fit = f"{res.fit_count} fit"
    else:
        fit = f">= {res.fit_count} fit (counted over the first {res.request.count_cap} candidates)"
    b = res.budget
    parts = [
        f"{fit}; showing {len(o.results)} by {res.request.sort} ({res.seconds * 1000:.0f} ms)",
        f"budget: {budget_text(b.vram_bytes, b.headroom_bytes)}"
        + (f" on the first of {len(b.devices)} GPUs" if b.devices else ""),
    ]
    if o.unevaluated:
        parts.append(f"{o.unevaluated} not estimated: none of them could rank higher")
    if res.unknown_memory:
        parts.append(f"{res.unknown_memory} skipped: memory rules not modelled")
    if res.unreadable:
        first = safe_text(res.unreadable[0])
        parts.append(f"{len(res.unreadable)} skipped: stored analysis unreadable (e.g. {first})")
    basis = next((r.speed.basis for r in o.results if r.speed is not None), "")
    parts.append(
        f"* tok/s is an ESTIMATE (empty / full context): {basis or 'llama.cpp decode model'}"
        " (docs/models.md)"
        if res.budget.bandwidth_gb_s
        else "tok/s needs --gpu (memory bandwidth)"
    )
    parts.append("quality: 0-100 estimate from the precision profile (docs/models.md)")
    if any(r.candidate.mtp_preserved is False for r in o.results):
        parts.append(
            "MTP LOW: head below the 6-bit bar; published tests find 4-5 bit heads drafting"
            " within noise of 8-bit, with the task moving acceptance far more (--json:"
            " mtp.reading, docs/models.md)"
        )
    acceptance = res.request.spec.mtp_acceptance
    # a speed-up below 1 is a row that drafts (without MTP the estimate's speed-up is 1)
    slower = sum(1 for r in o.results if r.speed and r.speed.mtp_speedup < 1)
    if slower:
        parts.append(
            f"MTP slower: {slower} of these rows run the draft head where the estimate is faster"
            f" without it (acceptance {acceptance:g}); --no-mtp drops it"
        )
    declined = sum(1 for r in o.results if r.mtp_declined is not None)
    if declined:
        parts.append(
            f"MTP left off: {declined} of these rows (MTP 'slower') have a head that fits but"
            f" the estimate is faster without drafting (acceptance {acceptance:g}); --mtp runs it"
        )
    if any(r.measured for r in o.results):
        parts.append(
            "measured: published by the repo for that exact file, beside the estimate (which it"
            " does not replace); --sort quality lets measured KLD order only files of one base"
            " model measured on one corpus"
        )
    if res.budget.devices:
        parts.append(
            f"{len(res.budget.devices)} GPUs, layer split -ts"
            f" {','.join(f'{x:g}' for x in res.budget.split)}: each device must fit (the tightest"
            " decides the margin); modelled from llama.cpp's source, not measured"
        )
    if res.gpu is not None and res.gpu.gpu.unified:
        from crawler.library.search import backend_note

        parts.append(f"note: {backend_note(res.gpu.gpu.kind)}")
    return "\n".join(parts)
