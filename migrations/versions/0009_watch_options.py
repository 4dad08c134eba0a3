"""watch_options: a watch stores its search options by name, not the argv of `quants search`

Revision ID: 0009_watch_options
Revises: 0008_measured_quality
Create Date: 2026-12-04

Until now ``watches.args`` held the argv after ``quants watch add NAME --`` and every evaluation
re-parsed it with the search command's parser, so the crawl needed the CLI to run a watch. Now it
holds a JSON object of the options by name ({"vram": 24.0, "ctx": 262144, "mtp": true}), the
names crawler.library.search.build_request takes. This revision converts the stored argv with the
options ``quants search`` had at revision 0008 (frozen here: a revision never calls live code).
An argv it cannot read (an option retired before this revision) is kept under
``unconverted_argv``: such a watch failed before and still does, logged and skipped, and
``quants watch list`` shows what it was. The column type (JSON) is unchanged.
"""

from __future__ import annotations

import re
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0009_watch_options"
down_revision: str | None = "0008_measured_quality"
branch_labels = None
depends_on = None

# `quants search` at 0008: flag -> (option name, how its value reads).
_VALUED: dict[str, tuple[str, str]] = {
    "--vram": ("vram", "gib"), "--ram": ("ram", "gib"), "--headroom": ("headroom", "gib"),
    "--ctx": ("ctx", "ctx"), "-c": ("ctx", "ctx"), "--gpu": ("gpu", "list"),
    "--cache-type-k": ("cache_type_k", "str"), "-ctk": ("cache_type_k", "str"),
    "--cache-type-v": ("cache_type_v", "str"), "-ctv": ("cache_type_v", "str"),
    "--spec-draft-n-max": ("spec_draft_n_max", "int"),
    "--mtp-acceptance": ("mtp_acceptance", "float"), "--min-attn-bits": ("min_attn_bits", "float"),
    "--arch": ("arch", "str"), "--author": ("author", "str"), "--base": ("base", "str"),
    "--label": ("label", "str"), "--n-cpu-moe": ("n_cpu_moe", "int"),
    "--n-gpu-layers": ("n_gpu_layers", "str"), "-ngl": ("n_gpu_layers", "str"),
    "--flash-attn": ("flash_attn", "str"), "-fa": ("flash_attn", "str"),
    "--parallel": ("parallel", "int"), "-np": ("parallel", "int"),
    "--ubatch-size": ("ubatch", "int"), "-ub": ("ubatch", "int"),
    "--tensor-split": ("tensor_split", "str"), "-ts": ("tensor_split", "str"),
    "--tier": ("tier", "str"), "--sort": ("sort", "str"), "--limit": ("limit", "int"),
    "--db": ("", "str"), "--emit": ("", "str"), "--out": ("", "str"),
}  # fmt: skip
_FLAGS: dict[str, tuple[str, bool]] = {
    "--auto-cache": ("auto_cache", True), "--mtp": ("mtp", True), "--no-mtp": ("mtp", False),
    "--loadable": ("loadable", True), "--cpu-moe": ("cpu_moe", True),
    "--vision": ("vision", True), "--mmproj": ("vision", True), "--no-mmproj": ("vision", False),
    "--json": ("", True), "--offline": ("", True),
}  # fmt: skip
# The amounts as crawler/amounts.py read them at 0008 (k = 1024 tokens; G, GB, GiB = GiB).
_CTX = re.compile(r"(\d+(?:\.\d+)?)\s*(|k|ki|m|mi)", re.IGNORECASE | re.ASCII)
_MEM = re.compile(
    r"(\d+(?:\.\d+)?|\.\d+)\s*(|g|gb|gib|m|mb|mib|t|tb|tib)", re.IGNORECASE | re.ASCII
)
_CTX_SCALE = {"": 1, "k": 1024, "m": 1 << 20}
_MEM_SCALE = {"": 1.0, "g": 1.0, "m": 1 / 1024, "t": 1024.0}


def _value(kind: str, raw: str) -> Any:
    if kind == "gib":
        m = _MEM.fullmatch(raw.strip())
        if m is None:
            raise ValueError(raw)
        return float(m[1]) * _MEM_SCALE[m[2][:1].lower()]
    if kind == "ctx":
        m = _CTX.fullmatch(raw.strip())
        if m is None or float(m[1]) * _CTX_SCALE[m[2][:1].lower()] % 1:
            raise ValueError(raw)
        return int(float(m[1]) * _CTX_SCALE[m[2][:1].lower()])
    if kind == "int":
        return int(raw)
    if kind == "float":
        return float(raw)
    return raw


def options_from_argv(argv: list[str]) -> dict[str, Any]:
    """The named options of a 0008 argv; ValueError for one this revision cannot read."""
    options: dict[str, Any] = {}
    args = list(argv)
    positional = False
    while args:
        arg = str(args.pop(0))
        if positional or arg == "-" or not arg.startswith("-"):
            if "query" in options:
                raise ValueError(f"a second QUERY {arg!r}")
            options["query"] = arg
            continue
        if arg == "--":
            positional = True
            continue
        flag, eq, inline = arg.partition("=")
        if flag in _FLAGS and not eq:
            name, on = _FLAGS[flag]
            if name:
                options[name] = on
            continue
        if flag not in _VALUED:
            raise ValueError(f"no such option {flag!r}")
        name, kind = _VALUED[flag]
        if not eq:
            if not args:
                raise ValueError(f"{flag} needs a value")
            inline = str(args.pop(0))
        if not name:
            continue
        value = _value("str" if kind == "list" else kind, inline)
        if kind == "list":
            options.setdefault(name, []).append(value)
        else:
            options[name] = value
    return options


def upgrade() -> None:
    watches = sa.table("watches", sa.column("id", sa.Integer), sa.column("args", sa.JSON))
    conn = op.get_bind()
    for row_id, args in conn.execute(sa.select(watches.c.id, watches.c.args)).all():
        if not isinstance(args, list):
            continue
        try:
            options = options_from_argv(args)
        except ValueError:
            options = {"unconverted_argv": [str(a) for a in args]}
        conn.execute(sa.update(watches).where(watches.c.id == row_id).values(args=options))


def downgrade() -> None:
    # The options as argv again: `--name value` for each (ubatch as --ubatch-size), which the
    # search command at 0008 reads.
    watches = sa.table("watches", sa.column("id", sa.Integer), sa.column("args", sa.JSON))
    conn = op.get_bind()
    flags = {name: flag for flag, (name, _) in _VALUED.items() if flag.startswith("--") and name}
    for row_id, options in conn.execute(sa.select(watches.c.id, watches.c.args)).all():
        if not isinstance(options, dict):
            continue
        argv: list[str] = list(options.get("unconverted_argv", []))
        for name, value in options.items():
            if name == "query":
                argv.insert(0, str(value))
            elif isinstance(value, bool):
                on = {n: f for f, (n, v) in _FLAGS.items() if v == value and n}
                if name in on:
                    argv.append(on[name])
            elif name in flags:
                for item in value if isinstance(value, list) else [value]:
                    argv += [flags[name], str(item)]
        conn.execute(sa.update(watches).where(watches.c.id == row_id).values(args=argv))
