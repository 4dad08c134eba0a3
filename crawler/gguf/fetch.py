"""GGUF header fetch policy (pure: no I/O): how many bytes to ask read_at for, and when.

Sizes every read of the parser's buffer so a header costs few requests and few bytes past its end.
Details: docs/internals/gguf.md#fetch
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from crawler.base.errors import CorruptHeader, HeaderTooLarge

__all__ = [
    "DEFAULT_FIRST_READ",
    "DEFAULT_MAX_HEADER_BYTES",
    "ESTIMATE_MARGIN",
    "ESTIMATE_SLACK",
    "EXTRAPOLATION_MARGIN",
    "HINT_MARGIN",
    "TENSOR_INFO_BOUND",
    "FetchBuffer",
    "ReadAt",
    "first_read_for",
]

#: ``read_at(offset, length) -> bytes``; may return fewer bytes only at end of file.
ReadAt = Callable[[int, int], bytes]
#: Same default as ``Settings.max_header_bytes``: a 248k vocabulary is ~11 MB.
DEFAULT_MAX_HEADER_BYTES = 64 * 1024 * 1024
#: First read without a hint; docs/internals/gguf.md#fetch has the measurement behind it.
DEFAULT_FIRST_READ = 512 * 1024
#: Relative slack added to the estimated rest of the header. The first 30k tokens of a BPE
#: vocabulary are ~5% shorter than its average (measured: synthetic 248k vocabulary 8.37 vs 8.82
#: bytes; real vocabularies grow faster with rank), which puts the estimate ~1-2% short; 3% covers
#: that and keeps the total under 1.05x the header.
ESTIMATE_MARGIN = 0.03
#: Relative slack added to a caller's size hint (a sibling file's header: within a few KB).
HINT_MARGIN = 0.01
#: Absolute slack added with it: covers the last tensor infos' name-length spread.
ESTIMATE_SLACK = 8 * 1024
#: A string array's walk records its position every this many items (see ``array_rest``).
_MARK_EVERY = 2048
# Slack for the data section's alignment padding (GGUF_DEFAULT_ALIGNMENT in gguf.h is 32).
_ALIGN_SLACK = 32
_U64 = struct.Struct("<Q")
#: Largest tensor-info record llama.cpp writes: name length (8) + a name of at most
#: GGML_MAX_NAME - 1 = 63 bytes (ggml/include/ggml.h: GGML_MAX_NAME 64; gguf.cpp rejects longer)
#: + n_dims (4) + GGML_MAX_DIMS = 4 dims (32) + type (4) + offset (8). Real records average ~60
#: bytes, so bounding every tensor not yet walked by this over-reads ~60 bytes a tensor (~50 KB on
#: 866 tensors) and never falls short on a file that follows ggml's limits.
TENSOR_INFO_BOUND = 8 + 63 + 4 + 4 * 8 + 4 + 8
#: Extra slack on the string bytes extrapolated from the part of the vocabulary seen so far.
#: Real vocabularies are not uniform in rank: in the published Qwen2 vocabulary (vocab.json and
#: merges.txt of Qwen/Qwen2-7B-Instruct, 151,643 tokens) the first fifth averages 14.0 bytes a
#: token with its length prefix, the whole 17.0 (its CJK tokens, 3 UTF-8 bytes a character, sit
#: at ranks 100k-145k), and the merges follow the tokens. The extrapolation from the first 512
#: KiB then falls ~12% short; 15% on the extrapolated part keeps the cold read at 2 requests.
EXTRAPOLATION_MARGIN = 0.15
# Typical tensor-info record (name ~26 bytes, ~1.7 dims): measured on synthetic llama/qwen35.
_TYPICAL_TENSOR_INFO_BYTES = 64
# Typical chat template (Qwen3 ~4 KB, Qwen3.5 ~8 KB, GLM-4.5 ~6 KB, gpt-oss ~16 KB).
_TYPICAL_CHAT_TEMPLATE_BYTES = 8 * 1024
# Typical small KV pair (key ~30 bytes + a scalar or short string).
_TYPICAL_KV_BYTES = 56


def first_read_for(size_hint: int | None, first_read: int | None) -> int:
    """The first read's size: the caller's, else a size hint plus margin, else the default."""
    if first_read is not None:
        return first_read
    if size_hint is not None and size_hint > 0:
        return int(size_hint * (1 + HINT_MARGIN)) + ESTIMATE_SLACK
    return DEFAULT_FIRST_READ


class FetchBuffer:
    """The bytes of one header read so far, and the estimator that sizes the next read.

    The decoder moves ``pos`` with take and tells the estimator what it learns (declared
    counts, keys seen, the tokenizer model); fill turns that into one read sized to
    reach the estimated end of the header.
    """

    def __init__(
        self,
        read_at: ReadAt,
        *,
        file_size: int | None,
        max_header_bytes: int,
        first_read: int,
        source: str | None,
    ) -> None:
        self.read_at = read_at
        self.file_size = file_size
        self.limit = max_header_bytes if file_size is None else min(max_header_bytes, file_size)
        self.cap = max_header_bytes
        self.first_read = max(1, first_read)
        self.source = source
        self.buf = bytearray()
        self.pos = 0
        self.eof = False
        self.refills = 0
        # What the estimator knows so far.
        self.n_tensors = 0
        self.kv_left = 0
        self.in_array: tuple[int, int, int] | None = None  # (start, items done, items total)
        self.marks: list[int] = []
        self.array_key = ""
        # Byte offsets (from the array start) every _MARK_EVERY tokens, then the end.
        self.token_marks: list[int] = []
        self.vocab_n = 0
        self.vocab_bytes = 0
        self.tokenizer_model: str | None = None
        self.seen: set[str] = set()
        self.tensor_info_start = 0
        self.tensors_done = 0

    # ------------------------------------------------------------------ errors and bytes

    def corrupt(self, why: str) -> CorruptHeader:
        return CorruptHeader(f"corrupt GGUF header: {why}", source=self.source)

    def fill(self, end: int) -> None:
        """Make ``buf`` hold at least ``end`` bytes, or raise (truncated, too large)."""
        while len(self.buf) < end:
            if end > self.limit and self.limit == self.cap:
                raise HeaderTooLarge(
                    f"GGUF header needs more than {self.cap} bytes (cap); raise the cap to read it",
                    source=self.source,
                )
            if self.eof or end > self.limit:
                raise self.corrupt(
                    f"header runs past the end of the file (needs {end} bytes, "
                    f"file has {self.file_size if self.file_size is not None else len(self.buf)})"
                )
            have = len(self.buf)
            if have == 0:
                target = max(end, self.first_read)
            else:
                # The bytes being taken (a whole scalar array: scores, token types) lie between
                # the cursor and ``end``; the estimate of what follows starts after them.
                rest = max(0, self.estimate_end() + max(0, end - self.pos) - have)
                # A floor that doubles with each refill (1/64, 1/32, 1/16, then 1/8 of what is
                # held) bounds the number of requests when the estimate keeps falling short.
                floor = have >> max(3, 7 - self.refills)
                target = max(end, have + int(rest * (1 + ESTIMATE_MARGIN)) + ESTIMATE_SLACK)
                target = max(target, have + floor)
                self.refills += 1
            target = min(target, self.limit)
            chunk = self.read_at(have, target - have)
            if len(chunk) > target - have:
                chunk = chunk[: target - have]
            if len(chunk) < target - have:
                self.eof = True
            if not chunk:
                continue
            self.buf += chunk

    def estimate_end(self) -> int:
        """Where the header probably ends: declared counts x observed sizes, with a margin on
        what is extrapolated from a vocabulary not yet walked to its end, and every tensor info
        not yet walked at TENSOR_INFO_BOUND."""
        est = self.pos
        # Bytes predicted from a partly walked token array: its own rest, and merges and
        # anything else predicted from its size.
        extrapolated = 0
        tokens_partial = self.in_array is not None and self.array_key == "tokenizer.ggml.tokens"
        if self.in_array is not None:
            rest = self.array_rest()
            est += rest
            if self.in_array[1] < self.in_array[2] and self.array_key != "tokenizer.ggml.merges":
                extrapolated += rest
        kv_left = self.kv_left
        # Tokenizer arrays not reached yet, predicted from the tokens.
        if self.vocab_n:
            n = self.vocab_n
            if "tokenizer.ggml.token_type" not in self.seen:
                est += 40 + 4 * n
                kv_left -= 1
            if self.tokenizer_model == "llama" and "tokenizer.ggml.scores" not in self.seen:
                est += 40 + 4 * n
                kv_left -= 1
            if self.tokenizer_model == "gpt2" and "tokenizer.ggml.merges" not in self.seen:
                # Merge i is "A B" where A+B spells token 256+i: one byte more than the token.
                merged = max(0.0, (self.vocab_bytes - 256 * 9.5) / max(1, n - 256))
                merges = 40 + int((n - 256) * (merged + 1))
                est += merges
                if tokens_partial:
                    extrapolated += merges
                kv_left -= 1
        if kv_left > 0 and self.vocab_n and "tokenizer.chat_template" not in self.seen:
            # Instruct models carry a chat template after the tokenizer arrays: 2-20 KB.
            est += _TYPICAL_CHAT_TEMPLATE_BYTES
            kv_left -= 1
        est += max(0, kv_left) * _TYPICAL_KV_BYTES
        est += int(extrapolated * EXTRAPOLATION_MARGIN)
        if self.tensors_done:
            per_info = max(
                (self.pos - self.tensor_info_start) / self.tensors_done, _TYPICAL_TENSOR_INFO_BYTES
            )
        else:
            per_info = TENSOR_INFO_BOUND
        est += int(per_info * (self.n_tensors - self.tensors_done)) + _ALIGN_SLACK
        return int(est)

    def array_rest(self) -> int:
        """Estimated bytes left in the string array being walked: items left x the mean size of
        the last quarter of the items seen (all of them while fewer than 4 marks exist)."""
        assert self.in_array is not None
        start, done, total = self.in_array
        if self.array_key == "tokenizer.ggml.merges" and self.token_marks:
            # Merge i spells token 256 + i with one space more: the tokens' sizes give the rest.
            first, last = 256 + done, 256 + total
            return max(0, self.token_bytes_before(last) - self.token_bytes_before(first)) + (
                total - done
            )
        if not done:
            return 16 * total
        marks = self.marks
        k = len(marks) - 1  # marks[k] is the position after k * _MARK_EVERY items
        if k >= 4:
            k0 = (3 * k) // 4
            per_item = (self.pos - marks[k0]) / (done - k0 * _MARK_EVERY)
        else:
            per_item = (self.pos - start) / done
        return int(per_item * (total - done))

    def token_bytes_before(self, index: int) -> int:
        """Encoded bytes of tokens ``[0, index)``, interpolated between the walk's marks."""
        marks, n = self.token_marks, self.vocab_n
        index = min(max(index, 0), n)
        k = index // _MARK_EVERY
        if k + 1 >= len(marks) - 1:  # in the last, partial block: between its mark and the end
            lo, lo_i, hi, hi_i = marks[-2], (len(marks) - 2) * _MARK_EVERY, marks[-1], n
        else:
            lo, lo_i, hi, hi_i = marks[k], k * _MARK_EVERY, marks[k + 1], (k + 1) * _MARK_EVERY
        if hi_i <= lo_i:
            return hi
        return lo + (hi - lo) * (index - lo_i) // (hi_i - lo_i)

    def take(self, n: int) -> int:
        """Reserve ``n`` bytes at the cursor; return their start offset."""
        pos = self.pos
        if pos + n > len(self.buf):
            self.fill(pos + n)
        self.pos = pos + n
        return pos

    def skip_strings(self, count: int, key: str) -> None:
        """Walk ``count`` length-prefixed strings (the hot loop: ~500k for a 248k vocabulary).

        Records the position every _MARK_EVERY items, so that a refill in the middle can
        extrapolate from the recent items: BPE vocabularies are sorted by merge rank and later
        tokens are longer, so the overall average so far would fall short.
        """
        start = pos = self.pos
        buf, unpack = self.buf, _U64.unpack_from
        limit = len(buf)
        cap = self.limit
        track = key == "tokenizer.ggml.tokens"
        marks = self.marks = [start]
        self.array_key = key
        i = 0
        while i < count:
            if pos + 8 > limit:
                self.pos = pos
                self.in_array = (start, i, count)
                if track and i:
                    rest = self.array_rest()
                    self.vocab_n, self.vocab_bytes = count, pos - start + rest
                self.fill(pos + 8)
                buf, limit = self.buf, len(self.buf)
            (n,) = unpack(buf, pos)
            pos += 8 + n
            if pos > cap:
                self.pos = pos - 8 - n
                self.fill(pos)  # raises HeaderTooLarge or CorruptHeader
            i += 1
            if not i % _MARK_EVERY:
                marks.append(pos)
        if pos > limit:
            self.pos = start
            self.in_array = (start, count, count)
            self.fill(pos)
        self.pos = pos
        self.in_array = None
        if track:
            self.vocab_n, self.vocab_bytes = count, pos - start
            self.token_marks = [m - start for m in marks] + [pos - start]

    # ------------------------------------------------------------------ sections
