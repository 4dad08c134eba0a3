"""Decode speed and MTP acceptance read from a llama.cpp log (pure: text in, numbers out).

Reads llama-server's per-request timings and llama-cli's summary; the last request counts.
Details: docs/internals/fit.md#speedlog
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["LogTimings", "parse_timings", "timing_lines"]

_EVAL = re.compile(
    r"(?<!prompt )eval time =\s*(?P<ms>[\d.]+) ms /\s*(?P<n>\d+) (?:tokens|runs)\s*"
    r"\(\s*[\d.]+ ms per token,\s*(?P<tps>[\d.]+) tokens per second\)"
)
_DRAFT = re.compile(
    r"draft acceptance = (?P<rate>[\d.]+) \(\s*(?P<acc>\d+) accepted /\s*(?P<gen>\d+) generated\)"
    r"(?:, mean len =\s*(?P<len>[\d.]+))?"
)
#: llama-server's slot release after a request (tools/server/server-context.cpp at 0c1e57098):
#: the tokens in the slot's cache when the request stopped, prompt and generated.
_STOP = re.compile(r"stop processing: n_tokens = (?P<n>\d+)")
_JSON_TPS = re.compile(r'"predicted_per_second"\s*:\s*(?P<tps>[\d.eE+-]+)')
_JSON_N = re.compile(r'"draft_n"\s*:\s*(?P<gen>\d+)\s*,\s*"draft_n_accepted"\s*:\s*(?P<acc>\d+)')


@dataclass(frozen=True, slots=True)
class LogTimings:
    """The decode speed of the last request a log shows, and its draft acceptance if any."""

    tok_s: float
    n_tokens: int | None = None  # tokens generated (None from the JSON form)
    draft_generated: int = 0
    draft_accepted: int = 0
    mean_len: float | None = None  # tokens per verify step, the target token included
    cache_tokens: int | None = None  # in the slot's cache when the request stopped (server)

    @property
    def depth(self) -> int | None:
        """Mean tokens in the cache while the request decoded (None: not in the log)."""
        if self.cache_tokens is None or self.n_tokens is None:
            return None
        return max(0, self.cache_tokens - self.n_tokens // 2)

    @property
    def acceptance(self) -> float | None:
        """Share of drafted tokens accepted (None without drafting)."""
        return self.draft_accepted / self.draft_generated if self.draft_generated else None

    def to_json(self) -> dict[str, object]:
        """JSON-friendly dict."""
        return {
            "tok_s": round(self.tok_s, 2),
            "n_tokens": self.n_tokens,
            "draft_generated": self.draft_generated,
            "draft_accepted": self.draft_accepted,
            "draft_acceptance": None if self.acceptance is None else round(self.acceptance, 4),
            "mean_len": self.mean_len,
            "depth": self.depth,
        }


def timing_lines(lines: Iterable[str]) -> str:
    """The lines of a log (given one by one) that parse_timings reads, in order and bounded
    whatever the log's length: the last decode-timing line and the first draft and slot-release
    lines from it on, and the last JSON speed and draft-count lines (a server log holds a set
    per request)."""
    kept: dict[str, tuple[int, str]] = {}
    draft_pending = stop_pending = False
    keys = ("eval time", "draft acceptance", "predicted_per_second", "draft_n", "stop processing")
    for i, line in enumerate(lines):
        if not any(k in line for k in keys):
            continue
        evals = list(_EVAL.finditer(line))
        if evals:
            kept["eval"] = (i, line)
            kept.pop("draft", None)
            kept.pop("stop", None)
            draft_pending = _DRAFT.search(line, evals[-1].start()) is None
            stop_pending = _STOP.search(line, evals[-1].start()) is None
        else:
            if draft_pending and _DRAFT.search(line):
                kept["draft"] = (i, line)
                draft_pending = False
            if stop_pending and _STOP.search(line):
                kept["stop"] = (i, line)
                stop_pending = False
        if _JSON_TPS.search(line):
            kept["tps"] = (i, line)
        if _JSON_N.search(line):
            kept["n"] = (i, line)
    return "\n".join(line for _, line in sorted(set(kept.values())))


def parse_timings(text: str) -> LogTimings | None:
    """The last request's decode timings in ``text`` (None when it has none)."""
    evals = list(_EVAL.finditer(text))
    if evals:
        m = evals[-1]
        drafts = [d for d in _DRAFT.finditer(text) if d.start() > m.start()]
        d = drafts[0] if drafts else None
        stop = _STOP.search(text, m.end())
        return LogTimings(
            tok_s=float(m["tps"]),
            n_tokens=int(m["n"]),
            draft_generated=int(d["gen"]) if d else 0,
            draft_accepted=int(d["acc"]) if d else 0,
            mean_len=float(d["len"]) if d and d["len"] else None,
            cache_tokens=int(stop["n"]) if stop else None,
        )
    tps = list(_JSON_TPS.finditer(text))
    if not tps:
        return None
    n = list(_JSON_N.finditer(text))
    last = n[-1] if n else None
    return LogTimings(
        tok_s=float(tps[-1]["tps"]),
        draft_generated=int(last["gen"]) if last else 0,
        draft_accepted=int(last["acc"]) if last else 0,
    )
