"""Write synthetic GGUF files: a real header (gguf GGUFWriter) over a sparse all-zero data section.

Tensor data is never written: the file is truncated/extended to its exact full size, so a 16 GiB
"real" preset costs a few MB on disk and writes in about a second. Offsets are what llama.cpp
computes (ggml/src/gguf.cpp ``gguf_init_from_file_impl``: each tensor at the running sum of
``GGML_PAD(nbytes, alignment)``; the data section starts at the header end padded to alignment).
"""

from __future__ import annotations

import io
import math
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from gguf.constants import GGUF_DEFAULT_ALIGNMENT, GGUFEndian, GGUFValueType
from gguf.gguf_writer import GGUFWriter, WriterState

from .arch import TensorDef, tensor_defs
from .recipe import Recipe, TensorSlot, tensor_nbytes
from .spec import GLOBAL, MTP, ModelSpec, architecture_metadata
from .vocab import make_vocab

#: (type, value) forces a GGUF value type, e.g. ``(GGUFValueType.UINT16, 3)``.
Typed = tuple[GGUFValueType, Any]


@dataclass(frozen=True, slots=True)
class PlacedTensor:
    """A tensor as written: ggml ``shape`` (ne0 first), ``type_id``, ``nbytes`` (unpadded) and
    ``offset`` relative to the data section of the file (or shard) that holds it."""

    name: str
    shape: tuple[int, ...]
    type_id: int
    nbytes: int
    offset: int
    role: str
    layer: int | None
    kind: str


@dataclass(frozen=True, slots=True)
class Layout:
    """One file's layout: header bytes (padded to the data section), tensors and total size."""

    header: bytes
    tensors: tuple[PlacedTensor, ...]
    alignment: int

    @property
    def data_offset(self) -> int:
        """File offset of the data section (= ``len(header)``)."""
        return len(self.header)

    @property
    def size(self) -> int:
        """Exact file size: data offset + every tensor padded to the alignment."""
        return self.data_offset + sum(_pad(t.nbytes, self.alignment) for t in self.tensors)

    def read_at(self, offset: int, length: int) -> bytes:
        """The file's bytes ``[offset, offset + length)`` (fewer only at end of file), without a
        file: a ``ReadAt`` for parser tests and an in-memory body for the Hub emulator."""
        end = min(offset + length, self.size)
        if offset >= end:
            return b""
        head = self.header[offset:end]
        return head + bytes(end - offset - len(head))


def _pad(n: int, align: int) -> int:
    return (n + align - 1) // align * align


def _attn_v_like(role: str) -> bool:
    # llama-quant.cpp category_is_attn_v: attn_v and the fused attn_qkv count together.
    return role in ("attn_v", "attn_qkv")


def plan_tensors(spec: ModelSpec, recipe: Recipe) -> list[tuple[TensorDef, int]]:
    """Each tensor of ``spec`` (MTP blocks dropped if the recipe says so) with its final type."""
    defs = [d for d in tensor_defs(spec) if not (recipe.drop_mtp and d.kind == MTP)]
    n_v = sum(_attn_v_like(d.role) for d in defs)
    n_expert = spec.moe.n_expert if spec.moe else 0
    i_v = i_down = 0
    out: list[tuple[TensorDef, int]] = []
    for d in defs:
        index, count = 0, 0
        if _attn_v_like(d.role):
            index, count, i_v = i_v, n_v, i_v + 1
        elif d.role.startswith("ffn_down"):
            index, count, i_down = i_down, spec.block_count, i_down + 1
        slot = TensorSlot(
            d.name, d.role, d.layer, d.kind, d.shape, spec.block_count, n_expert, index, count
        )
        out.append((d, recipe.type_for(slot)))
    return out


def model_metadata(
    spec: ModelSpec, recipe: Recipe, metadata: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """All KV pairs of the model file except ``general.architecture`` (GGUFWriter adds it first)."""
    vocab = make_vocab(spec.n_vocab, spec.tokenizer_pre)
    meta: dict[str, Any] = {
        "general.type": "model",
        "general.name": spec.name,
        **architecture_metadata(spec),
        **vocab.metadata(),
        "general.quantization_version": 2,
        "general.file_type": recipe.file_type,
    }
    meta.update(metadata or {})
    return meta


def _add(w: GGUFWriter, key: str, value: Any) -> None:
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], GGUFValueType):
        w.add_key_value(key, value[1], value[0])
    elif isinstance(value, bool):
        w.add_bool(key, value)
    elif isinstance(value, int):
        if value < 0:
            w.add_int32(key, value) if value >= -(2**31) else w.add_int64(key, value)
        else:
            w.add_uint32(key, value) if value < 2**32 else w.add_uint64(key, value)
    elif isinstance(value, float):
        w.add_float32(key, value)
    elif isinstance(value, str):
        w.add_string(key, value)
    elif isinstance(value, (list, tuple)):
        w.add_array(key, list(value))
    else:
        raise TypeError(f"cannot write {key}={value!r}")


