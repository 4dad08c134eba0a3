"""The quants command line: parse, build settings, call the library, render.

May import: every layer below.
Details: docs/internals/cli.md#overview
"""

from __future__ import annotations

import os
import sys
from importlib import import_module

# Not typing.TYPE_CHECKING: `quants --help` imports nothing it does not print (typing ~5 ms).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    import typer

__all__ = ["COMMANDS", "app", "main", "root_help"]

#: Every command: (name, module that registers it, one-line summary). ``quants --help`` prints
#: this without importing typer or any command; a command's run imports only its own module
#: (tests/e2e/test_cli_basics.py checks the table against the commands typer registers).
COMMANDS: tuple[tuple[str, str, str], ...] = (
    ("changes", "changes_cmd", "What changed in the catalog: new quants, re-uploads, vanished."),
    ("check-log", "checklog_cmd", "Compare the buffers llama.cpp logged with the estimate."),
    ("compare", "compare_cmd", "One base model's quants side by side."),
    ("crawl", "crawl_cmd", "Crawl GGUF repos into the catalog."),
    ("estimate", "estimate_cmd", "Estimate the GPU memory llama-server needs for a GGUF."),
    ("inspect", "inspect_cmd", "Show which tensors of a GGUF are at which precision."),
    ("reprofile", "reprofile_cmd", "Recompute every quant's profile and memory model."),
    ("scans", "scans_cmd", "List crawl passes."),
    ("schedule", "schedule_cmd", "Crawl the Hub on a schedule, in the foreground."),
    ("search", "search_cmd", "List the GGUF quants that fit a VRAM budget at a context."),
    ("serve", "serve_cmd", "Serve a read-only web app over the catalog."),
    ("export", "snapshot_cmd", "Write the catalog as a snapshot."),
    ("import", "snapshot_cmd", "Merge a snapshot into the catalog."),
    ("publish", "snapshot_cmd", "Export the catalog and upload it to a Hub dataset repo."),
    ("pull", "snapshot_cmd", "Download a published snapshot and import it."),
    ("sql", "sql_cmd", "Run ONE read-only SQL statement against the catalog."),
    ("db", "db_cmd", "Create or migrate the catalog database."),
    (
        "mcp",
        "mcp_cmd",
        "Serve search, estimate, inspect, compare, check_log and explain_quant as MCP tools.",
    ),
    ("watch", "watch_cmd", "Saved searches: after every scan, their new or re-uploaded results."),
)
_SUMMARY = "Find, verify and rank GGUF quantizations on the Hugging Face Hub."


def root_help() -> str:
    """``quants --help``: the commands, from COMMANDS (no command is imported)."""
    width = max(len(name) for name, _, _ in COMMANDS)
    lines = [
        "Usage: quants [OPTIONS] COMMAND [ARGS]...",
        "",
        f"  {_SUMMARY}",
        "",
        "Options:",
        "  --version  Print the version and exit.",
        "  --help     Show this message and exit.",
        "",
        "Commands:",
    ]
    lines += [f"  {name:<{width}}  {summary}" for name, _, summary in COMMANDS]
    lines += ["", "Run `quants COMMAND --help` for a command's options."]
    return "\n".join(lines)


def register(command: str | None) -> typer.Typer:
    """The typer app with ``command``'s module imported (every module when ``command`` is not
    a known command name: typer then answers with its usage error)."""
    from crawler.cli._app import add_declared, ready_app

    modules = {m for name, m, _ in COMMANDS if name == command} or {m for _, m, _ in COMMANDS}
    for module in sorted(modules):
        import_module(f"crawler.cli.{module}")  # importing a command module registers it
        add_declared(f"crawler.cli.{module}")  # or declares it (crawler.cli._options.command)
    return ready_app()


def __getattr__(name: str) -> Any:
    if name == "app":  # the app with every command registered
        return register(None)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# Error type name -> hint; looked up along the exception's MRO (the huggingface_hub pattern).
