"""``quants serve``: the local read-only web app (crawler.web) on uvicorn."""

from __future__ import annotations

from typing import Annotated

import typer

from crawler.cli._app import app
from crawler.cli._options import DbOpt


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
    allow_host: Annotated[
        list[str] | None,
        typer.Option(
            "--allow-host",
            help="A Host name clients use to reach a non-loopback --host (repeatable); "
            "required with one. Requests naming any other host get 400.",
        ),
    ] = None,
    header_timeout: Annotated[
        float | None,
        typer.Option(
            "--header-timeout",
            min=0.1,
            help="Seconds a client has to send a request's headers, from its connection or its "
            "previous response, before it is cut off (default: 10).",
        ),
    ] = None,
    idle_timeout: Annotated[
        int | None,
        typer.Option(
            "--idle-timeout",
            min=1,
            help="Seconds a kept-alive connection may stay idle (default: 5).",
        ),
    ] = None,
) -> None:
    """Serve a read-only web app over the catalog: search, models, quants, scans, with charts.

    Listens on loopback by default. Every request's Host header is checked (loopback names, plus
    --allow-host names); header and idle timeouts and a connection cap bound what clients hold.
    """
    import ipaddress
    import socket
    import threading
    import webbrowser

    from crawler.base.config import Settings
    from crawler.base.errors import UsageError

    settings = Settings.from_env().replace(db_url=db)
    url = settings.resolved_db_url
    from crawler.web import create_app
    from crawler.web.app import LOOPBACK_HOSTS
    from crawler.web.limits import (
        IDLE_TIMEOUT_S,
        MAX_CONNECTIONS,
        bind_address,
        header_timeout_protocol,
        is_loopback,
    )

    loopback = is_loopback(host)
    names = [n.strip().lower() for n in allow_host or [] if n.strip()]
    if any(n == "*" or not _host_name(n) for n in names):
        raise UsageError("--allow-host takes a host name or address (no wildcards)")
    if not loopback and not names:
        raise UsageError(
            f"--host {host} is not a loopback address: name the host clients will use with "
            "--allow-host NAME (the Host check refuses every other name)"
        )
    if bind_address(host) is None and not loopback:
        raise UsageError(f"--host {host}: give a numeric address to listen on")
    address = bind_address(host) or "127.0.0.1"
    # The bound address itself is safe to answer as a Host (a page of another origin cannot make
    # a browser send it); an unspecified one (0.0.0.0, ::) is not a name anyone should use.
    own = (
        ()
        if ipaddress.ip_address(address.split("%")[0]).is_unspecified
        else (address, f"[{address}]")
    )
    web = create_app(
        url,
        allowed_hosts=(*LOOPBACK_HOSTS, *own, *names),
        headroom_gib=settings.headroom_gib,
    )
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Accepted connections inherit this (Linux): without it the response body, written after
    # the headers, waits for the client's delayed ACK (~40 ms per keep-alive request).
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((address, port))
        # Listening now: connections made before uvicorn runs wait in the backlog.
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise UsageError(f"cannot listen on {address}:{port}: {exc.strerror or exc}") from None
    bound = sock.getsockname()[1]
    shown_host = f"[{address}]" if ":" in address else address
    link = f"http://{shown_host}:{bound}/"
    if not loopback:
        typer.echo(
            f"warning: listening on {address}, not 127.0.0.1: anyone who can reach this machine "
            f"can read the catalog (as {', '.join(names)})",
            err=True,
        )
    typer.echo(f"quants serve: {link} (read-only; Ctrl-C stops)", err=True)
    import uvicorn

    server = uvicorn.Server(
        uvicorn.Config(
            web,
            log_level="warning",
            access_log=False,
            lifespan="on",
            http=header_timeout_protocol(header_timeout),
            timeout_keep_alive=IDLE_TIMEOUT_S if idle_timeout is None else idle_timeout,
            limit_concurrency=MAX_CONNECTIONS,
        )
    )
    if open_browser:
        threading.Timer(0.5, webbrowser.open, [link]).start()
    server.run(sockets=[sock])


def _host_name(name: str) -> bool:
    """A DNS name or an address (what a Host header can carry), without a port."""
    import re

    return bool(re.fullmatch(r"[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?|\[?[0-9a-f:.]+\]?", name))
