"""Settings: one frozen dataclass; ``Settings.from_env`` is the only reader of ``os.environ``."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crawler.base.budget import DEFAULT_HEADROOM_GIB
from crawler.base.errors import ConfigError

DEFAULT_ENDPOINT = "https://huggingface.co"
#: A Hub that has not started answering in this many seconds is not waited for longer.
DEFAULT_TIMEOUT_S = 10.0

# A 248k-token vocabulary makes an ~11 MB header (bench/bench_header.py); 64 MiB leaves room
# for the largest real headers while bounding memory on hostile files.
DEFAULT_MAX_HEADER_BYTES = 64 * 1024 * 1024


def default_data_dir() -> Path:
    """The per-user data directory (platformdirs), e.g. ``~/.local/share/quants``."""
    import platformdirs

    return Path(platformdirs.user_data_dir("quants", appauthor=False))


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything configurable; CLI flags override with replace."""

    db_url: str | None = None
    data_dir: Path | None = None
    hf_endpoint: str = DEFAULT_ENDPOINT
    hf_token: str | None = dataclasses.field(default=None, repr=False)
    #: Connect and first-byte timeout of every Hub request, in seconds (``QUANTS_TIMEOUT``).
    timeout_s: float = DEFAULT_TIMEOUT_S
    #: Retries of a failed Hub request (408/429/5xx, reset, timeout, truncated body) before the
    #: error goes up (``QUANTS_RETRIES``).
    retries: int = 5
    #: The first back-off wait in seconds; each retry doubles it, up to 8 times this
    #: (``QUANTS_BACKOFF``; 1 s gives huggingface_hub's 1, 2, 4, 8, 8 s). A wait the Hub asks
    #: for (Retry-After, RateLimit) is honoured as asked, whatever this says.
    backoff_s: float = 1.0
    log_level: str = "WARNING"
    debug: bool = False
    max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES
    concurrency: int = 8
    max_requests: int | None = None
    max_bytes: int | None = None
    #: Answer searches from the catalog alone (``QUANTS_OFFLINE=1``; ``--offline``).
    offline: bool = False
    #: A model looked up on demand less than this many hours ago is not looked up again.
    fresh_hours: float = 24.0
    #: Base models whose quantized children the default crawl also lists (``QUANTS_BASE_MODELS``,
    #: comma-separated), besides the base models the catalog already holds.
    base_models: tuple[str, ...] = ()
    #: GiB of GPU memory kept free for other programs (``QUANTS_HEADROOM``; crawler.base.budget).
    headroom_gib: float = DEFAULT_HEADROOM_GIB

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Build settings from ``QUANTS_*`` variables (and ``HF_TOKEN`` / ``HF_ENDPOINT``)."""
        env = os.environ if environ is None else environ
        kw: dict[str, Any] = {}
        if env.get("QUANTS_DB"):
            kw["db_url"] = env["QUANTS_DB"]
        if env.get("QUANTS_DATA_DIR"):
            kw["data_dir"] = Path(env["QUANTS_DATA_DIR"])
        endpoint = env.get("QUANTS_HF_ENDPOINT") or env.get("HF_ENDPOINT")
        if endpoint:
            kw["hf_endpoint"] = endpoint.rstrip("/")
        token = env.get("HF_TOKEN") or env.get("HUGGING_FACE_HUB_TOKEN")
        if token:
            kw["hf_token"] = token
        if env.get("QUANTS_LOG_LEVEL"):
            kw["log_level"] = env["QUANTS_LOG_LEVEL"].upper()
        kw["debug"] = env.get("QUANTS_DEBUG", "") not in ("", "0", "false", "no")
        if env.get("QUANTS_BASE_MODELS"):
            kw["base_models"] = tuple(
                b.strip() for b in env["QUANTS_BASE_MODELS"].split(",") if b.strip()
            )
        if env.get("QUANTS_HEADROOM"):
            from crawler.base.units import AmountError, parse_gib

            try:
                kw["headroom_gib"] = parse_gib(
                    env["QUANTS_HEADROOM"], name="QUANTS_HEADROOM", minimum=0, maximum=1024
                )
            except AmountError as exc:
                raise ConfigError(str(exc)) from None
        kw["offline"] = env.get("QUANTS_OFFLINE", "") not in ("", "0", "false", "no")
        for var, field, conv in (
            ("QUANTS_TIMEOUT", "timeout_s", float),
            ("QUANTS_RETRIES", "retries", int),
            ("QUANTS_BACKOFF", "backoff_s", float),
            ("QUANTS_MAX_HEADER_BYTES", "max_header_bytes", int),
            ("QUANTS_CONCURRENCY", "concurrency", int),
            ("QUANTS_MAX_REQUESTS", "max_requests", int),
            ("QUANTS_MAX_BYTES", "max_bytes", int),
            ("QUANTS_FRESH_HOURS", "fresh_hours", float),
        ):
            if env.get(var):
                try:
                    kw[field] = conv(env[var])
                except ValueError:
                    raise ConfigError(f"{var}={env[var]!r} is not a number") from None
        return cls(**kw).validated()

    def replace(self, **changes: Any) -> Settings:
        """Return a copy with the non-None ``changes`` applied (CLI flags left unset keep env)."""
        return dataclasses.replace(
            self, **{k: v for k, v in changes.items() if v is not None}
        ).validated()

    def validated(self) -> Settings:
        """Raise ConfigError for impossible values."""
        if self.timeout_s <= 0:
            raise ConfigError("timeout must be positive")
        if not 0 <= self.retries <= 100:
            raise ConfigError("QUANTS_RETRIES must be between 0 and 100")
        if not 0 <= self.backoff_s <= 3600:
            raise ConfigError("QUANTS_BACKOFF must be between 0 and 3600 seconds")
        if self.max_header_bytes < 1024:
            raise ConfigError("max header bytes must be at least 1024")
        if self.fresh_hours < 0:
            raise ConfigError("QUANTS_FRESH_HOURS must not be negative")
        if not 1 <= self.concurrency <= 256:
            raise ConfigError("concurrency must be between 1 and 256")
        return self

    @property
    def resolved_data_dir(self) -> Path:
        """The data directory actually used (created on demand by its users)."""
        return self.data_dir if self.data_dir is not None else default_data_dir()

    @property
    def resolved_db_url(self) -> str:
        """``db_url`` or the default SQLite file in the data directory."""
        if self.db_url:
            return self.db_url
        return f"sqlite:///{self.resolved_data_dir / 'catalog.sqlite'}"
