"""Shell command lines built only from quoted arguments (pure), for every command quants prints.

Published names are untrusted: argv lists are quoted, control characters and "-" operands refused.
Details: docs/internals/ranking.md#shell
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence

__all__ = ["UnsafeArgument", "check_argument", "env_name", "is_safe_argument", "shell_join"]

# C0, DEL, C1 controls, and the Unicode line/paragraph separators and bidi controls a terminal
# or browser may act on (U+2028/9, U+200E/F, U+202A-E, U+2066-9).
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class UnsafeArgument(ValueError):
    """An argument no quoting makes safe to print as part of a command line."""


def check_argument(value: str, *, positional: bool = False) -> str:
    """``value`` if it can go into a command line; raise UnsafeArgument otherwise."""
    if _UNSAFE.search(value):
        raise UnsafeArgument(f"argument {value!r} holds a control character")
    if positional and value.startswith("-"):
        raise UnsafeArgument(f"argument {value!r} would be read as an option")
    return value


def is_safe_argument(value: str, *, positional: bool = False) -> bool:
    """Whether check_argument accepts ``value``."""
    try:
        check_argument(value, positional=positional)
    except UnsafeArgument:
        return False
    return True


def env_name(name: str) -> str:
    """``name`` if it is a valid environment variable name (the part before ``=``)."""
    if not _ENV_NAME.fullmatch(name):
        raise UnsafeArgument(f"{name!r} is not an environment variable name")
    return name


def shell_join(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    positional: Sequence[int] = (),
) -> str:
    """One shell command: ``NAME=value ... argv[0] argv[1] ...``, every word quoted.

    ``positional`` lists the indices of ``argv`` that the program reads as operands (not option
    values): they may not start with ``-``. The program name itself may not contain ``=`` (a
    shell would take it for an assignment).
    """
    if not argv or "=" in argv[0]:
        raise UnsafeArgument("a command needs a program name without '='")
    for i, arg in enumerate(argv):
        check_argument(arg, positional=i in positional or i == 0)
    words = [f"{env_name(k)}={shlex.quote(check_argument(v))}" for k, v in (env or {}).items()]
    return " ".join([*words, *(shlex.quote(a) for a in argv)])
