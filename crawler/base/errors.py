"""The one error tree of quants; the CLI turns each type into a one-line message plus a hint.

The library raises these and never prints or exits. Every error carries structured fields.
Details: docs/internals/base.md#errors
"""

from __future__ import annotations

from typing import Any


class QuantsError(Exception):
    """Base of every error quants raises on purpose."""

    exit_code = 1


class ConfigError(QuantsError):
    """A setting (environment variable, flag, file) is invalid."""


class UsageError(QuantsError):
    """An argument is well-typed but makes no sense (e.g. an unknown query name)."""

    exit_code = 2


class NoSuchFile(UsageError):
    """A local file named on the command line does not exist."""


class EmptyCatalog(UsageError):
    """The catalog holds no quant at all; ``hint`` names the ways to fill it."""

    def __init__(self, message: str, *, hint: str | None = None):
        super().__init__(message)
        self.hint = hint


class HubError(QuantsError):
    """The Hub (or a mirror) answered with an error or not at all.

    ``status`` is the last HTTP status (None for network failures), ``code`` the Hub's
    ``X-Error-Code`` (RepoNotFound, GatedRepo, RevisionNotFound, EntryNotFound) when it sent one.
    """

    def __init__(
        self,
        message: str,
        *,
        repo_id: str | None = None,
        url: str | None = None,
        status: int | None = None,
        code: str | None = None,
    ):
        super().__init__(message)
        self.repo_id = repo_id
        self.url = url
        self.status = status
        self.code = code


class HubNotFound(HubError):
    """Repo, revision or file does not exist (or is private and we have no access)."""


class HubGated(HubError):
    """Repo is gated or private: a token with access is needed."""


class HubRateLimited(HubError):
    """HTTP 429; ``retry_after`` is the wait in seconds the Hub asked for."""

    def __init__(self, message: str, *, retry_after: float | None = None, **kw: Any):
        super().__init__(message, **kw)
        self.retry_after = retry_after


class HubUnavailable(HubError):
    """5xx, reset, timeout or truncated body after the retries ran out."""


class HubUnreachable(HubUnavailable):
    """Nothing on the Hub could be reached (DNS, connection refused, every listing failed).

    Exit code 4, so scripts can tell "no network" from "the Hub said no" (1) and "nothing
    fits" (3).
    """

    exit_code = 4


class HubBudgetExhausted(HubError):
    """The crawl's configured request or byte budget is spent."""


class GGUFError(QuantsError):
    """A GGUF header could not be parsed; ``source`` names the file."""

    def __init__(self, message: str, *, source: str | None = None):
        super().__init__(message)
        self.source = source


class NotGGUF(GGUFError):
    """The magic bytes are not ``GGUF`` (or the file is big-endian)."""


class BigEndianGGUF(NotGGUF):
    """A big-endian GGUF (gguf-py ``--bigendian``): whole, but not readable here or by llama.cpp
    on a little-endian host."""


class UnsupportedGGUFVersion(GGUFError):
    """GGUF version other than 2 or 3."""


class CorruptHeader(GGUFError):
    """Header is truncated or a length/count/offset is impossible."""


class HeaderTooLarge(GGUFError):
    """Header exceeds the configured cap (``QUANTS_MAX_HEADER_BYTES``)."""


class EstimateError(QuantsError):
    """The memory model cannot answer for this model or configuration."""


class UnknownArchitecture(EstimateError):
    """The architecture's memory rules are not modelled; no silent default."""


class NothingToEstimate(EstimateError):
    """The file holds no model weights (a vocabulary-only GGUF): nothing to estimate."""


class TruncatedModel(EstimateError):
    """The file ends before its tensors' data: llama.cpp refuses to load it, so no estimate."""


class InvalidConfig(EstimateError):
    """A llama.cpp configuration llama.cpp itself would reject (e.g. quantized V without FA)."""


class CatalogError(QuantsError):
    """The catalog database failed or is in an unexpected state."""


class SchemaOutOfDate(CatalogError):
    """The database schema is older (or newer) than this version of quants."""


class ReadOnlyViolation(CatalogError):
    """A read-only query tried to write."""


class QueryError(CatalogError):
    """A user SQL query failed (syntax, unknown table, bad parameter)."""


class LockHeld(QuantsError):
    """Another crawl or scheduler holds the crawl lock; ``holder`` describes it."""

    def __init__(self, message: str, *, holder: str | None = None):
        super().__init__(message)
        self.holder = holder


class SnapshotError(QuantsError):
    """A catalog snapshot cannot be exported, imported, published or pulled as asked."""


class NothingFits(QuantsError):
    """A search found no candidate within the budget; ``hint`` names what could change that
    (the levers this search has not used yet), or None."""

    exit_code = 3

    def __init__(self, message: str, *, hint: str | None = None):
        super().__init__(message)
        self.hint = hint