class _Writer(GGUFWriter):
    """gguf-py's writer, packing each large array value once per process and in bulk: the
    real-size presets' vocabularies (up to 262k tokens and merges) recur in many layouts, and
    packing them element by element was most of the test suite's time. The bytes are gguf-py's
    own (tests/unit/test_synth.py compares them)."""

    _packed: ClassVar[dict[tuple[Any, ...], bytes]] = {}

    def _pack_val(
        self, val: Any, vtype: GGUFValueType, add_vtype: bool, sub_type: GGUFValueType | None = None
    ) -> bytes:
        if vtype is GGUFValueType.ARRAY and isinstance(val, list | tuple) and len(val) >= 4096:
            key = (tuple(val), add_vtype, sub_type, self.endianess)
            packed = self._packed.get(key)
            if packed is None:
                packed = _pack_array(val, add_vtype, sub_type, self.endianess)
                if packed is None:
                    packed = super()._pack_val(val, vtype, add_vtype, sub_type)
                self._packed[key] = packed
            return packed
        return super()._pack_val(val, vtype, add_vtype, sub_type)


def _pack_array(
    val: Sequence[Any], add_vtype: bool, sub_type: GGUFValueType | None, endian: GGUFEndian
) -> bytes | None:
    """GGUFWriter._pack_val's bytes of an array of one element type (strings, ints that fit
    int32, finite float32s: the types it infers), built in bulk; None for anything else (the
    writer then packs and checks it itself)."""
    if sub_type is not None:
        return None
    order = ">" if endian == GGUFEndian.BIG else "<"
    kinds = set(map(type, val))
    if kinds == {str}:
        ltype = GGUFValueType.STRING
        encoded = [s.encode("utf-8") for s in val]
        sizes = np.array([len(e) for e in encoded], dtype=f"{order}u8").tobytes()
        body = b"".join(x for i, e in enumerate(encoded) for x in (sizes[8 * i : 8 * i + 8], e))
    elif kinds == {int}:
        ltype = GGUFValueType.INT32
        if min(val) < -(2**31) or max(val) >= 2**31:
            return None
        body = np.array(val, dtype=f"{order}i4").tobytes()
    elif kinds == {float}:
        ltype = GGUFValueType.FLOAT32
        wide = np.array(val, dtype=np.float64)
        with np.errstate(over="ignore"):
            narrow = wide.astype(f"{order}f4")
        if not np.isfinite(narrow).all() or not np.isfinite(wide).all():
            return None  # struct refuses what float32 cannot hold; gguf-py reports it
        body = narrow.tobytes()
    else:
        return None
    head = struct.pack(f"{order}I", GGUFValueType.ARRAY) if add_vtype else b""
    return head + struct.pack(f"{order}IQ", ltype, len(val)) + body


def _header(
    arch: str | None,
    meta: Mapping[str, Any],
    tensors: Sequence[tuple[str, tuple[int, ...], int, int]],
    *,
    alignment: int,
    big_endian: bool,
    version: int,
) -> bytes:
    """Header bytes (magic .. tensor infos), zero-padded to the data section's alignment."""
    endian = GGUFEndian.BIG if big_endian else GGUFEndian.LITTLE
    w = _Writer(None, arch or "none", endianess=endian)
    if arch is None:  # gguf-split's later shards carry only the split.* keys
        w.kv_data[0].pop("general.architecture")
    for key, value in meta.items():
        _add(w, key, value)
    if alignment != GGUF_DEFAULT_ALIGNMENT:
        w.add_custom_alignment(alignment)
    for name, shape, tid, nbytes in tensors:
        # GGUFWriter takes numpy order (outermost first) and writes ne0 first; any non-uint8
        # dtype with raw_dtype makes it take the shape as is. raw_dtype may be a fork id (252).
        w.add_tensor_info(name, tuple(reversed(shape)), np.dtype(np.float32), nbytes, tid)  # type: ignore[arg-type]
    buf = io.BytesIO()
    # Write into memory: GGUFWriter only opens files by path; its writers just call fout.write.
    w.fout = [buf]  # type: ignore[list-item]
    w.state = WriterState.EMPTY
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    data = bytearray(buf.getvalue())
    if version != 3:
        # GGUF v2 has the v3 layout (v3 only added big-endian files): patch the version field.
        data[4:8] = struct.pack(">I" if big_endian else "<I", version)
    data.extend(b"\0" * (_pad(len(data), alignment) - len(data)))
    return bytes(data)


