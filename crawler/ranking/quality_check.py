"""The quality model's bits -> KLD curve checked on held-out published rows (pure: package data).

No fit reads these rows; only mean KLD is compared.
Details: docs/internals/ranking.md#quality_check
"""

from __future__ import annotations

import csv
import math
import statistics
from collections import defaultdict
from dataclasses import dataclass

from crawler.base.data import data_text
from crawler.ranking.quality import kld_from_bits

__all__ = ["HeldOutReport", "HeldOutRow", "heldout_report", "heldout_rows", "spearman"]


@dataclass(frozen=True, slots=True)
class HeldOutRow:
    """One published measurement and the model's prediction for it."""

    base_model: str
    quant: str
    bpw: float
    metric: str
    measured: float
    corpus: str
    source: str

    @property
    def predicted(self) -> float:
        """Predicted mean KLD at this row's bits per weight (the effective bits of a one-type
        file; for a mixed file, an approximation from above)."""
        return kld_from_bits(self.bpw)

    @property
    def log_error(self) -> float:
        """ln(predicted / measured): > 0 predicts too much loss."""
        return math.log(self.predicted / self.measured)


@dataclass(frozen=True, slots=True)
class HeldOutReport:
    """Errors on the held-out rows; docs/models.md quotes these and a test holds them."""

    n_rows: int
    n_models: int
    median_abs_log: float  # median |ln(pred / measured)| over all rows
    median_abs_log_by_model: tuple[tuple[str, float, float], ...]  # (model, median, mean signed)
    spearman_by_model: tuple[tuple[str, float], ...]  # bits order vs measured order
    worst: tuple[HeldOutRow, ...]  # the 5 largest |ln| errors


def heldout_rows() -> tuple[HeldOutRow, ...]:
    """The published rows of crawler/data/kld_heldout.csv."""
    text = data_text("kld_heldout.csv")
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    return tuple(
        HeldOutRow(
            base_model=r["base_model"],
            quant=r["quant"],
            bpw=float(r["bpw"]),
            metric=r["metric"],
            measured=float(r["value"]),
            corpus=r["corpus"],
            source=r["source"],
        )
        for r in csv.DictReader(lines)
    )


def _ranks(values: list[float]) -> list[float]:
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2  # ties share their mean rank
        i = j + 1
    return ranks


def spearman(xs: list[float], ys: list[float]) -> float:
    """Spearman rank correlation (Pearson on ranks, ties averaged)."""
    a, b = _ranks(xs), _ranks(ys)
    ma, mb = sum(a) / len(a), sum(b) / len(b)
    cov = sum((x - ma) * (y - mb) for x, y in zip(a, b, strict=True))
    var = math.sqrt(sum((x - ma) ** 2 for x in a) * sum((y - mb) ** 2 for y in b))
    return cov / var if var else 0.0


def heldout_report(rows: tuple[HeldOutRow, ...] | None = None) -> HeldOutReport:
    """Median |ln error|, per-model rank correlation and the worst rows, mean KLD rows only."""
    rows = tuple(r for r in (rows or heldout_rows()) if r.metric == "mean_kld")
    by_model: dict[str, list[HeldOutRow]] = defaultdict(list)
    for r in rows:
        by_model[r.base_model].append(r)
    per_model = tuple(
        (
            m,
            statistics.median(abs(r.log_error) for r in rs),
            statistics.fmean(r.log_error for r in rs),
        )
        for m, rs in by_model.items()
    )
    rho = tuple(
        (m, spearman([r.predicted for r in rs], [r.measured for r in rs]))
        for m, rs in by_model.items()
    )
    return HeldOutReport(
        n_rows=len(rows),
        n_models=len(by_model),
        median_abs_log=statistics.median(abs(r.log_error) for r in rows),
        median_abs_log_by_model=per_model,
        spearman_by_model=rho,
        worst=tuple(sorted(rows, key=lambda r: -abs(r.log_error))[:5]),
    )
