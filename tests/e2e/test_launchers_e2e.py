"""``quants search --emit``: llama-swap, Ollama and LM Studio configs, read back with a parser
and checked against each format's documented fields (sources in crawler/ranking/launchers.py)."""

from __future__ import annotations

import dataclasses
import json
import shlex

import pytest
import yaml

from crawler import api
from crawler.ranking.launchers import emit, render
from tests.cli import clean_env, run_quants
from tests.schemas import checked

# mostlygeek/llama-swap proxy/config/model_config.go: the keys of a model entry.
LLAMA_SWAP_MODEL_KEYS = {
    "cmd", "cmdStop", "proxy", "aliases", "env", "checkEndpoint", "ttl", "unlisted",
    "useModelName", "name", "description", "concurrencyLimit", "filters", "macros", "metadata",
    "sendLoadingState", "timeouts",
}  # fmt: skip
# ollama/ollama docs/modelfile.md: instructions and the valid PARAMETER names.
MODELFILE_INSTRUCTIONS = {
    "FROM",
    "PARAMETER",
    "TEMPLATE",
    "SYSTEM",
    "ADAPTER",
    "LICENSE",
    "MESSAGE",
}
MODELFILE_PARAMETERS = {
    "mirostat", "mirostat_eta", "mirostat_tau", "num_ctx", "num_gqa", "num_gpu", "num_thread",
    "repeat_last_n", "repeat_penalty", "temperature", "seed", "stop", "tfs_z", "num_predict",
    "top_k", "top_p",
}  # fmt: skip
# lmstudio-ai/docs 0_app/3_modelyaml/index.md: the top-level fields of a model.yaml.
MODEL_YAML_KEYS = {"model", "base", "metadataOverrides", "config", "customFields"}


@pytest.fixture(scope="module")
def env(tmp_path_factory, _shared_hub):
    tmp = tmp_path_factory.mktemp("launchers")
    env = clean_env(tmp, QUANTS_DB=f"sqlite:///{tmp / 'c.sqlite'}",
                    QUANTS_HF_ENDPOINT=_shared_hub.endpoint)  # fmt: skip
    out = run_quants("crawl", "--all", "--json", env=env)
    assert out.returncode == 0, out.stderr
    return env


SEARCH = ("search", "--vram", "24", "--ctx", "32768", "--limit", "3", "--offline")


def _quants(env, *args: str, code: int = 0):
    out = run_quants(*args, env=env)
    assert out.returncode == code, out.stderr
    return out


def _results(env, *extra: str) -> list[dict]:
    return checked("search", _quants(env, *SEARCH, *extra, "--json").stdout)["results"]


def parse_modelfile(text: str) -> list[tuple[str, str]]:
    """docs/modelfile.md's format: '# comment' or 'INSTRUCTION arguments' (case-insensitive)."""
    out = []
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        instruction, _, args = line.strip().partition(" ")
        assert instruction.upper() in MODELFILE_INSTRUCTIONS, line
        out.append((instruction.upper(), args.strip()))
    return out


def test_llama_swap_entries_run_the_searched_command_on_llama_swaps_port(env):
    results = _results(env)
    doc = yaml.safe_load(_quants(env, *SEARCH, "--emit", "llama-swap").stdout)
    assert list(doc) == ["models"]
    ids = [f"{r['repo']}:{r['quant_label'] or r['path']}" for r in results]
    assert list(doc["models"]) == ids
    for r, (model_id, entry) in zip(results, doc["models"].items(), strict=True):
        assert set(entry) <= LLAMA_SWAP_MODEL_KEYS and {"cmd", "ttl"} <= set(entry)
        assert entry["name"] == model_id
        assert isinstance(entry["ttl"], int) and entry["ttl"] >= 0
        # the same argv as the printed command, plus the port llama-swap assigns
        assert shlex.split(entry["cmd"]) == [*shlex.split(r["command"]), "--port", "${PORT}"]


def test_llama_swap_config_file_and_hostile_text_stays_one_argument(env, tmp_path, monkeypatch):
    path = tmp_path / "llama-swap.yaml"
    out = _quants(env, *SEARCH, "--emit", "llama-swap", "--out", str(path))
    assert f"wrote {path} (3 models)" in out.stderr and out.stdout  # the table is still shown
    assert len(yaml.safe_load(path.read_text())["models"]) == 3
    # A repo id that is a shell injection stays one argv word after YAML and shlex.
    for key, value in env.items():
        if key.startswith("QUANTS_"):
            monkeypatch.setenv(key, value)
    top = api.search(vram=24, ctx=32768, limit=1, offline=True).results[0]
    evil = "evil/x'; rm -rf ~ #:Q4"
    hostile = dataclasses.replace(top, command=shlex.join(["llama-server", "-hf", evil]))
    doc = yaml.safe_load(render("llama-swap", emit("llama-swap", [hostile])))
    (entry,) = doc["models"].values()
    assert shlex.split(entry["cmd"]) == ["llama-server", "-hf", evil, "--port", "${PORT}"]
    # ... and Ollama, whose Modelfile documents no quoting, writes nothing for it and says so
    bad = dataclasses.replace(
        top, candidate=dataclasses.replace(top.candidate, repo_id="evil/x y", quant_label="Q4")
    )
    (made,) = emit("ollama", [bad])
    assert made.document is None and "no Modelfile" in made.notes[0]