def _place(items: Iterable[tuple[TensorDef, int]], alignment: int) -> tuple[PlacedTensor, ...]:
    out: list[PlacedTensor] = []
    offset = 0
    for d, tid in items:
        n = tensor_nbytes(d.shape, tid)
        out.append(PlacedTensor(d.name, d.shape, tid, n, offset, d.role, d.layer, d.kind))
        offset += _pad(n, alignment)
    return tuple(out)


def build_layout(
    arch: str | None,
    meta: Mapping[str, Any],
    items: Sequence[tuple[TensorDef, int]],
    alignment: int,
    big_endian: bool,
    version: int,
) -> Layout:
    """Layout of a file with KV ``meta`` and the typed tensors ``items`` (``arch`` None: no
    ``general.architecture`` key, as in gguf-split's later shards)."""
    placed = _place(items, alignment)
    infos = [(t.name, t.shape, t.type_id, t.nbytes) for t in placed]
    header = _header(arch, meta, infos, alignment=alignment, big_endian=big_endian, version=version)
    return Layout(header, placed, alignment)


def layout(
    spec: ModelSpec,
    recipe: Recipe,
    *,
    alignment: int = GGUF_DEFAULT_ALIGNMENT,
    big_endian: bool = False,
    version: int = 3,
    metadata: Mapping[str, Any] | None = None,
) -> Layout:
    """The single-file layout of ``spec`` quantized by ``recipe`` (header bytes included)."""
    meta = model_metadata(spec, recipe, metadata)
    return build_layout(spec.arch, meta, plan_tensors(spec, recipe), alignment, big_endian, version)


def header_bytes(
    spec: ModelSpec,
    recipe: Recipe,
    *,
    alignment: int = GGUF_DEFAULT_ALIGNMENT,
    big_endian: bool = False,
    version: int = 3,
    metadata: Mapping[str, Any] | None = None,
) -> bytes:
    """The file's bytes ``[0, data_offset)``: header and tensor infos, padded to the alignment."""
    return layout(
        spec, recipe, alignment=alignment, big_endian=big_endian, version=version,
        metadata=metadata,
    ).header  # fmt: skip


def _write_sparse(path: Path, head: bytes, size: int) -> None:
    with path.open("wb") as f:
        f.write(head)
        f.truncate(size)  # extends with a hole: no data blocks allocated


def write_layout(path: str | Path, lay: Layout) -> Path:
    """Write ``lay`` to ``path`` (header, then a sparse zero data section)."""
    p = Path(path)
    _write_sparse(p, lay.header, lay.size)
    return p


def shard_name(path: Path, index: int, count: int) -> Path:
    """``Model-Q4_K_M.gguf`` -> ``Model-Q4_K_M-00002-of-00003.gguf`` (llama_split_path format)."""
    stem = path.name.removesuffix(".gguf")
    return path.with_name(f"{stem}-{index:05d}-of-{count:05d}.gguf")


def _partition(items: Sequence[tuple[TensorDef, int]], n: int) -> list[list[tuple[TensorDef, int]]]:
    # Contiguous groups of about equal bytes, each non-empty; cuts fall anywhere, so a block's
    # tensors can straddle two shards (as in real gguf-split output).
    if n > len(items):
        raise ValueError(f"cannot split {len(items)} tensors into {n} shards")
    sizes = [tensor_nbytes(d.shape, t) for d, t in items]
    total = sum(sizes)
    groups: list[list[tuple[TensorDef, int]]] = [[] for _ in range(n)]
    acc, g = 0, 0
    for i, item in enumerate(items):
        remaining = len(items) - i
        if groups[g] and g < n - 1 and (acc >= total * (g + 1) / n or remaining == n - 1 - g):
            g += 1
        groups[g].append(item)
        acc += sizes[i]
    return groups


