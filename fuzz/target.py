"""The fuzz target: what the crawl does with the bytes of one untrusted GGUF header.

check runs one input through the parser (whole buffer, and again through a small-chunk
reader that exercises the refill/estimate path) and, when it parses, through everything the crawl
does next with a header: the precision profile and its JSON, the memory coefficients, and the
catalog's tensor-table encoding round trip. Expected failures are the documented ones
(GGUFError from the parser, QuantsError after
it); anything else escaping is a finding.
"""

from __future__ import annotations

import json
import math
from typing import Any

from crawler.base.errors import GGUFError, QuantsError
from crawler.catalog.tensor_tables import decode_tensor_table, encode_tensor_table
from crawler.fit import coefficients
from crawler.gguf.parse import GGUFHeader, parse_header_bytes, read_header
from crawler.profile.analysis import AnalysedShard
from crawler.profile.build import build_profile

#: Header cap used while fuzzing: far above any input (inputs are at most a few hundred KB), so a
#: hostile count that would need more must be refused by the parser's own bounds, not by the cap.
FUZZ_MAX_HEADER_BYTES = 64 * 1024 * 1024


class Finding(Exception):
    """A property the target checks (not an exception of the code under test) did not hold."""


def _chunked(data: bytes) -> tuple[Any, list[int]]:
    calls: list[int] = []

    def read_at(offset: int, length: int) -> bytes:
        if length <= 0 or offset < 0:
            raise Finding(f"read_at({offset}, {length}): the parser asked for nothing or before 0")
        calls.append(length)
        return data[offset : offset + length]

    return read_at, calls


def _json_clean(value: Any, what: str) -> None:
    # The catalog stores profiles and coefficients in JSON columns, and PostgreSQL's json type
    # refuses the NaN/Infinity tokens Python's json writes by default.
    try:
        json.dumps(value, allow_nan=False, default=str)
    except ValueError as exc:
        raise Finding(f"{what} is not storable JSON: {exc}") from None


def check(data: bytes) -> str:
    """Run one input through parse -> profile -> coefficients -> encode; return the outcome.

    Returns ``"parsed"`` or the name of the GGUFError raised. Raises anything else.
    """
    try:
        header = parse_header_bytes(data, source="fuzz")
    except GGUFError as exc:
        outcome = type(exc).__name__
        header = None
    # Same bytes through a reader that starts with a tiny first read and refills: the estimate
    # and refill logic must reach the same verdict as the one-buffer parse.
    read_at, calls = _chunked(data)
    first = 1 + (len(data) % 97)
    try:
        chunked: GGUFHeader | None = read_header(
            read_at,
            file_size=None,
            max_header_bytes=FUZZ_MAX_HEADER_BYTES,
            first_read=first,
            source="fuzz",
        )
    except GGUFError as exc:
        chunked = None
        if header is not None:
            raise Finding(f"chunked read failed ({exc}) where the whole buffer parsed") from exc
        if type(exc).__name__ != outcome:
            raise Finding(
                f"chunked read raised {type(exc).__name__}, whole buffer {outcome}"
            ) from exc
    if header is None:
        return outcome
    if (
        chunked is None
        or chunked.tensors != header.tensors
        or chunked.data_offset != header.data_offset
    ):
        raise Finding("chunked read parsed a different header")
    if sum(calls) > 2 * max(len(data), header.data_offset) + 64 * 1024:
        raise Finding(f"chunked read fetched {sum(calls)} bytes for a {len(data)}-byte input")
    _after_parse(header, len(data))
    return "parsed"


def _after_parse(header: GGUFHeader, size: int) -> None:
    try:
        profile = build_profile(header, file_name="Fuzz-Q4_K_M.gguf", repo_id="fuzz/Fuzz-GGUF")
        doc = profile.to_json(source="fuzz/Fuzz-GGUF/Fuzz-Q4_K_M.gguf", size_bytes=size)
        _json_clean(doc, "profile")
        if doc["n_tensors"] != len(header.tensors):
            raise Finding("profile n_tensors differs from the tensor table")
        bpw = doc["bpw"]
        if bpw is not None and (not isinstance(bpw, float | int) or math.isnan(bpw)):
            raise Finding(f"bpw is {bpw!r}")
    except QuantsError:
        pass
    try:
        coeff = coefficients(header)
        _json_clean(coeff.to_json(), "coefficients")
    except QuantsError:
        pass
    shard = AnalysedShard("Fuzz-Q4_K_M.gguf", "0" * 64, header.data_offset, header)
    back = decode_tensor_table(encode_tensor_table([shard]))[0].header
    if back.tensors != header.tensors:
        raise Finding("tensor table does not round-trip through the catalog encoding")
