"""Copies in the search's shape reads (SQL builders, pure): quants whose ranking values are
provably equal, read only as far as one of them can still enter the answer.
Details: docs/internals/ranking.md#copies
"""

from __future__ import annotations

from typing import Any

from crawler.ranking.model import HEAD_MAY_DRAFT_SQL, Budget, Filters, RunSpec, mtp_by_speed
from crawler.ranking.speed import label_type_mix

__all__ = ["best_copies_sql", "copy_class_sql", "prunable"]

#: llama-quantize's type names (tools/quantize/quantize.cpp QUANT_OPTIONS) and Unsloth's
#: dynamic names: the labels whose type mix is read from the label alone (kept: those
#: label_type_mix gives a mix). For them --sort speed never reads the bits per weight of the
#: tensor groups; any other label has its groups' sums read into the copy class.
_TYPES = (
    "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q2_K_S", "Q3_K_S", "Q3_K_M", "Q3_K_L",
    "Q4_K_S", "Q4_K_M", "Q5_K_S", "Q5_K_M", "Q6_K", "IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS",
    "IQ2_S", "IQ2_M", "IQ3_XXS", "IQ3_XS", "IQ3_S", "IQ3_M", "IQ4_NL", "IQ4_XS",
    "Q2_K_XL", "Q3_K_XL", "Q4_K_XL", "Q5_K_XL", "Q6_K_XL", "Q8_K_XL",
)  # fmt: skip
_LABELS = tuple(label for base in _TYPES for label in (base, f"UD-{base}") if label_type_mix(label))
#: A tensor group whose bits are known (GroupStats.bits) and that has parameters: the groups
#: crawler.ranking.evaluate.weight_bits sums.
_KNOWN = "t.n_params > 0 AND (t.bpw IS NOT NULL OR t.n_bytes > 0)"


def prunable(filters: Filters, spec: RunSpec) -> bool:
    """Whether the database's filters are exactly the ranking's (Filters.accepts), so a copy
    the read leaves out has better copies that ranking accepts too: no case-folded text filter
    (SQL's lower() is ASCII-only), no projector (its bytes are the repo's, not the quant's). A
    name query is tested in Python: the read keeps its copies left out only where the query
    matches every copy it kept (crawler.catalog.shape_runs.read_runs)."""
    text = filters.arch or filters.author or filters.base or filters.label
    return not text and not spec.vision


def copy_class_sql(sort: str, spec: RunSpec, budget: Budget) -> tuple[str, dict[str, Any]]:
    """SQL expressions (comma-separated) and parameters whose equal values make two quants give
    ranking equal estimates, sort values and quality; with ``--sort speed`` equal speeds too.

    The estimate (crawler.ranking.evaluate.evaluate) reads the coefficient text and the MTP
    verdicts; the stored quality score ranks (NULL rows are never left out: ranking computes
    theirs from the groups). Speed also reads the quant label and from the tensor groups
    (speed_file_inputs) the head's bytes, only used with MTP on (its draft passes), and the bits
    per weight, only used when the label names no type mix. Where MTP auto weighs a head by its
    speed (mtp_by_speed), a quant whose head may draft has its speed inputs in its class under
    every sort: they decide its configuration."""
    parts = [
        "CAST(m.coefficients AS TEXT)",
        "q.mtp_present",
        "q.mtp_preserved",
        "m.mtp_available",  # Filters.accepts reads it for --mtp before the coefficients
        "q.quality_score",
    ]
    if sort == "speed":
        usable = HEAD_MAY_DRAFT_SQL if spec.mtp_auto else None
        gate, head_gate = "TRUE", ("TRUE" if spec.mtp else usable)
    elif mtp_by_speed(spec, budget):
        gate = head_gate = HEAD_MAY_DRAFT_SQL
    else:
        return ", ".join(parts), {}
    parts.append(f"CASE WHEN {gate} THEN q.quant_label END")
    if head_gate is not None:
        head = "(SELECT t.n_bytes FROM tensor_groups t WHERE t.quant_id = q.id AND t.group_name"
        parts.append(
            f"CASE WHEN {head_gate} THEN COALESCE({head} = 'output'), {head} = 'token_embd'), 0)"
            " END"
        )
    marks = ", ".join(f":copy_label{i}" for i in range(len(_LABELS)))
    params = {f"copy_label{i}": label for i, label in enumerate(_LABELS)}
    parts.extend(
        f"CASE WHEN {gate} AND (q.quant_label IS NULL OR q.quant_label NOT IN ({marks})) THEN"
        f" (SELECT SUM(CASE WHEN {_KNOWN} THEN t.{column} ELSE 0 END)"
        " FROM tensor_groups t WHERE t.quant_id = q.id) END"
        for column in ("n_bytes", "n_params")
    )
    return ", ".join(parts), params


def best_copies_sql(columns: str, source: str, joined: str, partition: str, order: str) -> str:
    """``columns`` (SELECT and a list over ``joined``'s quants q) of the quants of ``source``
    (its joins and WHERE) in ``order`` (names of the selected columns), less each copy class's
    quants that at least ``:copies`` of its others beat on (size, downloads): with equal values
    and quality those rank above them whatever else they have, so they cannot enter the
    answer's first ``:copies`` rows. Ties are kept (RANK), so the database's collation never
    decides. The rows end on the copy's rank.

    The classes are ranked on the quants' ids alone and only the quants kept are joined to
    ``columns``: sorting thousands of copies with every column took a third longer (1M
    generator catalog, SQLite)."""
    ranked = (
        "SELECT q.id AS copy_id, q.quality_score AS copy_quality, RANK() OVER (PARTITION BY"
        f" {partition} ORDER BY q.size_bytes DESC, r.downloads DESC NULLS LAST) AS copy_rank"
        f" FROM {source}"
    )
    # SQLite keeps the left table of a CROSS JOIN outermost: the ranked ids, then each one's row.
    return (
        f"SELECT * FROM ({columns}, k.copy_rank FROM ({ranked}) k CROSS JOIN {joined}"
        " WHERE q.id = k.copy_id AND (k.copy_rank <= :copies OR k.copy_quality IS NULL)) c"
        f" ORDER BY {order}"
    )
