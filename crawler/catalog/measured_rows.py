"""Read the measured-quality rows of given quants (crawler/profile/measured.py,
``measured_quality``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from crawler.catalog.reader import as_datetime, placeholders
from crawler.profile.measured import MeasuredValue

if TYPE_CHECKING:
    from crawler.catalog.reader import Reader

__all__ = ["measured_values"]


def measured_values(
    reader: Reader, keys: Sequence[tuple[str, str]]
) -> dict[tuple[str, str], tuple[MeasuredValue, ...]]:
    """The published measurements of the quants ``(repo_id, path)``, where the repo has any.

    Rows read at another revision than the quant's current one are not returned: they describe
    bytes the repo may no longer hold.
    """
    repos = sorted({repo for repo, _ in keys})
    if not repos:
        return {}
    marks, params = placeholders("r", repos)
    wanted = set(keys)
    out: dict[tuple[str, str], list[MeasuredValue]] = {}
    for row in reader.rows(
        "SELECT r.repo_id, m.quant_path, m.metric, m.value, m.corpus, m.reference, m.fmt,"
        " m.artifact, m.source_url, m.revision, m.file_name, m.size_bytes, m.read_at"
        " FROM measured_quality m JOIN repos r ON r.id = m.repo_pk"
        f" WHERE r.repo_id IN ({marks}) AND m.revision = r.sha"
        " ORDER BY r.repo_id, m.quant_path, m.metric, m.artifact",
        params,
    ):
        repo, path = row[0], row[1]
        if (repo, path) not in wanted:
            continue
        at = as_datetime(row[12])
        out.setdefault((repo, path), []).append(
            MeasuredValue(
                metric=row[2],
                value=float(row[3]),
                corpus=row[4],
                reference=row[5],
                fmt=row[6],
                artifact=row[7],
                source_url=row[8],
                revision=row[9],
                file_name=row[10],
                size_bytes=int(row[11]),
                read_at=at.isoformat() if at else "",
            )
        )
    return {k: tuple(v) for k, v in out.items()}
