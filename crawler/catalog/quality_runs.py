"""``--sort quality`` (and margin, ctx) read by shape on SQLite: a run's ids ordered from the
shape index first; only the rows ranking reaches are read whole, a batch at a time.
Details: docs/internals/catalog.md#quality_runs
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from crawler.catalog.candidates import (
    PARTIAL_COLUMNS,
    SHAPE_COLUMNS,
    STREAM_CHUNK,
    Where,
    desc_key,
)
from crawler.catalog.reader import Reader, placeholders

__all__ = ["keyed_run", "quality_run"]

#: Rows completed at first (then four times more a batch, up to STREAM_CHUNK): ranking takes
#: its first ``--limit`` rows, the fit count at most 128.
_HEAD = 16


def quality_run(reader: Reader, w: Where, shapes: Sequence[str]) -> Iterator[tuple[Any, ...]]:
    """The live quants of ``shapes`` that pass ``w``, in the quality read's order (quality,
    size, downloads, repo, path).

    Their ids first, from ix_quants_search_shape (live, search_shape, size_bytes,
    quality_score, repo_pk) and each one's repo (SQLite keeps the left table of a CROSS JOIN
    outermost): a shape's copies are often thousands, whose order is their repos' downloads,
    and sorting their ids costs far less than sorting their rows (5,500 copies at 1M quants:
    ~45 ms a read of the rows). Then the rows, a batch at a time, each batch ending where the
    order's key changes, so ties on (quality, size, downloads, repo) are completed and ordered
    here."""
    marks, names = placeholders("quality_shape", list(shapes))
    ids = (
        "SELECT y.id, y.quality_score, y.size_bytes, r.downloads, r.repo_id"
        " FROM quants y CROSS JOIN repos r"
        f" WHERE y.live = TRUE AND y.search_shape IN ({marks}) AND r.id = y.repo_pk"
        " ORDER BY y.quality_score DESC NULLS LAST, y.size_bytes DESC,"
        " r.downloads DESC NULLS LAST, r.repo_id"
    )
    batch: list[tuple[Any, ...]] = []
    size = _HEAD
    for item in reader.stream(ids, names, chunk=STREAM_CHUNK):
        if len(batch) >= size and tuple(item[1:]) != tuple(batch[-1][1:]):
            yield from _rows(reader, w, batch)
            batch, size = [], min(size * 4, STREAM_CHUNK)
        batch.append(item)
    yield from _rows(reader, w, batch)


def keyed_run(
    reader: Reader,
    w: Where,
    shapes: Sequence[str],
    keys: Mapping[str, float],
    copies: int | None = None,
    memo: dict[Any, Any] | None = None,
) -> Iterator[tuple[tuple[Any, ...], float]]:
    """(row, key) of the live quants of ``shapes`` that pass ``w``, in the order of a bounded
    sort whose key is a function of the shape (``keys``: each shape's, the shape listing's;
    crawler.catalog.ordered._EXACT_KEYS): key, then quality_run's order. Read as quality_run
    reads: the ids, their keys and tie-breaks from the shape index and the repos, then the rows
    ranking reaches, a batch at a time (6,000-9,000 copies of a shape at 1M quants, of which
    the fit count reads 128).

    ``copies``: less each copy class's quants that at least that many of its others beat on
    (size, downloads), as crawler.ranking.copies.best_copies_sql leaves them out (_Classes);
    only where every live quant of ``shapes`` passes ``w`` (the caller's word: ``w`` holds
    only the live flag and the memory bound, which the shape listing tested). ``memo``: the
    ids of the runs read to their end, for the next read of the same run in the same read
    transaction (a search's ranking reads a run's copies to the end, its fit count the run's
    head again)."""
    if copies is None:
        for batch in _keyed_batches(reader, shapes, keys, [_HEAD], memo):
            yield from _keyed_rows(reader, w, batch)
        return
    # The first rows (ranking may stop at a run's head), then all the rest: its quants'
    # classes are read in the order of their ids, and only the rows kept are read whole.
    classes = _Classes(reader, copies)
    for batch in _keyed_batches(reader, shapes, keys, [_HEAD, 1 << 62], memo):
        kept = classes.kept(batch)
        start = 0
        while start < len(kept):  # completed a chunk at a time, each with its last key's ties
            end = min(start + STREAM_CHUNK, len(kept))
            while end < len(kept) and kept[end][1:6] == kept[end - 1][1:6]:
                end += 1
            yield from _keyed_rows(reader, w, kept[start:end])
            start = end


def _keyed_batches(
    reader: Reader,
    shapes: Sequence[str],
    keys: Mapping[str, float],
    sizes: Sequence[int],
    memo: dict[Any, Any] | None = None,
) -> Iterator[list[tuple[Any, ...]]]:
    """keyed_run's ids as batches of (id, key, quality, size, downloads, repo, shape), each
    ending where (key, quality, size, downloads, repo) changes: ``sizes``, then four times
    the last size a batch up to STREAM_CHUNK (or the last size, if larger)."""
    marks, names = placeholders("keyed_shape", list(shapes))
    values = {f"keyed_value{i}": float(keys[shape]) for i, shape in enumerate(shapes)}
    arms = " ".join(f"WHEN :keyed_shape{i} THEN :keyed_value{i}" for i in range(len(shapes)))
    ids = (
        f"SELECT y.id, (CASE y.search_shape {arms} END) AS keyed, y.quality_score, y.size_bytes,"
        " r.downloads, r.repo_id, y.search_shape FROM quants y CROSS JOIN repos r"
        f" WHERE y.live = TRUE AND y.search_shape IN ({marks}) AND r.id = y.repo_pk"
        " ORDER BY keyed DESC, y.quality_score DESC NULLS LAST, y.size_bytes DESC,"
        " r.downloads DESC NULLS LAST, r.repo_id"
    )
    run = (tuple(shapes), tuple(values.values()))
    known = memo.get(run) if memo is not None else None
    read: list[tuple[Any, ...]] = []
    items = (
        known if known is not None else reader.stream(ids, {**names, **values}, chunk=STREAM_CHUNK)
    )
    batch: list[tuple[Any, ...]] = []
    planned = list(sizes)
    size = planned.pop(0)
    for item in items:
        if known is None:
            read.append(item)
        if len(batch) >= size and tuple(item[1:6]) != tuple(batch[-1][1:6]):
            yield batch
            batch = []
            size = planned.pop(0) if planned else max(min(size * 4, STREAM_CHUNK), size)
        batch.append(item)
    if memo is not None and known is None:
        memo[run] = read  # read to the end
    yield batch


class _Classes:
    """The copy classes of a keyed run's quants, met in its order, and how many of each
    class's quants came before: best_copies_sql's RANK() over (size, downloads) without a sort
    of every copy's row (a window over 8,642 copies with their coefficient text: 0.14-0.23 s at
    1M quants; their ids and memory models here: ~40 ms).

    A quant's class is copy_class_sql's for margin: its coefficient text, its two MTP verdicts
    (read from its shape's text, which holds them exactly), its memory model's MTP flag and its
    quality. Within a class the run's order is (size, downloads) (the key is a function of the
    class), so a quant's rank is one more than the quants before it, or its tie's first's. A
    quant without a quality score is kept, as there; one without a memory model is not a
    candidate (the row read joins it).

    The coefficient texts are compared in the database with those of the classes met so far
    (the first _MAX_TEXTS), so only a new class's text is read out."""

    def __init__(self, reader: Reader, copies: int) -> None:
        self.reader, self.copies = reader, copies
        self.texts: dict[str | None, int] = {}
        self.sent: list[str] = []  # the texts the database compares
        self.sent_class: list[int] = []  # and their classes' indexes
        self.seen: dict[tuple[Any, ...], list[Any]] = {}  # class: [quants, last tie, its rank]
        self.memory: dict[int, tuple[int, Any]] = {}  # id: (text's class, mtp_available)
        self.verdicts: dict[str, tuple[str, str]] = {}  # shape: its two MTP verdicts' text

    def kept(self, batch: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        """The batch's items a class leaves in, in order."""
        self._classify([item[0] for item in batch if item[2] is not None])
        kept = []
        memory, verdicts = self.memory, self.verdicts
        for item in batch:
            qid, _key, quality, size, downloads, _repo, shape = item
            if quality is None:
                kept.append(item)
                continue
            found = memory.get(qid)
            if found is None:  # no memory model
                continue
            mtp = verdicts.get(shape)
            if mtp is None:
                fields = shape.split("|")
                mtp = verdicts[shape] = (fields[_MTP_PRESENT], fields[_MTP_PRESERVED])
            state = self.seen.setdefault((found, mtp, quality), [0, None, 0])
            tie = (size, downloads)
            rank = state[2] if state[0] and tie == state[1] else state[0] + 1
            state[0], state[1], state[2] = state[0] + 1, tie, rank
            if rank <= self.copies:
                kept.append(item)
        return kept

    def _classify(self, ids: list[int]) -> None:
        """Each id's (coefficient text's class, mtp_available) into ``memory``, read a chunk of
        ids at a time in their order (ids close together share pages: 2.5 times faster than
        in the run's order at 1M quants); the texts of the classes met so far are compared in
        the database, so only a new class's text is read out."""
        ids.sort()
        text = "CAST(m.coefficients AS TEXT)"
        for start in range(0, len(ids), _CLASS_CHUNK):
            marks, names = placeholders("class_id", ids[start : start + _CLASS_CHUNK])
            sent, refs = placeholders("class_text", self.sent)
            if self.sent:
                arms = " ".join(f"WHEN :class_text{i} THEN {i}" for i in range(len(self.sent)))
                known = f"CASE {text} {arms} ELSE -1 END"
                unsent = f"CASE WHEN {text} IN ({sent}) THEN NULL ELSE {text} END"
            else:
                known, unsent = "-1", text
            rows = self.reader.rows(
                f"SELECT m.quant_id, m.mtp_available, {known}, {unsent} FROM memory_models m"
                f" WHERE m.quant_id IN ({marks})",
                {**names, **refs},
            )
            for qid, available, k, t in rows:
                index = self.sent_class[k] if k >= 0 else self._index(t)
                self.memory[int(qid)] = (index, available)

    def _index(self, text: str | None) -> int:
        """The class index of a coefficient text read out (a new one is sent from now on)."""
        if text in self.texts:
            return self.texts[text]
        index = self.texts[text] = len(self.texts)
        if text is not None and len(self.sent) < _MAX_TEXTS:
            self.sent.append(text)
            self.sent_class.append(index)
        return index


#: Where the shape text (crawler.catalog.search_index.search_shape_sql) holds the MTP verdicts.
_MTP_PRESENT = SHAPE_COLUMNS.index("mtp_present")
_MTP_PRESERVED = SHAPE_COLUMNS.index("mtp_preserved")
#: Coefficient texts a run's class read compares in the database (then read out per quant).
_MAX_TEXTS = 8
#: Memory models read at once for their classes (a read of 2,048 named ids costs more than
#: eight of 256).
_CLASS_CHUNK = 256


def _keyed_rows(
    reader: Reader, w: Where, batch: list[tuple[Any, ...]]
) -> Iterator[tuple[tuple[Any, ...], float]]:
    """keyed_run's rows of a batch of (id, key, ...) items, in its order."""
    key_of = {item[0]: float(item[1]) for item in batch}
    rows = [(row, key_of[row[0]]) for row in _rows(reader, w, batch)]
    rows.sort(key=lambda rk: -rk[1])  # stable: quality_run's order within one key
    yield from rows


def _quality_key(row: tuple[Any, ...]) -> tuple[Any, ...]:
    """The read's ORDER BY as a Python key (CANDIDATE_COLUMNS: 3 size, 17 downloads, 1 repo,
    2 path; 25 quality_score)."""
    return (desc_key(row[25]), -int(row[3]), desc_key(row[17]), row[1], row[2])


def _rows(reader: Reader, w: Where, batch: list[tuple[Any, ...]]) -> Iterator[tuple[Any, ...]]:
    """The rows of a batch of ids that pass ``w``, in the read's order (the batch holds every
    tie of its last key, so sorting it here keeps the order across batches)."""
    if not batch:
        return
    marks, names = placeholders("quality_id", [item[0] for item in batch])
    # The ids outermost (a CROSS JOIN): with w's `q.live = TRUE` SQLite otherwise walks an
    # index of every live quant.
    sql = (
        f"{PARTIAL_COLUMNS} FROM quants y CROSS JOIN quants q"
        " JOIN repos r ON r.id = q.repo_pk JOIN memory_models m ON m.quant_id = q.id"
        f" WHERE y.id IN ({marks}) AND q.id = y.id AND {w.sql}"
    )
    yield from sorted(reader.rows(sql, {**w.params, **names}), key=_quality_key)
