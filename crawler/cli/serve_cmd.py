"""``quants serve``: the local read-only web app (crawler.web) on uvicorn."""

from __future__ import annotations

from typing import Annotated

import typer

from crawler.cli._app import DbOpt, app

_LOOPBACK = ("127.0.0.1", "localhost", "::1")


@app.command("serve")
def serve(
    db: DbOpt = None,
    host: Annotated[
        str, typer.Option("--host", help="Address to listen on (default: this machine only).")
    ] = "127.0.0.1",
    port: Annotated[
        int, typer.Option("--port", min=0, max=65535, help="TCP port (0: any free port).")
    ] = 8765,
    open_browser: Annotated[
        bool, typer.Option("--open", help="Open the search page in the default browser.")
    ] = False,
) -> None:
    """Serve a read-only web app over the catalog: search, models, quants, scans, with charts."""
    import socket
    import threading
    import webbrowser

    from crawler.config import Settings
    from crawler.errors import UsageError

    settings = Settings.from_env().replace(db_url=db)
    url = settings.resolved_db_url
    loopback = host in _LOOPBACK
    from crawler.web import create_app
    from crawler.web.app import LOOPBACK_HOSTS

    web = create_app(
        url,
        allowed_hosts=LOOPBACK_HOSTS if loopback else ("*",),
        headroom_gib=settings.headroom_gib,
    )
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Accepted connections inherit this (Linux): without it the response body, written after
    # the headers, waits for the client's delayed ACK (~40 ms per keep-alive request).
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
        # Listening now: connections made before uvicorn runs wait in the backlog.
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    bound = sock.getsockname()[1]
    shown_host = f"[{host}]" if ":" in host else host
    address = f"http://{shown_host}:{bound}/"
    if not loopback:
        typer.echo(
            f"warning: listening on {host}, not 127.0.0.1: anyone who can reach this machine "
            "can read the catalog",
            err=True,
        )
    typer.echo(f"quants serve: {address} (read-only; Ctrl-C stops)", err=True)
    import uvicorn

    server = uvicorn.Server(
        uvicorn.Config(web, log_level="warning", access_log=False, lifespan="on")
    )
    if open_browser:
        threading.Timer(0.5, webbrowser.open, [address]).start()
    server.run(sockets=[sock])
