"""What quants says around the tensor table, on files the fixtures build: fork-type
sizes, header-only and byte-split files, vocabulary-only files, GGUF v2, estimate wording, claims.

Every case runs the real CLI in a subprocess on a file written by tests/synth.
"""

from __future__ import annotations

import pytest

from crawler.gguf.parse import parse_header_bytes
from crawler.profile.grouping import FileKind, group_files
from crawler.profile.labels import byte_parts, split_info
from tests import synth
from tests.cli import clean_env, run_quants
from tests.schemas import checked
from tests.synth.spec import MTP
from tests.synth.write import build_layout, model_metadata


@pytest.fixture
def env(tmp_path):
    return clean_env(tmp_path)


def _json(env, *args):
    out = run_quants(*args, "--json", env=env)
    assert out.returncode == 0, out.stderr
    return checked(args[0], out.stdout)


def test_fork_types_get_their_bytes_from_the_offsets(tmp_path, env):
    spec = synth.preset("qwen35")
    (path,) = synth.write_gguf(tmp_path / "Qwen3.8-27B-PXQ4.gguf", spec, synth.fork_type_252())
    lay = synth.layout(spec, synth.fork_type_252())
    data = _json(env, "inspect", str(path))
    ffn = data["groups"]["ffn"]
    want = sum(t.nbytes for t in lay.tensors if t.type_id == 252 and t.kind != MTP)
    assert ffn["n_bytes"] == want and ffn["types"] == {"TYPE_252": ffn["n_tensors"]}
    assert ffn["min_bits"] is None  # bits stay unknown
    # Every group's bytes are the tensors' real bytes (the synth layout knows them exactly) ...
    total = sum(g["n_bytes"] for g in data["groups"].values())
    assert total == sum(t.nbytes for t in lay.tensors)
    # ... so the file's bpw is within 1% of size x 8 / params (the header is the rest).
    size_bpw = path.stat().st_size * 8 / data["n_params"]
    assert abs(data["bpw"] - size_bpw) / size_bpw < 0.01
    text = run_quants("inspect", str(path), env=env).stdout
    assert " 0 B " not in text and "bytes from the file's offsets, bits unknown" in text
    # The estimate counts them too, and says for what.
    est = run_quants("estimate", str(path), "--ctx", "4096", "--json", env=env)
    assert est.returncode == 0 and checked("estimate", est.stdout)["bytes"]["weights"] > want
    assert "type ids mainline llama.cpp cannot load (252)" in est.stderr


