"""Cron expressions: parse and check them, and say them to apscheduler, systemd and crontab.

Pure: no I/O. One parser, so that --cron, --print-systemd and --print-cron agree.
Details: docs/internals/crawl.md#cron
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from crawler.base.errors import ConfigError

__all__ = [
    "CronSpec",
    "crontab_text",
    "parse_cron",
    "systemd_units",
]

# crontab(5) "@" macros.
_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
_SYSTEMD_DAYS = ("Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat")
# (name, low, high, names for low..)
_FIELDS: tuple[tuple[str, int, int, tuple[str, ...]], ...] = (
    ("minute", 0, 59, ()),
    ("hour", 0, 23, ()),
    ("day of month", 1, 31, ()),
    ("month", 1, 12, _MONTHS),
    ("day of week", 0, 7, _DAYS),
)


@dataclass(frozen=True, slots=True)
class CronSpec:
    """A checked cron expression; each field is None for ``*`` or the sorted values it allows.

    Weekdays are 0-6 with 0 = Sunday (7 is folded into 0), as in crontab(5).
    """

    expression: str
    minute: tuple[int, ...] | None
    hour: tuple[int, ...] | None
    day: tuple[int, ...] | None
    month: tuple[int, ...] | None
    weekday: tuple[int, ...] | None

    def apscheduler_fields(self) -> dict[str, str]:
        """Keyword arguments for apscheduler 3.x ``CronTrigger``.

        Weekdays are passed by name: apscheduler 3.x numbers them from Monday = 0, unlike cron
        (apscheduler ``CronTrigger.from_crontab`` docstring, issue agronholm/apscheduler#286), so
        passing cron's numbers through would shift every weekly schedule by a day.
        """

        def join(values: tuple[int, ...] | None) -> str:
            return "*" if values is None else ",".join(str(v) for v in values)

        return {
            "minute": join(self.minute),
            "hour": join(self.hour),
            "day": join(self.day),
            "month": join(self.month),
            "day_of_week": "*"
            if self.weekday is None
            else ",".join(_DAYS[d] for d in self.weekday),
        }

    def systemd_calendar(self, timezone: str | None = None) -> str:
        """The systemd ``OnCalendar=`` value (systemd.time(7): ``DOW YYYY-MM-DD HH:MM:SS [TZ]``)."""

        def join(values: tuple[int, ...] | None) -> str:
            return "*" if values is None else ",".join(f"{v:02d}" for v in values)

        parts = []
        if self.weekday is not None:
            parts.append(",".join(_SYSTEMD_DAYS[d] for d in self.weekday))
        parts.append(f"*-{join(self.month)}-{join(self.day)}")
        parts.append(f"{join(self.hour)}:{join(self.minute)}:00")
        if timezone:
            parts.append(timezone)
        return " ".join(parts)


def parse_cron(expression: str) -> CronSpec:
    """Parse a five-field cron expression or an ``@daily``-style macro; ConfigError if invalid.

    Restricting both day of month and day of week is refused: cron runs when *either* matches,
    apscheduler and systemd when *both* do, so no translation would keep its meaning.
    """
    text = " ".join(expression.split())
    fields = _MACROS.get(text.lower(), text).split(" ")
    if len(fields) != 5:
        raise ConfigError(
            f"cron expression {expression!r} needs 5 fields (minute hour day month weekday)"
        )
    values = [
        _parse_field(field, name, low, high, names)
        for field, (name, low, high, names) in zip(fields, _FIELDS, strict=True)
    ]
    minute, hour, day, month, weekday = values
    if weekday is not None:
        weekday = tuple(sorted({d % 7 for d in weekday}))
        if len(weekday) == 7:
            weekday = None
    if day is not None and weekday is not None:
        raise ConfigError(
            f"cron expression {expression!r} restricts both day of month and day of week; "
            "use one of them"
        )
    return CronSpec(text, minute, hour, day, month, weekday)


def _parse_field(
    field: str, name: str, low: int, high: int, names: tuple[str, ...]
) -> tuple[int, ...] | None:
    if field == "*":
        return None
    allowed: set[int] = set()
    for item in field.split(","):
        allowed.update(_parse_item(item, name, low, high, names))
    # "0-59" and the like mean the same as "*"; keep them as "*" so the output stays short.
    if allowed >= set(range(low, high + 1)) or (name == "day of week" and allowed >= set(range(7))):
        return None
    return tuple(sorted(allowed))


def _parse_item(item: str, name: str, low: int, high: int, names: tuple[str, ...]) -> range:
    base, _, step_text = item.partition("/")
    step = 1
    if step_text:
        step = _number(step_text, name, 1, high - low + 1, ())
    if base == "*":
        first, last = low, high
    elif "-" in base:
        start, _, end = base.partition("-")
        first, last = _number(start, name, low, high, names), _number(end, name, low, high, names)
        if last < first:
            raise ConfigError(f"cron {name} range {base!r} runs backwards")
    else:
        first = _number(base, name, low, high, names)
        # "5/10" means "from 5 to the end, every 10" (cronie, Vixie cron).
        last = high if step_text else first
    return range(first, last + 1, step)


def _number(text: str, name: str, low: int, high: int, names: tuple[str, ...]) -> int:
    lowered = text.lower()
    if lowered in names:
        return names.index(lowered) + low
    if not text.isdigit():
        raise ConfigError(f"cron {name} value {text!r} is not a number in {low}-{high}")
    value = int(text)
    if not low <= value <= high:
        raise ConfigError(f"cron {name} value {value} is outside {low}-{high}")
    return value


def _crontab_quote(word: str) -> str:
    # crontab(5): an unescaped "%" in the command ends it and starts stdin.
    return shlex.quote(word).replace("%", "\\%")


def crontab_text(
    spec: CronSpec,
    argv: Sequence[str],
    *,
    log_file: str,
    environment: Mapping[str, str],
    timezone: str | None = None,
) -> str:
    """A crontab entry that runs ``argv`` on ``spec`` (paste it into ``crontab -e``)."""
    lines = ["# quants: crawl the Hub into the catalog (added with `crontab -e`)"]
    if timezone:
        # CRON_TZ is honoured by cronie and systemd-cron; Debian's cron ignores it (use UTC hours).
        lines.append(f"CRON_TZ={timezone}")
    lines.extend(f"{key}={value}" for key, value in environment.items())
    command = " ".join(_crontab_quote(word) for word in argv)
    lines.append(f"{spec.expression} {command} >> {_crontab_quote(log_file)} 2>&1")
    return "\n".join(lines) + "\n"


def systemd_units(
    spec: CronSpec,
    argv: Sequence[str],
    *,
    environment: Mapping[str, str],
    timezone: str | None = None,
    jitter_s: int = 0,
    name: str = "quants-crawl",
) -> str:
    """A oneshot service plus its timer, as two files to save under ``~/.config/systemd/user``."""
    env_lines = "".join(
        f"Environment={_systemd_quote(f'{key}={value}')}\n" for key, value in environment.items()
    )
    exec_start = " ".join(_systemd_quote(word) for word in argv)
    return (
        f"# ~/.config/systemd/user/{name}.service\n"
        "[Unit]\n"
        "Description=quants: crawl GGUF quants on the Hugging Face Hub into the catalog\n"
        "Wants=network-online.target\n"
        "After=network-online.target\n"
        "\n"
        "[Service]\n"
        "Type=oneshot\n"
        f"{env_lines}"
        "# HF_TOKEN=... goes in this file (chmod 600), never in the unit itself.\n"
        "EnvironmentFile=-%h/.config/quants/env\n"
        f"ExecStart={exec_start}\n"
        "# SIGTERM lets the crawl finish the repo in progress and record the scan as interrupted.\n"
        "KillSignal=SIGTERM\n"
        "TimeoutStopSec=5min\n"
        "Nice=10\n"
        "\n"
        f"# ~/.config/systemd/user/{name}.timer\n"
        "[Unit]\n"
        f"Description=Run {name}.service on a schedule\n"
        "\n"
        "[Timer]\n"
        f"OnCalendar={spec.systemd_calendar(timezone)}\n"
        f"RandomizedDelaySec={max(0, jitter_s)}\n"
        "# Run a missed crawl at the next boot, like the scheduler's misfire grace time.\n"
        "Persistent=true\n"
        "\n"
        "[Install]\n"
        "WantedBy=timers.target\n"
        "\n"
        f"# then: systemctl --user daemon-reload && systemctl --user enable --now {name}.timer\n"
    )


def _systemd_quote(word: str) -> str:
    # systemd.syntax(7) / systemd.service(5): double quotes group words, backslash escapes,
    # "%" starts a specifier ("%%" is a literal "%") and "$" a variable ("$$" is a literal "$").
    if word and not any(c in word for c in " \t\"'\\;%$"):
        return word
    escaped = word.replace("\\", "\\\\").replace('"', '\\"')
    escaped = escaped.replace("%", "%%").replace("$", "$$")
    return f'"{escaped}"'
