"""Measure llama.cpp decode speed (tokens/s) on synthetic real-size GGUFs: ground truth for
crawler/ranking/speed.py.

Decode speed does not depend on the weights' values, so zero-data files of real size (the
``tests/synth`` presets at their real dims, sparse on disk) decode as fast as the real models.

* ``build SRC BUILD``: as ``tools/measure_server.py build`` (CMake Release, CUDA sm_90, static),
  targets ``llama-bench`` and ``llama-server`` in one build.
* ``run BUILD OUT --until EPOCH``: work through jobs in order, skipping jobs already
  recorded in ``BUILD/done.txt`` (so a second call on the same machine resumes) and any job whose
  time estimate no longer fits before ``--until``. Two kinds of job:

  - ``bench``: ``llama-bench -p 0 -n 64 -r 2 -d DEPTHS`` (``-r 1`` from 128K; tg64 after a
    prefilled depth; llama-bench reports the mean and standard deviation of the repetitions) per
    file, cache type and ``--n-cpu-moe``; one JSON line per (file, depth) from llama-bench's own
    ``-o jsonl``.
  - ``mtp``: ``llama-server --spec-type draft-mtp --spec-draft-n-max K`` with synthetic acceptance
    (``--spec-synth-rates a,a^2,...``: benchmarking only; the server accepts draft token i with
    probability a^i unconditionally, so the acceptance is known), one ``/completion`` of
    ``n_predict`` tokens with ``ignore_eos`` (after a ``fill``-token prompt where the job has
    one: the depth); the row keeps the server's ``timings`` object
    (``predicted_per_second``, ``draft_n``, ``draft_n_accepted``).

  Every row is appended to ``OUT/speed.jsonl`` and ``BUILD/speed.jsonl``; every process's output
  goes to ``OUT/logs.tar.gz``.

Nothing here is imported by the library; tests read the fixture it produced
(tests/fixtures/llamacpp/speed-measurements.jsonl, provenance in PROVENANCE.md beside it).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

#: Short model names -> tests/synth preset (real dims).
PRESETS = {
    "llama8b": "llama",  # Meta-Llama-3-8B: 32 full-attention layers, dense
    "qwen36-27b": "qwen35",  # Qwen3.6-27B: 48 Gated-DeltaNet + 16 attention layers, MTP block
    "qwen36-35b-a3b": "qwen35moe",  # Qwen3.6-35B-A3B: 30 GDN + 10 attention, 256 experts, MTP
    "gemma3-12b": "gemma3",  # gemma-3-12b: 48 layers, 5 of 6 sliding-window (1024)
}
#: Recipes: tests/synth recipe functions, or "u:TYPE" for every quantizable tensor at TYPE.
UNIFORM = ("Q3_K", "Q4_0", "Q4_K", "IQ4_XS", "Q5_K", "Q6_K", "Q8_0")
MIX = {"llama8b": "q4_k_m_like", "qwen36-27b": "ud_q3_k_xl_like",
       "qwen36-35b-a3b": "q4_k_m_like", "gemma3-12b": "q4_k_m_like"}  # fmt: skip


def model_path(models: Path, name: str, recipe: str) -> Path:
    """Write (once) and return the file of ``name`` quantized with ``recipe``."""
    from tests import synth

    models.mkdir(parents=True, exist_ok=True)
    path = models / f"{name}--{recipe.replace(':', '-')}.gguf"
    if not path.exists():
        rec = synth.uniform(recipe[2:]) if recipe.startswith("u:") else getattr(synth, recipe)()
        synth.write_gguf(path, synth.preset(PRESETS[name], "real"), rec)
    return path


def jobs() -> list[dict[str, Any]]:
    """Every job, most important first; ``est`` is a generous time estimate in seconds."""
    out: list[dict[str, Any]] = []

    def bench(model: str, recipe: str, depths: list[int], ck: str = "f16", est: float = 20,
              ncmoe: int = 0, tag: str = "") -> None:  # fmt: skip
        out.append({"kind": "bench", "model": model, "recipe": recipe, "depths": depths,
                    "ctk": ck, "ctv": ck, "ncmoe": ncmoe, "est": est, "tag": tag})  # fmt: skip

    def mtp(model: str, recipe: str, k: int, a: float | None, ctx: int = 8192, ck: str = "f16",
            est: float = 30, tag: str = "", fill: int = 0) -> None:  # fmt: skip
        job = {"kind": "mtp", "model": model, "recipe": recipe, "k": k, "alpha": a,
               "ctx": ctx, "ctk": ck, "ctv": ck, "est": est, "tag": tag}  # fmt: skip
        out.append({**job, "fill": fill} if fill else job)

    # A. empty context, every quant type and the realistic mix, f16 cache
    for m in PRESETS:
        for r in (MIX[m], *(f"u:{t}" for t in UNIFORM)):
            bench(m, r, [0], est=12)
    # B. experts in host memory
    bench("qwen36-35b-a3b", "q4_k_m_like", [0], ncmoe=99, est=25)
    bench("qwen36-35b-a3b", "q4_k_m_like", [0], ncmoe=20, est=20)
    bench("qwen36-35b-a3b", "u:Q8_0", [0], ncmoe=99, est=30)
    # F. MTP through llama-server: alpha 0 and 1 separate draft and verify cost; others check
    mtp("qwen36-27b", "ud_q3_k_xl_like", 0, None)
    for k in (1, 2, 3, 4, 5):
        mtp("qwen36-27b", "ud_q3_k_xl_like", k, 0.0)
        mtp("qwen36-27b", "ud_q3_k_xl_like", k, 1.0)
    mtp("qwen36-27b", "ud_q3_k_xl_like", 3, 0.789)
    mtp("qwen36-27b", "ud_q3_k_xl_like", 2, 0.6)
    mtp("qwen36-27b", "ud_q3_k_xl_like", 5, 0.85)
    mtp("qwen36-35b-a3b", "q4_k_m_like", 0, None)
    mtp("qwen36-35b-a3b", "q4_k_m_like", 3, 0.0)
    mtp("qwen36-35b-a3b", "q4_k_m_like", 3, 1.0)
    mtp("qwen36-35b-a3b", "q4_k_m_like", 3, 0.789)
    mtp("qwen36-35b-a3b", "q4_k_m_like", 1, 0.7)
    # the seed's setup: 262K context, q4_0 cache, empty context, MTP at quants' acceptance
    mtp("qwen36-27b", "ud_q3_k_xl_like", 0, None, ctx=262144, ck="q4_0", tag="seed")
    mtp("qwen36-27b", "ud_q3_k_xl_like", 3, 0.789, ctx=262144, ck="q4_0", tag="seed")
    # C. depth: 8K and 32K per cache type
    for m in PRESETS:
        for ck in ("f16", "q8_0", "q4_0"):
            bench(m, MIX[m], [0, 8192, 32768], ck=ck, est=45 if m == "qwen36-27b" else 30)
    # E. the seed's filled context
    bench("qwen36-27b", "ud_q3_k_xl_like", [262144], ck="q4_0", est=150, tag="seed")
    # D. 128K
    bench("llama8b", MIX["llama8b"], [131072], ck="f16", est=60)
    bench("gemma3-12b", MIX["gemma3-12b"], [131072], ck="q4_0", est=60)
    bench("qwen36-35b-a3b", MIX["qwen36-35b-a3b"], [131072], ck="q8_0", est=60)
    bench("qwen36-27b", MIX["qwen36-27b"], [131072], ck="f16", est=90)
    bench("llama8b", MIX["llama8b"], [131072], ck="q4_0", est=60)
    bench("llama8b", "u:Q8_0", [8192, 32768], ck="q8_0", est=30)
    bench("gemma3-12b", "u:Q8_0", [32768], ck="f16", est=30)
    # G. the seed's file at 128K with its own cache type (the depth term per cache type)
    bench("qwen36-27b", MIX["qwen36-27b"], [131072], ck="q4_0", est=90)
    bench("qwen36-27b", MIX["qwen36-27b"], [65536], ck="q4_0", est=45)
    # H. MTP at a filled context: the seed's setup with 64K / 128K tokens already in the cache
    for fill, est in ((65536, 50), (131072, 80)):
        mtp("qwen36-27b", MIX["qwen36-27b"], 0, None, ctx=262144, ck="q4_0", est=est, fill=fill)
        mtp("qwen36-27b", MIX["qwen36-27b"], 3, 0.789, ctx=262144, ck="q4_0", est=est, fill=fill)
    # I. the draft and verify costs at depth apart from acceptance: acceptance 0 and 1 at 64K
    for a in (0.0, 1.0):
        mtp("qwen36-27b", MIX["qwen36-27b"], 3, a, ctx=262144, ck="q4_0", est=50, fill=65536)
    # J. the seed's context filled to its end (258,048 tokens and 256 to decode)
    for k, a in ((0, None), (3, 0.789)):
        mtp("qwen36-27b", MIX["qwen36-27b"], k, a, ctx=262144, ck="q4_0", est=200, fill=258048)
    # K. the draft cost at 128K apart from acceptance (acceptance 0)
    mtp("qwen36-27b", MIX["qwen36-27b"], 3, 0.0, ctx=262144, ck="q4_0", est=80, fill=131072)
    # L. the draft and verify costs at 128K and at the full context apart from acceptance
    mtp("qwen36-27b", MIX["qwen36-27b"], 3, 1.0, ctx=262144, ck="q4_0", est=80, fill=131072)
    for a in (0.0, 1.0):
        mtp("qwen36-27b", MIX["qwen36-27b"], 3, a, ctx=262144, ck="q4_0", est=200, fill=258048)
    for i, j in enumerate(out):
        j["id"] = i
    return out


def _key(job: dict[str, Any]) -> str:
    return json.dumps({k: v for k, v in job.items() if k not in ("est", "id")}, sort_keys=True)


def run_bench(
    bin_dir: Path, job: dict[str, Any], model: Path, log: Path, limit: float
) -> list[Any]:
    """One llama-bench process; the JSON rows it printed before ``limit`` seconds.

    From a depth of 128K on, one repetition: each one prefills the whole depth again."""
    reps = 1 if max(job["depths"]) >= 131072 else 2
    args = [
        str(bin_dir / "llama-bench"), "-m", str(model), "-p", "0", "-n", "64", "-r", str(reps),
        "-d", ",".join(map(str, job["depths"])), "-ctk", job["ctk"], "-ctv", job["ctv"],
        "-fa", "1", "-ngl", "99", "-ub", "2048", "-b", "2048", "-o", "jsonl",
    ]  # fmt: skip
    if job["ncmoe"]:
        args += ["-ncmoe", str(job["ncmoe"])]
    with log.open("wb") as err, subprocess.Popen(args, stdout=subprocess.PIPE, stderr=err) as p:
        try:
            stdout, _ = p.communicate(timeout=limit)
        except subprocess.TimeoutExpired:
            p.kill()
            stdout, _ = p.communicate()
    rows = []
    for line in stdout.decode("utf-8", "replace").splitlines():
        if line.startswith("{"):
            with contextlib.suppress(ValueError):
                rows.append(json.loads(line))
    return [{"argv": ["llama-bench", *args[1:]], "rc": p.returncode, "bench": r} for r in rows] or [
        {"argv": ["llama-bench", *args[1:]], "rc": p.returncode, "bench": None}
    ]


def _http(url: str, body: dict[str, Any] | None = None, timeout: float = 5.0) -> tuple[int, str]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace")
    except (urllib.error.URLError, OSError) as e:
        return 0, str(e)


def server_argv(bin_dir: Path, job: dict[str, Any], model: Path, port: int) -> list[str]:
    """llama-server's command line (common/arg.cpp at 0c1e57098 for every flag)."""
    args = [
        str(bin_dir / "llama-server"), "-m", str(model), "--host", "127.0.0.1", "--port",
        str(port), "-c", str(job["ctx"]), "-ctk", job["ctk"], "-ctv", job["ctv"], "-fa", "on",
        "-ngl", "all", "-np", "1", "--fit", "off", "--no-mmproj",
    ]  # fmt: skip
    k, a = job["k"], job["alpha"]
    if k:
        rates = ",".join(f"{a**i:.6g}" for i in range(1, k + 1))
        args += ["--spec-type", "draft-mtp", "--spec-draft-n-max", str(k)]
        args += ["--spec-synth-rates", rates]
    return args


