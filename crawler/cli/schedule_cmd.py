"""``quants schedule``: crawl on a cron schedule in the foreground, or print a unit/crontab."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from crawler.cli._app import app
from crawler.cli._options import DbOpt

if TYPE_CHECKING:
    from crawler.base.config import Settings


def _quants_argv() -> list[str]:
    """How to start this quants again from a unit file or crontab (absolute paths).

    The script beside this interpreter first (a virtual environment's ``bin/``), then PATH.
    Symlinks are not resolved: a venv's ``python`` links to the base interpreter, outside the
    venv and its packages.
    """
    import shutil
    import sys

    beside = Path(sys.executable).absolute().parent / "quants"
    if beside.is_file():
        return [str(beside)]
    found = shutil.which("quants")
    if found:
        return [str(Path(found).absolute())]
    return [str(Path(sys.executable).absolute()), "-m", "crawler"]


def _environment(settings: Settings) -> dict[str, str]:
    """The settings a crawl started by the OS needs (never HF_TOKEN: that goes in a 0600 file)."""
    from crawler.base.config import DEFAULT_ENDPOINT

    env: dict[str, str] = {}
    if settings.db_url:
        env["QUANTS_DB"] = settings.db_url
    if settings.data_dir is not None:
        env["QUANTS_DATA_DIR"] = str(settings.data_dir)
    if settings.hf_endpoint != DEFAULT_ENDPOINT:
        env["QUANTS_HF_ENDPOINT"] = settings.hf_endpoint
    return env


@app.command()
def schedule(
    cron: Annotated[
        str,
        typer.Option("--cron", help="When to crawl: a crontab(5) expression or @daily/@hourly."),
    ] = "0 3 * * *",
    timezone: Annotated[
        str | None,
        typer.Option(
            "--timezone",
            help="IANA time zone of --cron, e.g. Europe/Berlin (default: the machine's).",
            show_default=False,
        ),
    ] = None,
    run_now: Annotated[
        bool, typer.Option("--run-now", help="Crawl once right away, then follow --cron.")
    ] = False,
    jitter: Annotated[
        int,
        typer.Option("--jitter", min=0, help="Start each crawl up to this many seconds late."),
    ] = 300,
    misfire_grace: Annotated[
        int,
        typer.Option(
            "--misfire-grace",
            min=1,
            help="A crawl missed by up to this many seconds (sleep, pause) still runs once.",
        ),
    ] = 3600,
    log_file: Annotated[
        Path | None,
        typer.Option("--log-file", help="Also log to this file.", show_default=False),
    ] = None,
    print_systemd: Annotated[
        bool,
        typer.Option("--print-systemd", help="Print a systemd service + timer instead; exit."),
    ] = False,
    print_cron: Annotated[
        bool, typer.Option("--print-cron", help="Print a crontab entry instead; exit.")
    ] = False,
    author: Annotated[
        list[str] | None,
        typer.Option(
            "--author", help="Crawl this author's repos (repeatable).", show_default=False
        ),
    ] = None,
    search: Annotated[
        list[str] | None,
        typer.Option(
            "--search", help="Crawl repos matching this term (repeatable).", show_default=False
        ),
    ] = None,
    limit: Annotated[
        int | None,
        typer.Option(
            "--limit", min=1, help="At most this many repos per crawl.", show_default=False
        ),
    ] = None,
    db: DbOpt = None,
) -> None:
    """Crawl the Hub on a schedule, in the foreground (SIGTERM/Ctrl-C stop it cleanly).

    Each run takes the crawl lock (a manual `quants crawl` and a scheduled one never overlap),
    records a scan, then evaluates the watches. `--print-systemd` / `--print-cron` print an
    entry for the OS scheduler instead, running `quants crawl` on the same schedule.
    """
    from crawler.base.config import Settings
    from crawler.base.errors import UsageError
    from crawler.crawl.cron import crontab_text, parse_cron, systemd_units
    from crawler.crawl.logs import configure_logging
    from crawler.crawl.run import CrawlScope
    from crawler.crawl.scheduler import ScheduleOptions, build_trigger, run_scheduler

    settings = Settings.from_env().replace(db_url=db)
    options = ScheduleOptions(
        cron=cron,
        timezone=timezone,
        run_now=run_now,
        jitter_s=jitter,
        misfire_grace_s=misfire_grace,
    )
    build_trigger(options)  # check --cron and --timezone before anything else
    if print_systemd and print_cron:
        raise UsageError("give one of --print-systemd and --print-cron")
    scope = CrawlScope(
        authors=tuple(author) if author else None,
        searches=tuple(search) if search else None,
        limit=limit,
    )
    argv = [*_quants_argv(), "crawl", *scope.crawl_args()]
    if print_systemd:
        typer.echo(
            systemd_units(
                parse_cron(cron),
                argv,
                environment=_environment(settings),
                timezone=timezone,
                jitter_s=jitter,
            ),
            nl=False,
        )
        return
    if print_cron:
        log = log_file or settings.resolved_data_dir / "crawl.log"
        typer.echo(
            crontab_text(
                parse_cron(cron),
                argv,
                log_file=str(log),
                environment=_environment(settings),
                timezone=timezone,
            ),
            nl=False,
        )
        return
    configure_logging(settings, service=True, log_file=log_file)
    run_scheduler(settings, options, scope=scope)
