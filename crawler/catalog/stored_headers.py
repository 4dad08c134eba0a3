"""A stored quant's header by its file name: what ``quants check-log`` needs when the GGUF a log
names is not on this machine but the catalog has analysed it (I/O: reads the catalog)."""

from __future__ import annotations

from crawler.catalog.reader import Reader
from crawler.catalog.tensor_tables import TensorTableError, decode_tensor_table
from crawler.gguf.parse import GGUFHeader
from crawler.profile.quant_files import loaded_name

__all__ = ["header_by_file_name"]

_SQL = (
    "SELECT r.repo_id, q.path, t.data, t.encoding FROM tensor_tables t"
    " JOIN quants q ON q.id = t.quant_id JOIN repos r ON r.id = q.repo_pk"
    " WHERE q.path LIKE :pattern ORDER BY r.repo_id, q.path"
)


def header_by_file_name(reader: Reader, file_name: str) -> tuple[str, str, list[GGUFHeader]] | None:
    """``(repo_id, path, shard headers)`` of the one stored quant whose file is ``file_name``
    (its base name); None when no quant or several (different repos) match. The caller merges
    the shards (the catalog computes no profile)."""
    base = file_name.replace("\\", "/").rsplit("/", 1)[-1]
    # LIKE narrows (its _ and % may over-match; a byte-cut quant's path goes on past the name);
    # the name llama.cpp loads decides (crawler.profile.quant_files: X.gguf for X.gguf.part1of2).
    rows = [
        r for r in reader.rows(_SQL, {"pattern": f"%{base}%"}) if loaded_name(str(r[1])) == base
    ]
    if len(rows) != 1:
        return None
    repo_id, path, data, encoding = rows[0]
    try:
        shards = decode_tensor_table(bytes(data), str(encoding))
    except TensorTableError:
        return None  # a bad stored row: as if the catalog had none

    return str(repo_id), str(path), [s.header for s in shards]