def test_a_file_cut_after_its_header_inspects_and_says_so(tmp_path, env):
    lay = synth.layout(synth.preset("llama"), synth.q4_k_m_like())
    path = tmp_path / "Llama-Q4_K_M.gguf"
    path.write_bytes(lay.header + bytes(1000))
    data = _json(env, "inspect", str(path))
    assert data["n_tensors"] == len(lay.tensors) and data["size_bytes"] == path.stat().st_size
    assert any("truncated" in c and "header is complete" in c for c in data["claims"])
    text = run_quants("inspect", str(path), env=env).stdout
    assert "TRUNCATED" in text
    # Cut inside the header: a one-line error whose hint does not promise --json details.
    path.write_bytes(lay.header[: len(lay.header) // 2])
    out = run_quants("inspect", str(path), env=env)
    assert out.returncode == 1 and "past the end of the file" in out.stderr
    assert "--json" not in out.stderr and "Traceback" not in out.stderr


def test_part00_sets_are_one_file(tmp_path, env):
    lay = synth.layout(synth.preset("llama"), synth.q4_k_m_like())
    paths = []
    for i, (a, b) in enumerate(synth.part_bounds(lay.size, 3)):
        p = tmp_path / f"Llama-Q4_K_M.gguf.part{i:02d}"
        with p.open("wb") as fh:
            fh.write(lay.header[a:b])
            fh.truncate(b - a)
        paths.append(p)
    assert split_info(paths[0].name) == ("part", 0, 0)
    assert byte_parts(str(paths[1]), [str(p) for p in paths]) == [str(p) for p in paths]
    data = _json(env, "inspect", str(paths[0]))
    assert data["size_bytes"] == lay.size and data["quant_label"] == "Q4_K_M"
    assert not any("truncated" in c for c in data["claims"])
    # Only part 00 is cut: the header is whole, the data is not.
    one = tmp_path / "one" / "M-Q8_0.gguf.part00"
    one.parent.mkdir()
    one.write_bytes(lay.header + bytes(10))
    assert any("truncated" in c for c in _json(env, "inspect", str(one))["claims"])

    class F:
        def __init__(self, path):
            self.path, self.size, self.content_key = path, 1, path

    layout = group_files([F(p.name) for p in paths] + [F("x.gguf.part1of2"), F("x.gguf.part2of2")])
    quant = next(q for q in layout.quants if q.path == paths[0].name)
    assert quant.complete and [f.shard_index for f in quant.files] == [1, 2, 3]
    assert [f.path for f in quant.header_files] == [paths[0].name]
    assert all(f.kind == FileKind.PART for f in quant.files)
    gap = group_files([F(paths[0].name), F(paths[2].name)])
    assert not gap.quants[0].complete


def test_vocab_only_files_say_what_they_are(tmp_path, env):
    meta = model_metadata(synth.preset("llama"), synth.q4_k_m_like())
    lay = build_layout("llama", meta, [], 32, False, 3)
    end = parse_header_bytes(lay.header).tensor_info_end
    path = tmp_path / "ggml-vocab-llama-bpe.gguf"
    path.write_bytes(lay.header[:end])  # ends where the tensor infos do, before the padding
    assert end < len(lay.header)
    data = _json(env, "inspect", str(path))
    assert data["n_tensors"] == 0 and data["header_bytes"] <= data["size_bytes"]
    assert data["loadable_by_mainline"] is False and data["claims"] == []
    text = run_quants("inspect", str(path), env=env).stdout
    assert "vocabulary only, no tensors" in text and "loads" not in text
    out = run_quants("estimate", str(path), "--ctx", "4096", env=env)
    assert out.returncode == 1 and "vocabulary only, no tensors" in out.stderr
    assert "not modelled" not in out.stderr


def test_gguf_v2_reads_like_v3(tmp_path, env):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (v2,) = synth.write_gguf(
        tmp_path / "a" / "L-Q8_0.gguf", synth.preset("llama"), synth.q8_0(), version=2
    )
    (v3,) = synth.write_gguf(tmp_path / "b" / "L-Q8_0.gguf", synth.preset("llama"), synth.q8_0())
    assert parse_header_bytes(v2.read_bytes()[:65536]).version == 2
    a, b = _json(env, "inspect", str(v2)), _json(env, "inspect", str(v3))
    for key in ("n_tensors", "n_params", "bpw", "groups", "claims"):
        assert a[key] == b[key]


@pytest.fixture
def gemma(tmp_path):
    (path,) = synth.write_gguf(tmp_path / "gemma-Q8_0.gguf", synth.preset("gemma3"), synth.q8_0())
    return path


def test_estimate_notes_name_their_parts(gemma, env):
    out = run_quants("estimate", str(gemma), "--ctx", "4096", env=env)
    assert out.returncode == 0, out.stderr
    assert "input embedding" in out.stdout and "pinned compute/output buffers" in out.stdout
    assert "SWA layers x 768 cells" in out.stdout and "1 layers x 4096 cells" in out.stdout


def test_ctx_above_training_warns_with_what_llamacpp_does(gemma, env):
    train = synth.preset("gemma3").n_ctx_train
    out = run_quants("estimate", str(gemma), "--ctx", str(train * 2), env=env)
    assert out.returncode == 0
    assert f"above the model's trained context ({train})" in out.stderr
    assert "possible training context overflow" in out.stderr and "caps each slot" in out.stderr
    ok = run_quants("estimate", str(gemma), "--ctx", str(train), env=env)
    assert "warning" not in ok.stderr


def test_nothing_fits_at_any_context_is_exit_3(gemma, env):
    out = run_quants(
        "estimate", str(gemma), "--ctx", "4096", "--vram", "0.1", "--headroom", "0", env=env
    )
    assert out.returncode == 3 and "does not fit at any context" in out.stdout
    data = run_quants(
        "estimate",
        str(gemma),
        "--ctx",
        "4096",
        "--vram",
        "0.1",
        "--headroom",
        "0",
        "--json",
        env=env,
    )
    assert data.returncode == 3 and checked("estimate", data.stdout)["max_ctx"] == 0
    fits = run_quants("estimate", str(gemma), "--ctx", "4096", "--vram", "8", env=env)
    assert fits.returncode == 0 and "largest context" in fits.stdout


def test_name_file_type_and_tensors_are_compared_both_ways(tmp_path, env):
    (more,) = synth.write_gguf(tmp_path / "L-Q2_K.gguf", synth.preset("llama"), synth.q4_k_m_like())
    claims = _json(env, "inspect", str(more))["claims"]
    assert (
        "named Q2_K but general.file_type says Q4_K_M (llama-quantize's Q2_K recipe is written"
        " as Q2_K)" in claims
    )
    assert any(
        c.startswith("named Q2_K but") and "Q2_K recipe gives them" in c and "hold more bits" in c
        for c in claims
    )
    (fewer,) = synth.write_gguf(
        tmp_path / "L-Q8_0.gguf", synth.preset("llama"), synth.uniform("Q4_K")
    )
    assert any(
        c.startswith("named Q8_0 but") and "hold fewer bits" in c
        for c in _json(env, "inspect", str(fewer))["claims"]
    )
    # file_type vs tensors with an honest name: a Q4_K_M file_type over Q8_0 tensors.
    recipe = synth.uniform("Q8_0", file_type=synth.q4_k_m_like().file_type)
    (ft,) = synth.write_gguf(tmp_path / "L.gguf", synth.preset("llama"), recipe)
    assert any(
        c.startswith("general.file_type says Q4_K_M but")
        and "Q4_K_M recipe gives them" in c
        and "hold more bits" in c
        for c in _json(env, "inspect", str(ft))["claims"]
    )
    (same,) = synth.write_gguf(
        tmp_path / "L-Q4_K_M.gguf", synth.preset("llama"), synth.q4_k_m_like()
    )
    assert _json(env, "inspect", str(same))["claims"] == []
