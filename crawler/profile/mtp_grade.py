"""The graded MTP reading and the published evidence behind it (pure: no I/O).

Says what the 6-bit MTP flag means; the grade is shown, it does not move a result.
Details: docs/internals/profile.md#mtp_grade
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["EVIDENCE", "DraftAcceptance", "MTPGrade", "draft_acceptance", "mtp_grade"]

#: (claim, source) pairs the readings cite.
EVIDENCE: dict[str, tuple[str, str]] = {
    "bits": (
        "a 4-bit head drafts within noise of bf16 (66.0 vs 68.3 %, 65.9 vs 65.0 %)",
        "github.com/lablup/mlxcel/pull/1203",
    ),
    "task": (
        "acceptance moves more with the task (Q4_K_M head: code 92.2 %, story 46.6 %)",
        "github.com/ikawrakow/ik_llama.cpp/pull/2369",
    ),
    "low": (
        "below 4 bits results are mixed (IQ3_XXS head works, IQ3_S head accepts 0 %)",
        "github.com/IST-DASLab/GSQ/issues/11",
    ),
}


@dataclass(frozen=True, slots=True)
class MTPGrade:
    """The graded reading of one file's MTP head."""

    grade: str  # missing | broken | sidecar | low | likely_fine | at_bar | none
    reading: str  # one line, with the evidence's source where it rests on one

    def to_json(self) -> dict[str, str]:
        """``{grade, reading}``."""
        return {"grade": self.grade, "reading": self.reading}


def _cite(key: str) -> str:
    claim, source = EVIDENCE[key]
    return f"{claim} ({source})"


def mtp_grade(state: str | None, min_bits: float | None) -> MTPGrade:
    """The reading for an MTP ``state`` (crawler/profile/precision.py) and the head's lowest
    bits."""
    if state == "absent":
        return MTPGrade("missing", "no MTP head: no speculative drafting from this file")
    if state == "declared_missing":
        return MTPGrade(
            "broken", "broken: the metadata declares MTP layers, the file has no nextn tensors"
        )
    if state == "sidecar":
        return MTPGrade("sidecar", "the MTP head is a separate file of this repo (a sidecar)")
    if state != "present":
        return MTPGrade("none", "MTP not read")
    if min_bits is None:
        return MTPGrade("broken", "broken for mainline: an MTP tensor has a type of unknown width")
    if min_bits >= 6:
        return MTPGrade("at_bar", f"at the bar: {min_bits:g}-bit head (6-8 bit)")
    if min_bits >= 4:
        return MTPGrade(
            "likely_fine",
            f"below the 6-bit bar, likely fine: {min_bits:g}-bit head; {_cite('bits')};"
            f" {_cite('task')}",
        )
    return MTPGrade(
        "low", f"below 4 bits: {min_bits:g}-bit head, acceptance untested; {_cite('low')}"
    )


_DRAFT = re.compile(
    r"draft acceptance(?: rate)? = (?P<rate>[0-9.]+) \(\s*(?P<acc>\d+) accepted /\s*(?P<gen>\d+)"
    r" generated\)"
)


@dataclass(frozen=True, slots=True)
class DraftAcceptance:
    """Measured draft acceptance over the requests of one log."""

    accepted: int
    generated: int
    requests: int

    @property
    def rate(self) -> float:
        """accepted / generated (0 when nothing was drafted)."""
        return self.accepted / self.generated if self.generated else 0.0

    def to_json(self) -> dict[str, float | int]:
        """``{rate, accepted, generated, requests}``."""
        return {
            "rate": round(self.rate, 5),
            "accepted": self.accepted,
            "generated": self.generated,
            "requests": self.requests,
        }


def draft_acceptance(log: str | Iterable[str]) -> DraftAcceptance | None:
    """Summed draft acceptance of every request a llama-server log (its text, or its lines)
    reports; None without any."""
    acc = gen = n = 0
    for line in log.splitlines() if isinstance(log, str) else log:
        for m in _DRAFT.finditer(line):
            acc += int(m["acc"])
            gen += int(m["gen"])
            n += 1
    return DraftAcceptance(acc, gen, n) if n else None
