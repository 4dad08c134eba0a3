"""Keep the HF token out of every log line: a logging filter the CLI and scheduler install.

huggingface_hub's HTTP stack logs response headers at DEBUG; a server that echoes the token (for
instance in ``X-Error-Message``) would otherwise put it in a log file.
"""

from __future__ import annotations

import logging

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


def redact_logs(secret: str | None) -> None:
    """Install a SecretFilter on every handler of the root logger (no-op without one)."""
    if not secret:
        return
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, SecretFilter) and f.secret == secret for f in handler.filters):
            handler.addFilter(SecretFilter(secret))
