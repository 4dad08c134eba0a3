"""``quants sql``: read-only SQL over the catalog (shipped queries, files, or text)."""

from __future__ import annotations

from typing import Annotated

import typer

from crawler.cli._app import app
from crawler.cli._options import DbOpt, JsonOpt


@app.command("sql")
def sql(
    query: Annotated[
        str | None,
        typer.Argument(
            help="SQL text, a .sql file, or the name of a shipped query.", show_default=False
        ),
    ] = None,
    param: Annotated[
        list[str] | None, typer.Option("--param", "-p", help="Query parameter NAME=VALUE.")
    ] = None,
    as_json: JsonOpt = False,
    as_csv: Annotated[bool, typer.Option("--csv", help="Print CSV.")] = False,
    list_: Annotated[bool, typer.Option("--list", help="List the shipped queries.")] = False,
    timeout: Annotated[
        float, typer.Option("--timeout", min=0.1, help="Seconds the statement may run.")
    ] = 30.0,
    max_rows: Annotated[
        int, typer.Option("--max-rows", min=1, help="More rows than this is an error.")
    ] = 100_000,
    db: DbOpt = None,
) -> None:
    """Run ONE read-only SQL statement against the catalog.

    Anything else is refused: a second statement, a statement that is not a read, and any
    write the connection sees (PostgreSQL: read-only transaction and session; SQLite: mode=ro).
    A missing SQLite catalog is an error, never created.
    """
    from crawler.base.config import Settings
    from crawler.base.errors import UsageError
    from crawler.catalog import Catalog, params_from_pairs
    from crawler.catalog.queries import bind_params, list_queries, resolve_query
    from crawler.cli._output import format_table, print_csv, print_json, safe_text

    if list_:
        for q in list_queries():
            params = " ".join(
                f":{k}" + (f"={v}" if v is not None else "") for k, v in q.params.items()
            )
            typer.echo(f"{q.name:<28} {safe_text(q.purpose)}" + (f"  [{params}]" if params else ""))
        return
    if query is None:
        raise UsageError("give a query (SQL, a .sql file or a shipped query name) or --list")
    if as_json and as_csv:
        raise UsageError("--json and --csv are exclusive")
    named = resolve_query(query)
    values = bind_params(named, params_from_pairs(param or []))
    url = Settings.from_env().replace(db_url=db).resolved_db_url
    with Catalog.open_readonly(url) as catalog:
        columns, rows = catalog.query_readonly(
            named.sql, values, max_rows=max_rows, timeout_s=timeout
        )
    if as_json:
        print_json([dict(zip(columns, row, strict=True)) for row in rows])
    elif as_csv:
        print_csv(columns, rows)
    elif columns:
        typer.echo(format_table(columns, rows))
        typer.echo(f"({len(rows)} row{'s' if len(rows) != 1 else ''})", err=True)
