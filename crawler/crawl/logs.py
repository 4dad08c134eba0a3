"""The crawl's logging: stderr or a service log file, with the HF token and terminal controls
out of every line (filters the CLI and the scheduler install).
Details: docs/internals/crawl.md#logs
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import TYPE_CHECKING

from crawler.base.errors import ConfigError

if TYPE_CHECKING:
    from crawler.base.config import Settings

REDACTED = "hf_***"


class SecretFilter(logging.Filter):
    """Replace ``secret`` in a record's rendered message (and drop its args)."""

    def __init__(self, secret: str) -> None:
        super().__init__()
        self.secret = secret

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if self.secret in message:
            record.msg, record.args = message.replace(self.secret, REDACTED), None
        if record.exc_text and self.secret in record.exc_text:
            record.exc_text = record.exc_text.replace(self.secret, REDACTED)
        return True


# C0 (newline and tab kept: a traceback needs them), DEL, C1 and the bidi/line controls.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _escaped(text: str) -> str:
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


class ControlFilter(logging.Filter):
    """Escape control characters in a record's rendered message: a repo id, file name or log
    line from the Hub or a snapshot must never drive the terminal (or a `cat` of the log)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if _CONTROL.search(message):
            record.msg, record.args = _escaped(message), None
        if record.exc_text and _CONTROL.search(record.exc_text):
            record.exc_text = _escaped(record.exc_text)
        return True


def escape_unconfigured_logs() -> None:
    """Put a ControlFilter on logging's last-resort handler (what prints a warning when no
    handler is configured, as in most commands): a warning may quote a hostile repo id."""
    last = logging.lastResort
    if last is not None and not any(isinstance(f, ControlFilter) for f in last.filters):
        last.addFilter(ControlFilter())


def redact_logs(secret: str | None) -> None:
    """Install a SecretFilter (when there is a secret) and a ControlFilter on
    every handler of the root logger."""
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, ControlFilter) for f in handler.filters):
            handler.addFilter(ControlFilter())
        if secret and not any(
            isinstance(f, SecretFilter) and f.secret == secret for f in handler.filters
        ):
            handler.addFilter(SecretFilter(secret))


def configure_logging(
    settings: Settings, *, service: bool = False, log_file: Path | None = None
) -> None:
    """The logging of a crawl: the HF token redacted from every line.

    A one-off ``quants crawl`` (``service=False``) logs to stderr only when QUANTS_LOG_LEVEL asks
    for more than warnings (e.g. DEBUG/INFO: one line per Hub request). A service
    (``quants schedule``, ``service=True``) always logs to stderr, and to ``log_file`` if given
    (reopened when logrotate moves it), with timestamps; its own lines are at INFO whatever the
    level says, so a nightly log shows each run.
    """
    if service:
        _configure_service_logging(settings.log_level, log_file)
    elif settings.log_level != "WARNING":
        logging.basicConfig(level=settings.log_level, format="%(levelname)s %(name)s: %(message)s")
    redact_logs(settings.hf_token)


def _configure_service_logging(level: str, log_file: Path | None) -> None:
    fmt = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    handlers: list[logging.Handler] = [logging.StreamHandler()]
    if log_file is not None:
        try:
            log_file.parent.mkdir(parents=True, exist_ok=True)
            # Imported here: a service log file only, not every command's start-up.
            from logging.handlers import WatchedFileHandler

            handlers.append(WatchedFileHandler(log_file, encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(f"cannot write the log file {log_file}: {exc.strerror}") from None
    root = logging.getLogger()
    for handler in handlers:
        handler.setFormatter(fmt)
        root.addHandler(handler)
    numeric = logging.getLevelName(level.upper())
    root.setLevel(numeric if isinstance(numeric, int) else logging.WARNING)
    for name in ("crawler.crawl.scheduler", "crawler.crawl.watch", "apscheduler"):
        named = logging.getLogger(name)
        named.setLevel(min(logging.INFO, root.level))
