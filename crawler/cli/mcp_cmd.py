"""``quants mcp``: serve the library's answers to agents over the Model Context Protocol."""

from __future__ import annotations

from typing import Annotated

import typer

from crawler.cli._app import app
from crawler.cli._options import DbOpt


@app.command("mcp")
def mcp_command(
    http: Annotated[
        bool,
        typer.Option("--http", help="Streamable HTTP on 127.0.0.1 instead of stdio."),
    ] = False,
    port: Annotated[
        int, typer.Option("--port", min=1, max=65535, help="Port of --http (loopback only).")
    ] = 8765,
    allow_lookup: Annotated[
        bool,
        typer.Option(
            "--allow-lookup",
            help="Let search/compare look a model up on the Hub (and store it), and read Hub"
            " and URL targets. Default: read-only, catalog and local files only.",
        ),
    ] = False,
    db: DbOpt = None,
) -> None:
    """Serve search, estimate, inspect, compare, check_log and explain_quant as MCP tools
    (stdio by default; docs/api.md has the config a desktop agent needs)."""
    from crawler.base.errors import UsageError

    try:
        from crawler.mcp.server import build_server
    except ImportError as exc:
        raise UsageError(
            f"quants mcp needs the mcp package ({exc.name} is missing): pip install 'quants[mcp]'"
        ) from None
    server = build_server(allow_lookup=allow_lookup, db=db)
    if not http:
        server.run("stdio")
        return
    typer.echo(f"MCP (streamable HTTP) on http://127.0.0.1:{port}/mcp", err=True)
    server.run("streamable-http", host="127.0.0.1", port=port)
