"""Finish an analysed quant for the catalog: the analysis plus the search columns it stores.

The crawl computes the columns with ranking's own functions, so the catalog only writes them.
Details: docs/internals/crawl.md#rows
"""

from __future__ import annotations

from crawler.catalog.analyses import QuantRow
from crawler.profile.analysis import QuantAnalysis
from crawler.ranking.columns import search_columns, search_scalars

__all__ = ["finished_row"]


def finished_row(analysis: QuantAnalysis) -> QuantRow:
    """The row the catalog stores for ``analysis``."""
    return QuantRow(
        analysis,
        search_columns(analysis.profile.groups, analysis.memory, analysis.profile.quant_label),
        search_scalars(analysis.memory.coefficients),
    )