def write_gguf(
    path: str | Path,
    spec: ModelSpec,
    recipe: Recipe,
    *,
    split: int | None = None,
    metadata_only_first_shard: bool = False,
    alignment: int = GGUF_DEFAULT_ALIGNMENT,
    big_endian: bool = False,
    version: int = 3,
    metadata: Mapping[str, Any] | None = None,
) -> list[Path]:
    """Write ``spec`` quantized by ``recipe``; return the written paths.

    ``split=N`` writes gguf-split shards ``<stem>-0000i-of-0000N.gguf``: shard 1 holds all
    metadata plus ``split.no`` (u16), ``split.count`` (u16), ``split.tensors.count`` (i32); later
    shards hold only those three keys (tools/gguf-split/gguf-split.cpp); every shard has its own
    tensor table and data section. ``metadata_only_first_shard`` leaves shard 1 without tensors
    (as Unsloth's large uploads). ``metadata`` adds or overrides KV pairs.
    """
    p = Path(path)
    if split is None:
        lay = layout(
            spec, recipe, alignment=alignment, big_endian=big_endian, version=version,
            metadata=metadata,
        )  # fmt: skip
        return [write_layout(p, lay)]
    shards = split_layouts(
        spec, recipe, split, metadata_only_first_shard=metadata_only_first_shard,
        alignment=alignment, big_endian=big_endian, version=version, metadata=metadata,
    )  # fmt: skip
    return [write_layout(shard_name(p, i + 1, split), lay) for i, lay in enumerate(shards)]


def split_layouts(
    spec: ModelSpec,
    recipe: Recipe,
    split: int,
    *,
    metadata_only_first_shard: bool = False,
    alignment: int = GGUF_DEFAULT_ALIGNMENT,
    big_endian: bool = False,
    version: int = 3,
    metadata: Mapping[str, Any] | None = None,
) -> list[Layout]:
    """The gguf-split shards of write_gguf (``split=N``), in memory, shard 1 first."""
    if split < 2:
        raise ValueError("split must be >= 2")
    meta = model_metadata(spec, recipe, metadata)
    items = plan_tensors(spec, recipe)
    groups = (
        [[], *_partition(items, split - 1)]
        if metadata_only_first_shard
        else _partition(items, split)
    )
    shards = []
    for i, group in enumerate(groups):
        keys = {
            "split.no": (GGUFValueType.UINT16, i),
            "split.count": (GGUFValueType.UINT16, split),
            "split.tensors.count": (GGUFValueType.INT32, len(items)),
        }
        shard_meta = {**meta, **keys} if i == 0 else keys
        arch = spec.arch if i == 0 else None
        shards.append(build_layout(arch, shard_meta, group, alignment, big_endian, version))
    return shards


def write_parts(path: str | Path, spec: ModelSpec, recipe: Recipe, *, parts: int = 2) -> list[Path]:
    """mradermacher-style ``<name>.gguf.part1of2`` ... : the single file cut into byte ranges.

    Only part 1 has a GGUF header; concatenating the parts gives exactly the file
    write_gguf writes. Cuts are at ``ceil(size * k / parts)``.
    """
    p = Path(path)
    lay = layout(spec, recipe)
    out = []
    for k, (a, b) in enumerate(part_bounds(lay.size, parts)):
        part = p.with_name(f"{p.name}.part{k + 1}of{parts}")
        _write_sparse(part, lay.header[a:b], b - a)
        out.append(part)
    return out


def part_bounds(size: int, parts: int) -> list[tuple[int, int]]:
    """Byte ranges ``[a, b)`` of the ``.partKofN`` files of a ``size``-byte file; part k's bytes
    are ``layout.read_at(a, b - a)``."""
    cuts = [math.ceil(size * k / parts) for k in range(parts + 1)]
    return list(pairwise(cuts))


def write_mtp_sidecar(
    path: str | Path, spec: ModelSpec, recipe: Recipe, *, metadata: Mapping[str, Any] | None = None
) -> Path:
    """An MTP-only GGUF, as ``convert_hf_to_gguf.py --mtp`` writes (``mtp-<name>.gguf``).

    Same metadata as the full model; tensors: the MTP blocks plus token_embd, output_norm and
    output, which the converter keeps (conversion/qwen.py ``mtp_only``) and llama.cpp's mtp_only
    load path requires (qwen35.cpp: token_embd/output_norm created with flags 0).
    """
    if spec.n_nextn == 0:
        raise ValueError(f"{spec.name} declares no MTP layers")
    items = [(d, t) for d, t in plan_tensors(spec, recipe) if d.kind in (MTP, GLOBAL)]
    meta = model_metadata(spec, recipe, metadata)
    lay = build_layout(spec.arch, meta, items, GGUF_DEFAULT_ALIGNMENT, False, 3)
    return write_layout(path, lay)