def test_ollama_modelfiles_state_what_they_cannot_express(env, tmp_path):
    results = _results(env, "-ctk", "q8_0", "-ctv", "q4_0")
    folder = tmp_path / "ollama"
    out = _quants(env, *SEARCH, "-ctk", "q8_0", "-ctv", "q4_0", "--emit", "ollama",
                  "--out", str(folder))  # fmt: skip
    files = sorted(folder.iterdir())
    assert [f.name[:3] for f in files] == ["01-", "02-", "03-"]
    for r, f in zip(results, files, strict=True):
        text = f.read_text()
        parsed = parse_modelfile(text)
        assert parsed[0] == ("FROM", f"hf.co/{r['repo']}:{r['quant_label']}")
        params = dict(args.split(" ", 1) for kind, args in parsed if kind == "PARAMETER")
        assert set(params) <= MODELFILE_PARAMETERS
        assert params == {"num_ctx": "32768"}  # all layers on the GPU: no num_gpu
        # K q8_0 / V q4_0 is not expressible: said in the file and on stderr, not dropped
        assert "# not expressed: the cache K q8_0 / V q4_0 cannot be set in Ollama" in text
    assert out.stderr.count("cannot be set in Ollama") == 3


def test_ollama_partial_run_sets_num_gpu(env):
    results = _results(env, "-ngl", "2")
    text = _quants(env, *SEARCH, "-ngl", "2", "--emit", "ollama").stdout
    blocks = [b for b in text.split("\n\n") if b.strip()]
    assert len(blocks) == len(results) == 3
    for r, block in zip(results, blocks, strict=True):
        params = dict(a.split(" ", 1) for k, a in parse_modelfile(block) if k == "PARAMETER")
        assert r["tier"] == "partial" and params["num_gpu"] == str(r["n_gpu_layers"]) == "2"


def test_lmstudio_model_yaml_carries_context_cache_offload_and_mtp(env, tmp_path):
    results = _results(env, "-ngl", "2", "-ctk", "q8_0", "-ctv", "q8_0")
    folder = tmp_path / "lms"
    _quants(env, *SEARCH, "-ngl", "2", "-ctk", "q8_0", "-ctv", "q8_0", "--emit", "lmstudio",
            "--out", str(folder))  # fmt: skip
    files = sorted(folder.glob("*.model.yaml"))
    assert len(files) == len(results) == 3
    for r, f in zip(results, files, strict=True):
        doc = yaml.safe_load(f.read_text())
        assert set(doc) <= MODEL_YAML_KEYS and {"model", "base", "config"} <= set(doc)
        owner, name = r["repo"].split("/")
        assert doc["model"].count("/") == 1 and doc["model"].startswith(owner.lower() + "/")
        assert doc["base"][0]["sources"] == [{"type": "huggingface", "user": owner, "repo": name}]
        fields = {x["key"]: x["value"] for x in doc["config"]["load"]["fields"]}
        assert all(k.startswith("llm.load.") for k in fields)
        assert fields["llm.load.contextLength"] == r["ctx"] == 32768
        assert fields["llm.load.llama.kCacheQuantizationType"] == {"checked": True, "value": "q8_0"}
        assert 0 < fields["llm.load.llama.acceleration.offloadRatio"] < 1
    # MTP drafting is expressible: a quant that runs with its head gets draftMtp
    mtp = _results(env, "qwen3.6", "--mtp")
    doc = yaml.safe_load_all(_quants(env, *SEARCH, "qwen3.6", "--mtp", "--emit", "lmstudio").stdout)
    for r, d in zip(mtp, doc, strict=True):
        fields = {x["key"]: x["value"] for x in d["config"]["load"]["fields"]}
        assert r["mtp"]["enabled"] and fields["llm.load.llama.speculativeDecoding.draftMtp"]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--emit", "vllm"), "--emit 'vllm': one of llama-swap, ollama, lmstudio"),
        (("--out", "x.yaml"), "--out goes with --emit FORMAT"),
        (
            ("--emit", "ollama", "--json"),
            "--emit prints the configs on stdout: with --json, give --out",
        ),
    ],
)
def test_bad_emit_options_are_one_line_errors(env, args, needle):
    out = _quants(env, *SEARCH, *args, code=2)
    assert out.stderr.splitlines()[0] == f"error: {needle}" and "Traceback" not in out.stderr


def test_json_output_is_unchanged_by_emit_to_a_file(env, tmp_path):
    plain = _quants(env, *SEARCH, "--json").stdout
    with_emit = _quants(env, *SEARCH, "--json", "--emit", "llama-swap", "--out",
                        str(tmp_path / "c.yaml")).stdout  # fmt: skip
    assert json.loads(plain) == json.loads(with_emit)


def test_what_neither_ollama_nor_lm_studio_writes_is_said(env, monkeypatch):
    for key, value in env.items():
        if key.startswith("QUANTS_"):
            monkeypatch.setenv(key, value)
    (top,) = api.search(vram=24, ctx=32768, ubatch=1024, limit=1, offline=True).results
    assert top.config.ubatch == 1024 and "-ub 1024" in top.command
    for fmt in ("ollama", "lmstudio"):
        (made,) = emit(fmt, [top])
        assert "-ub 1024 (physical batch) is not written" in made.notes
    (swap,) = emit("llama-swap", [top])
    assert swap.notes == () and "-ub 1024" in swap.document["cmd"]