_HINTS: dict[str, str] = {
    "ConfigError": "check the QUANTS_* environment variables and flags (see README)",
    "NoSuchFile": "check the path; a Hub file is owner/repo/path.gguf, a quant owner/repo:QUANT",
    "UsageError": "`quants {command} --help` lists the options and the forms they take",
    "HubNotFound": "check the repo id and file path; private repos need HF_TOKEN",
    "HubGated": "accept the repo's terms on the Hub and set HF_TOKEN",
    "HubRateLimited": "wait and retry, or set HF_TOKEN for a larger rate limit",
    "HubUnreachable": "check the network or QUANTS_HF_ENDPOINT; --offline answers from the catalog",
    "HubUnavailable": "the Hub (or network) failed; retry later",
    "HubBudgetExhausted": "raise QUANTS_MAX_REQUESTS / QUANTS_MAX_BYTES or crawl less",
    "GGUFError": "the error names where the header fails; a download cut inside its header must be"
    " fetched again (one cut after the header still inspects)",
    "BigEndianGGUF": "the file is whole but big-endian; llama.cpp on a little-endian machine does"
    " not load it either: get (or convert to) the little-endian file",
    "HeaderTooLarge": "raise QUANTS_MAX_HEADER_BYTES if you trust the file",
    "UnknownArchitecture": "this architecture's memory rules are not modelled yet",
    "NothingToEstimate": "estimate the model file this vocabulary belongs to",
    "TruncatedModel": "download the whole file (or every part of a split one) and estimate that",
    "InvalidConfig": "llama.cpp would reject this configuration; change the flags",
    "SchemaOutOfDate": "run `quants db upgrade`",
    "ReadOnlyViolation": "`quants sql` is read-only; it cannot change the catalog",
    "QueryError": "check the SQL; `quants sql --list` shows the shipped queries",
    "CatalogError": "check --db / QUANTS_DB",
    "LockHeld": "wait for the other crawl to finish",
    "SnapshotError": "nothing was imported; export the snapshot again or pull a good revision",
}


def _one_line(text: str) -> str:
    from crawler.cli._output import safe_text

    return safe_text(" ".join(str(text).split()))


def _hint_for(exc: BaseException) -> str | None:
    for cls in type(exc).__mro__:
        if cls.__name__ in _HINTS:
            return _HINTS[cls.__name__]
    return None


def _command_name(argv: list[str] | None) -> str:
    """The subcommand being run (for hints that name it), from argv."""
    args = sys.argv[1:] if argv is None else argv
    names = {name for name, _, _ in COMMANDS}
    return next((a for a in args if a in names), "COMMAND")


#: Commands declared without typer (crawler.cli._options), whose plain argv is parsed without
#: importing it (typer and pydantic are most of such a command's start-up).
_TYPER_FREE = frozenset({"search"})


def _run_without_typer(args: list[str]) -> None:
    """Run ``quants COMMAND ARGS`` and exit, when COMMAND is declared without typer and its
    parser reads ARGS exactly as typer would (crawler.cli._argv); else return, for typer."""
    if not args or args[0] not in _TYPER_FREE or os.environ.get("_QUANTS_COMPLETE"):
        return  # typer's shell completion is asked for by that variable, whatever the argv
    from crawler.cli import _argv
    from crawler.cli._options import DECLARED

    import_module(f"crawler.cli.{next(m for name, m, _ in COMMANDS if name == args[0])}")
    func = DECLARED[args[0]]
    values = _argv.parse(func, args[1:])
    if values is not None:
        _argv.run(func, values)


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; exit with the documented code."""
    args = sys.argv[1:] if argv is None else list(argv)
    if args == ["--help"]:  # before any import: the command table is all it prints
        print(root_help())
        sys.exit(0)
    from crawler.base.errors import QuantsError
    from crawler.crawl.logs import escape_unconfigured_logs

    escape_unconfigured_logs()
    debug = os.environ.get("QUANTS_DEBUG", "") not in ("", "0", "false", "no")
    command = next((a for a in args if not a.startswith("-")), None)
    try:
        _run_without_typer(args)
        register(command)(args=args, prog_name="quants", standalone_mode=True)
    except QuantsError as exc:
        if debug:
            raise
        # An expected error: its message and a hint chosen by its type; no traceback offer (the
        # traceback of a known error says nothing more than the message).
        msg = f"error: {_one_line(str(exc)) or type(exc).__name__}"
        hint = getattr(exc, "hint", None) or _hint_for(exc)
        print(msg, file=sys.stderr)
        if hint:
            print(f"hint: {hint.replace('{command}', _command_name(argv))}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        sys.exit(130)
    except BrokenPipeError:
        # `quants ... | head`: the reader went away; not an error worth a traceback.
        sys.stderr.close()
        sys.exit(0)
    except Exception as exc:
        if debug:
            raise
        print(
            f"error: internal error: {type(exc).__name__}: {_one_line(str(exc))}", file=sys.stderr
        )
        print(
            "hint: this is a bug in quants; rerun with QUANTS_DEBUG=1 and report it",
            file=sys.stderr,
        )
        sys.exit(1)