def run_mtp(bin_dir: Path, job: dict[str, Any], model: Path, log: Path, limit: float) -> list[Any]:
    """One server start, a warm-up request and one timed /completion."""
    port = 18200 + job["id"]
    args = server_argv(bin_dir, job, model, port)
    row: dict[str, Any] = {"argv": ["llama-server", *args[1:]]}
    t0 = time.monotonic()
    with log.open("wb") as fh:
        proc = subprocess.Popen(args, stdout=fh, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        while time.monotonic() - t0 < limit and proc.poll() is None:
            if _http(base + "/health")[0] == 200:
                break
            time.sleep(0.25)
        row["load_s"] = round(time.monotonic() - t0, 2)
        body = {"prompt": "The quick brown fox jumps over the lazy dog.", "n_predict": 32,
                "ignore_eos": True, "cache_prompt": False, "temperature": 0.0}  # fmt: skip
        _http(base + "/completion", body, timeout=max(5.0, limit - (time.monotonic() - t0)))
        body["n_predict"] = 256
        if job.get("fill"):  # the depth: one token id repeated (the weights are zeros)
            body["prompt"] = [1000] * job["fill"]
        st, text = _http(
            base + "/completion", body, timeout=max(5.0, limit - (time.monotonic() - t0))
        )
        row["status"] = st
        if st == 200:
            row["timings"] = json.loads(text).get("timings")
        else:
            row["error"] = text[:400]
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    row["rc"] = proc.returncode
    return [row]


def build(src: Path, build_dir: Path) -> None:
    """CMake + Ninja, CUDA sm_90, static: llama-bench and llama-server in one build."""
    subprocess.run(
        [
            "cmake", "-S", str(src), "-B", str(build_dir), "-G", "Ninja",
            "-DCMAKE_BUILD_TYPE=Release", "-DGGML_CUDA=ON", "-DCMAKE_CUDA_ARCHITECTURES=90-real",
            "-DGGML_NATIVE=OFF", "-DBUILD_SHARED_LIBS=OFF", "-DLLAMA_CURL=OFF",
            "-DLLAMA_OPENSSL=OFF", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF",
            "-DLLAMA_BUILD_APP=OFF", "-DLLAMA_BUILD_SERVER=ON", "-DLLAMA_BUILD_TOOLS=ON",
            "-DLLAMA_BUILD_UI=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF", "-DGGML_CUDA_NCCL=OFF",
            "-DGGML_CUDA_COMPRESSION_MODE=none",
        ],
        check=True,
    )  # fmt: skip
    jobs_n = str(os.cpu_count() or 4)
    subprocess.run(
        ["cmake", "--build", str(build_dir), "--target", "llama-server", "llama-bench", "-j",
         jobs_n],
        check=True,
    )  # fmt: skip


def run(
    build_dir: Path, out: Path, models: Path, until: float, only: list[int] | None = None
) -> None:
    """Work through jobs (or the ids ``only``, in that order) until ``until``."""
    out.mkdir(parents=True, exist_ok=True)
    logs = build_dir / "logs"
    logs.mkdir(exist_ok=True)
    done_file = build_dir / "done.txt"
    done = set(done_file.read_text().splitlines()) if done_file.exists() else set()
    smi = subprocess.run(
        ["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.max.mem",
         "--format=csv,noheader"], capture_output=True, text=True, check=False,
    )  # fmt: skip
    header = {"header": True, "gpu": smi.stdout.strip(), "cpus": os.cpu_count(),
              "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}  # fmt: skip
    bin_dir = build_dir / "bin"
    with (out / "speed.jsonl").open("a") as fo, (build_dir / "speed.jsonl").open("a") as fb:
        for f in (fo, fb):
            f.write(json.dumps(header) + "\n")
        todo = jobs()
        if only is not None:
            todo = [todo[i] for i in only]
        for job in todo:
            key = _key(job)
            if key in done:
                continue
            left = until - time.time()
            if left < job["est"]:
                print(f"skip (time) {job['id']}", file=sys.stderr)
                continue
            t0 = time.monotonic()
            model = model_path(models, job["model"], job["recipe"])
            log = logs / f"{job['id']:03d}-{job['kind']}-{job['model']}.log"
            runner = run_bench if job["kind"] == "bench" else run_mtp
            rows = runner(bin_dir, job, model, log, min(left - 5, 2.5 * job["est"] + 30))
            for row in rows:
                line = json.dumps({"job": {k: v for k, v in job.items() if k != "est"}, **row})
                fo.write(line + "\n")
                fb.write(line + "\n")
            fo.flush()
            fb.flush()
            with done_file.open("a") as d:
                d.write(key + "\n")
            summary = [
                round(r["bench"]["avg_ts"], 1) if r.get("bench") else
                (r.get("timings") or {}).get("predicted_per_second") for r in rows
            ]  # fmt: skip
            print(json.dumps({"id": job["id"], "m": job["model"], "r": job["recipe"],
                              "k": job.get("k"), "a": job.get("alpha"), "ck": job["ctk"],
                              "d": job.get("depths"), "nc": job.get("ncmoe"), "tok_s": summary,
                              "s": round(time.monotonic() - t0, 1)}), flush=True)  # fmt: skip
    with tarfile.open(out / "logs.tar.gz", "w:gz") as tar:
        tar.add(logs, arcname="logs")


def fixture(passes: list[Path], out: Path) -> None:
    """Raw ``speed.jsonl`` files (one per call, in order) -> the compact fixture: one line per
    measured row, keyed by file (model, recipe), flags, depth and pass."""
    with out.open("w") as fo:
        for n, path in enumerate(passes, 1):
            for line in path.read_text().splitlines():
                raw = json.loads(line)
                if raw.get("header"):
                    continue
                job = raw["job"]
                row: dict[str, Any] = {
                    "pass": n, "job": job["id"], "kind": job["kind"], "model": job["model"],
                    "recipe": job["recipe"], "ctk": job["ctk"], "ctv": job["ctv"],
                }  # fmt: skip
                if job["kind"] == "bench":
                    b = raw.get("bench")
                    if not b:
                        continue
                    row.update(depth=b["n_depth"], ncmoe=b["n_cpu_moe"], n_gen=b["n_gen"],
                               tok_s=round(b["avg_ts"], 3), stddev=round(b["stddev_ts"], 3),
                               model_size=b["model_size"])  # fmt: skip
                else:
                    t = raw.get("timings")
                    if not t:
                        continue
                    depth = t["prompt_n"] if job.get("fill") else 0
                    row.update(depth=depth, ctx=job["ctx"], k=job["k"], alpha=job["alpha"],
                               tok_s=round(t["predicted_per_second"], 3),
                               predicted_n=t["predicted_n"], draft_n=t.get("draft_n", 0),
                               draft_n_accepted=t.get("draft_n_accepted", 0))  # fmt: skip
                row["argv"] = [Path(a).name if a.startswith("/") else a for a in raw["argv"]]
                fo.write(json.dumps(row) + "\n")


def main() -> None:
    """CLI: ``build SRC BUILD`` | ``run BUILD OUT --until EPOCH`` | ``list``."""
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("src", type=Path)
    b.add_argument("build_dir", type=Path)
    r = sub.add_parser("run")
    r.add_argument("build_dir", type=Path)
    r.add_argument("out", type=Path)
    r.add_argument("--models", type=Path, default=Path("/tmp/models"))
    r.add_argument("--until", type=float, required=True)
    r.add_argument("--only", help="comma-separated job ids, run in this order")
    sub.add_parser("list")
    f = sub.add_parser("fixture", help="raw speed.jsonl files (in call order) -> fixture")
    f.add_argument("out", type=Path)
    f.add_argument("passes", type=Path, nargs="+")
    a = p.parse_args()
    if a.cmd == "build":
        build(a.src, a.build_dir)
    elif a.cmd == "run":
        run(
            a.build_dir,
            a.out,
            a.models,
            a.until,
            [int(x) for x in a.only.split(",")] if a.only else None,
        )
    elif a.cmd == "fixture":
        fixture(a.passes, a.out)
    else:
        total = 0.0
        for j in jobs():
            total += j["est"]
            print(j["id"], j["kind"], j["model"], j["recipe"], j.get("depths"), j.get("k"),
                  j.get("alpha"), j["ctk"], j["est"], round(total))  # fmt: skip


if __name__ == "__main__":
    main()
