"""quants mcp: the library as Model Context Protocol tools (official mcp SDK).

The commands' --json documents as tools, read-only unless allow_lookup; only this imports mcp.
Details: docs/internals/base.md#mcp_server
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult
from pydantic import Field

from crawler import api

__all__ = ["TOOL_NAMES", "build_server"]

TOOL_NAMES = ("search", "estimate", "inspect", "compare", "check_log", "explain_quant")

_INSTRUCTIONS = (
    "quants finds GGUF quantizations on the Hugging Face Hub that fit a GPU, from what their"
    " headers really contain. search: the quants that fit vram GiB (or a named gpu) at ctx"
    " tokens, best first, each with its llama-server command. estimate: the device memory of one"
    " GGUF at one configuration. inspect / explain_quant: which tensors are at which precision."
    " compare: every quant of one base model. check_log: a llama.cpp log against the estimate."
    " Documents follow the JSON Schemas in crawler/schemas (schema_version 1)."
)

Cache = Literal["f32", "f16", "bf16", "q8_0", "q5_1", "q5_0", "q4_1", "q4_0", "iq4_nl"]
Target = Annotated[
    str,
    Field(
        min_length=1,
        description="A local .gguf path; with --allow-lookup also an http(s) URL,"
        " owner/repo/path.gguf or owner/repo:QUANT on the Hub.",
    ),
]


def build_server(*, allow_lookup: bool = False, db: str | None = None) -> MCPServer:
    """The server with its six tools; ``db`` is the catalog URL (default: QUANTS_DB)."""
    from mcp.types import ToolAnnotations

    server: MCPServer = MCPServer(
        name="quants", instructions=_INSTRUCTIONS, version=_version(), log_level="WARNING"
    )
    # Read-only: the tools change nothing, except the catalog rows a permitted Hub lookup adds.
    notes = ToolAnnotations(
        read_only_hint=not allow_lookup,
        destructive_hint=False,
        idempotent_hint=True,
        open_world_hint=allow_lookup,
    )

    def local_only(target: str | None) -> None:
        if target is None or allow_lookup:
            return
        from crawler.base.config import Settings
        from crawler.base.errors import UsageError
        from crawler.library.targets import parse_target

        kind = parse_target(target, endpoint=Settings.from_env().hf_endpoint).kind
        if kind != "file":
            raise UsageError(
                f"{target!r} is not a local file; this server reads no Hub or URL targets"
                " (start it with `quants mcp --allow-lookup` to allow that)"
            )

    def search(
        vram: Annotated[
            float | None, Field(ge=0.1, description="GPU memory budget in GiB (or give gpu).")
        ] = None,
        ctx: Annotated[int | None, Field(ge=1, description="Context length in tokens.")] = None,
        query: Annotated[str | None, Field(description="Model name, fuzzy: 'qwen3.6 27b'.")] = None,
        gpu: Annotated[
            list[str] | None,
            Field(description="GPU name(s), fuzzy: ['RTX 4090'] or ['2x 3090'] (VRAM, tok/s)."),
        ] = None,
        headroom: Annotated[float, Field(ge=0, description="GiB kept free.")] = 0.5,
        cache_type_k: Annotated[Cache | None, Field(description="Pin the K cache type.")] = None,
        cache_type_v: Annotated[Cache | None, Field(description="Pin the V cache type.")] = None,
        mtp: Annotated[
            bool | None,
            Field(description="true: only quants that run with their MTP head; false: never."),
        ] = None,
        min_attn_bits: Annotated[float | None, Field(description="Attention at >= B bits.")] = None,
        arch: Annotated[str | None, Field(description="GGUF architecture.")] = None,
        author: Annotated[str | None, Field(description="Uploader.")] = None,
        base: Annotated[str | None, Field(description="Base model id.")] = None,
        label: Annotated[str | None, Field(description="Quant label, e.g. Q4_K_M.")] = None,
        loadable: Annotated[bool, Field(description="Only files mainline loads.")] = False,
        tier: Annotated[
            Literal["gpu", "experts_cpu", "partial"],
            Field(description="Highest tier: all on the GPU, a MoE's experts in RAM, -ngl auto."),
        ] = "gpu",
        ram: Annotated[float | None, Field(ge=0.1, description="Host memory in GiB.")] = None,
        cpu_moe: Annotated[bool, Field(description="Routed experts in host memory.")] = False,
        n_gpu_layers: Annotated[
            str | None,
            Field(pattern=r"^(all|auto|\d+)$", description="N (pinned), auto (partial), all."),
        ] = None,
        vision: Annotated[bool, Field(description="With the vision projector.")] = False,
        sort: Annotated[
            Literal["quality", "speed", "size", "margin", "ctx", "downloads", "updated"],
            Field(description="Order, best first (speed needs gpu)."),
        ] = "quality",
        limit: Annotated[int, Field(ge=1, le=200, description="At most this many results.")] = 10,
    ) -> CallToolResult:
        """The GGUF quants that fit a memory budget at a context, best first, each with its
        estimate, quality, MTP/attention verdicts and the llama-server command that runs it
        (the `quants search --json` document)."""
        return _call(
            lambda: api.search(
                query, vram=vram, ctx=ctx, gpu=gpu, headroom=headroom, cache_type_k=cache_type_k,
                cache_type_v=cache_type_v, mtp=mtp, min_attn_bits=min_attn_bits, arch=arch,
                author=author, base=base, label=label, loadable=loadable, tier=tier, ram=ram,
                cpu_moe=cpu_moe, n_gpu_layers=n_gpu_layers, vision=vision, sort=sort, limit=limit,
                db=db, offline=not allow_lookup,
            )
        )  # fmt: skip

    def estimate(
        target: Target,
        ctx: Annotated[int, Field(ge=1, description="Context length in tokens.")],
        cache_type_k: Cache = "f16",
        cache_type_v: Cache = "f16",
        flash_attn: Literal["on", "off", "auto"] = "auto",
        parallel: Annotated[int, Field(ge=-1, description="Slots; -1: the server default.")] = 1,
        mtp: Annotated[bool, Field(description="MTP drafting.")] = False,
        cpu_moe: Annotated[bool, Field(description="All routed experts in host memory.")] = False,
        n_cpu_moe: Annotated[int, Field(ge=0, description="Experts of the first N layers.")] = 0,
        n_gpu_layers: Annotated[
            str, Field(pattern=r"^(all|auto|\d+)$", description="N, all or auto (fit vram).")
        ] = "all",
        gpu: Annotated[list[str] | None, Field(description="GPU name(s), fuzzy.")] = None,
        vram: Annotated[float | None, Field(ge=0.1, description="Budget in GiB.")] = None,
    ) -> CallToolResult:
        """The GPU memory llama-server needs for one GGUF at ctx tokens, by component; with
        vram or gpu, whether it fits and the largest context that does (`quants estimate
        --json`)."""

        def run() -> api.EstimateAnswer:
            local_only(target)
            return api.estimate(
                target, ctx=ctx, cache_type_k=cache_type_k, cache_type_v=cache_type_v,
                flash_attn=flash_attn, parallel=parallel, mtp=mtp, cpu_moe=cpu_moe,
                n_cpu_moe=n_cpu_moe, n_gpu_layers=n_gpu_layers, gpu=gpu, vram=vram,
            )  # fmt: skip

        return _call(run)

    def inspect(
        target: Target,
        tensors: Annotated[bool, Field(description="Also list every tensor.")] = False,
    ) -> CallToolResult:
        """Which tensors of a GGUF are at which precision, the MTP and attention verdicts and
        any contradiction between its name and contents (`quants inspect --json`)."""

        def run() -> api.InspectAnswer:
            local_only(target)
            return api.inspect(target, tensors=tensors)

        return _call(run)

    def compare(
        query: Annotated[str, Field(min_length=1, description="Base model, fuzzy.")],
    ) -> CallToolResult:
        """Every quant of one base model in the catalog side by side, smallest first, with the
        bits of each tensor group (`quants compare --json`)."""
        return _call(lambda: api.compare(query, db=db, offline=not allow_lookup))

    def check_log(
        log_text: Annotated[
            str | None, Field(description="The text of a llama-server log (run with -lv 4).")
        ] = None,
        log_path: Annotated[str | None, Field(description="Or its path on this machine.")] = None,
        model: Annotated[
            str | None, Field(description="The GGUF it ran (default: the path the log names).")
        ] = None,
        cpu_moe: bool = False,
        n_cpu_moe: Annotated[int | None, Field(ge=0)] = None,
    ) -> CallToolResult:
        """llama.cpp's logged buffers next to quants' estimate of the same run, and whether
        they agree within the tolerance (`quants check-log --json`)."""

        def run() -> api.CheckLogAnswer:
            local_only(model)
            return api.check_log(
                log_path, text=log_text, model=model, cpu_moe=cpu_moe, n_cpu_moe=n_cpu_moe, db=db
            )

        return _call(run)

    def explain_quant(target: Target) -> str:
        """A GGUF's precision profile and verdicts in plain sentences: what it is, which
        tensor groups keep how many bits, whether its MTP head and attention are preserved,
        whether mainline llama.cpp loads it, and where its name and contents disagree."""
        from crawler.profile.explain import explain_profile

        def run() -> str:
            local_only(target)
            answer = api.inspect(target)
            return explain_profile(answer.profile, source=answer.read.source)

        text: str = _guard(run)
        return text

    for fn in (search, estimate, inspect, compare, check_log, explain_quant):
        server.add_tool(fn, annotations=notes)
    return server


def _call(fn: Callable[[], Any]) -> CallToolResult:
    """The answer as the --json text and as structured content."""
    from mcp.types import TextContent

    answer = _guard(fn)
    return CallToolResult(
        content=[TextContent(type="text", text=answer.to_json())],
        structured_content=answer.to_dict(),
    )


def _guard(fn: Callable[[], Any]) -> Any:
    """Run a tool body; a quants error becomes the tool's error result, with the one line
    the CLI would print (and its hint)."""
    from mcp.server.mcpserver.exceptions import ToolError

    from crawler.base.errors import QuantsError

    try:
        return fn()
    except QuantsError as exc:
        message = " ".join(str(exc).split()) or type(exc).__name__
        hint = getattr(exc, "hint", None)
        raise ToolError(f"error: {message}" + (f" (hint: {hint})" if hint else "")) from None


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("quants")
    except PackageNotFoundError:
        return "0"
