"""Run the llama-server commands quants prints, exactly as printed, on real-size files.

The memory fixtures ran llama-server with the measuring tool's own arguments. This runs the
emitted line itself: a Hub emulator serves real-size, zero-data copies of the test world's
repos (``tests/fixtures/world.py`` at the presets' real dims, sparse on disk), the real
``quants crawl`` reads their headers, and four reference searches print their top results.

* ``plan OUT.json`` (here): crawl the launch world, run the four searches (``--json``), keep
  the top 5 results of each: query, rank, the printed command, the estimate.
* ``run SERVER PLAN OUT`` (on the GPU machine, after ``tools/measure_server.py build``): per
  planned row write the quant's file(s), start the printed command with ``-hf REPO:QUANT``
  replaced by ``-m FILE`` (nothing else changed, so llama-server's default host and port),
  wait for ``/health``, ask one 16-token ``/completion`` and read the device memory the process
  added (nvidia-smi, as tools/measure_server.py does). One JSON line per row in
  ``OUT/launch.jsonl``, every server log in ``OUT/launch-logs.tar.gz``.

Nothing here is imported by the library; tests/e2e/test_launch_proof.py reads the fixture it
produced (tests/fixtures/llamacpp/launch.jsonl, provenance beside it).
"""

from __future__ import annotations

import argparse
import json
import shlex
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

#: The four reference searches: the seed's question, a MoE with its experts in host memory, a
#: partial offload, a vision model. Options as a user types them.
# fmt: off
QUERIES: dict[str, list[str]] = {
    "seed": ["qwen3.6 27b", "--vram", "24", "--ctx", "262144"],
    "moe-experts-cpu": [
        "qwen3 30b a3b", "--vram", "8", "--ram", "64", "--tier", "experts_cpu", "--ctx", "32768"
    ],
    "partial": [
        "qwen3.6 27b", "--vram", "12", "--ram", "64", "--tier", "partial", "--ctx", "65536"
    ],
    "vision": ["gemma 3 12b", "--vram", "12", "--vision", "--ctx", "32768"],
}
# fmt: on
TOP = 5
#: The launch world's models: tests/synth presets whose real dims loaded in llama-server before
#: (tests/fixtures/llamacpp/PROVENANCE.md).
MODELS = ("qwen35", "qwen3moe", "gemma3")


def launch_world() -> tuple[Any, ...]:
    """WORLD's and REAL_WORLD's repos of MODELS at real size; Gemma 3's projector real-size."""
    from measure_server import gemma3_mmproj_layout

    import tests.synth as synth
    from tests.fixtures import world as w

    class RealGemmaProjector(w.Projector):
        def build(self, into: Path) -> list[Path]:
            return [Path(synth.write_layout(into / Path(self.path).name, gemma3_mmproj_layout()))]

    repos = []
    seen = set()
    for repo in (*w.REAL_WORLD, *w.WORLD):
        if repo.gguf_model not in MODELS or repo.repo_id in seen or repo.private or repo.gated:
            continue
        seen.add(repo.repo_id)
        files: list[Any] = []
        for f in repo.files:
            if isinstance(f, w.Quant):
                files.append(replace(f, size="real"))
            elif isinstance(f, w.Projector):
                if repo.gguf_model == "gemma3":
                    files.append(RealGemmaProjector(f.path))
            elif not isinstance(f, w.Sidecar):
                files.append(f)
        repos.append(replace(repo, files=tuple(files)))
    return tuple(repos)


def plan(out: Path) -> None:
    """Crawl the launch world into a fresh catalog and record the four searches' top rows."""
    from tests.cli import clean_env, run_quants
    from tests.fixtures.world import FileCache, populate
    from tests.hub_emulator import HubEmulator

    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        emulator = HubEmulator()
        populate(emulator.state, FileCache(tmp / "files"), launch_world())
        env = clean_env(tmp)
        db = f"sqlite:///{tmp / 'catalog.sqlite'}"
        with emulator:
            crawl = run_quants(
                "crawl", "--endpoint", emulator.endpoint, "--db", db, "--all", env=env, timeout=900
            )
        if crawl.returncode != 0:
            raise SystemExit(f"crawl failed: {crawl.stderr.strip()}")
        for name, argv in QUERIES.items():
            args = ["search", *argv, "--offline", "--db", db, "--limit", str(TOP), "--json"]
            res = run_quants(*args, env=env)
            if res.returncode not in (0, 3):
                raise SystemExit(f"{name}: {res.stderr.strip()}")
            doc = json.loads(res.stdout)
            search = ["quants", "search", *argv]
            rows += [{"query": name, "search": search, **r} for r in doc["results"][:TOP]]
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    for r in rows:
        print(r["query"], r["rank"], r["repo"], r["path"], r["total_bytes"], r["command"])


def _find_quant(repo: Any, path: str) -> Any:
    """The world's Quant that writes ``path`` (the file itself, a shard or a byte part)."""
    from tests.fixtures import world as w

    for f in repo.files:
        if not isinstance(f, w.Quant):
            continue
        name = Path(f.path).name
        if path == f.path or (f.split and path.startswith(Path(name).stem + "-")):
            return f
        if f.parts and path.startswith(name + ".part"):
            return f
    raise SystemExit(f"{repo.repo_id}: no quant writes {path}")


def _projector(repo: Any, into: Path) -> Path | None:
    from tests.fixtures import world as w

    for f in repo.files:
        if isinstance(f, w.Projector):
            return Path(f.build(into)[0])
    return None


def server_argv(printed: str, model: Path, projector: Path | None) -> tuple[list[str], list[str]]:
    """The printed command's llama-server step, split as a shell would, with ``-hf REPO:QUANT``
    (and ``-hff FILE``) replaced by ``-m FILE`` (and ``--mmproj FILE`` where ``-hf`` would have
    fetched the repo's projector). Returns (argv, the other steps as argvs)."""
    lex = shlex.shlex(printed, posix=True, punctuation_chars=True)
    lex.whitespace_split = True
    steps: list[list[str]] = [[]]
    for tok in lex:
        if tok == "&&":
            steps.append([])
        else:
            steps[-1].append(tok)
    argv = steps[-1]
    if "-hf" in argv:
        i = argv.index("-hf")
        n = 4 if argv[i + 2 : i + 3] == ["-hff"] else 2
        extra = ["--mmproj", str(projector)] if projector and "--no-mmproj" not in argv else []
        argv[i : i + n] = ["-m", str(model), *extra]
    return argv, steps[:-1]


def run(server: Path, plan_file: Path, out: Path, until: float, state: Path) -> None:
    """Start each planned row's printed command (``-hf`` -> ``-m``) and record what it did."""
    from measure_server import _post, gpu_mem, parse_log, rss, wait_or_kill, wait_ready

    rows = [json.loads(line) for line in plan_file.read_text().splitlines()]
    repos = {r.repo_id: r for r in launch_world()}
    out.mkdir(parents=True, exist_ok=True)
    state.mkdir(parents=True, exist_ok=True)
    logs = state / "logs"
    logs.mkdir(exist_ok=True)
    done = state / "done.txt"
    finished = set(done.read_text().split()) if done.exists() else set()
    version = subprocess.run(
        [str(server), "--version"], capture_output=True, text=True, check=False
    )
    header = {
        "header": True,
        "server_version": (version.stdout + version.stderr).strip(),
        "gpus": gpu_mem(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    (out / "launch.jsonl").write_text(json.dumps(header) + "\n")
    for row in rows:
        key = f"{row['query']}:{row['rank']}"
        if key in finished:
            continue
        if until - time.time() < 90:
            print(f"skip (time) {key}", file=sys.stderr)
            continue
        work = Path(tempfile.mkdtemp(prefix="launch-", dir="/tmp"))
        t0 = time.monotonic()
        repo = repos[row["repo"]]
        built = _find_quant(repo, row["path"]).build(work)
        model = work / Path(row["path"]).name
        hf_fetches = "-hf" in row["command"] and "--no-mmproj" not in row["command"]
        projector = _projector(repo, work) if hf_fetches else None
        argv, before = server_argv(row["command"], model, projector)
        rec: dict[str, Any] = {"query": row["query"], "rank": row["rank"], "repo": row["repo"],
                               "path": row["path"], "command": row["command"],
                               "files_written": [p.name for p in built],
                               "projector": projector.name if projector else None,
                               "argv": [Path(a).name if a.startswith("/") else a for a in argv],
                               "estimate": {k: row[k] for k in ("total_bytes", "host_bytes",
                                            "n_gpu_layers", "tier", "ctx", "cache")}}  # fmt: skip
        steps = []
        for step in before:
            if step[0] == "hf":  # the files are written here instead of downloaded
                steps.append({"argv": step, "ran": False})
                continue
            if ">" in step:
                i = step.index(">")
                with (work / step[i + 1]).open("wb") as fh:
                    r = subprocess.run(step[:i], cwd=work, stdout=fh, check=False)
            else:
                r = subprocess.run(step, cwd=work, check=False)
            steps.append({"argv": step, "ran": True, "rc": r.returncode})
        rec["steps"] = steps
        log = logs / f"{row['query']}-{row['rank']}.log"
        rec["gpu_before"] = gpu_mem()
        with log.open("wb") as fh:
            proc = subprocess.Popen([str(server), *argv[1:]], cwd=work, stdout=fh,
                                    stderr=subprocess.STDOUT)  # fmt: skip
        ready = wait_ready(proc, "http://127.0.0.1:8080", t0 + 400)
        rec["ready"] = ready
        rec["load_s"] = round(time.monotonic() - t0, 2)
        if ready:
            status, body = _post(
                "http://127.0.0.1:8080/completion",
                {"prompt": "The quick brown fox jumps over the lazy dog.", "n_predict": 16,
                 "ignore_eos": True, "cache_prompt": False},
            )  # fmt: skip
            rec["completion_status"] = status
            if status == 200:
                rec["predicted_n"] = json.loads(body).get("timings", {}).get("predicted_n")
            else:
                rec["completion_error"] = body[:500]
            rec["gpu_after_request"] = gpu_mem()
            rec["rss"] = rss(proc.pid)
            proc.send_signal(signal.SIGTERM)
        rec["killed"] = wait_or_kill(proc)
        rec["rc"] = proc.returncode
        rec["wall_s"] = round(time.monotonic() - t0, 2)
        text = log.read_text("utf-8", "replace")
        rec["log"] = parse_log(text)
        if not ready or rec.get("completion_status") != 200:
            rec["log_tail"] = text[-3000:]
        line = json.dumps(rec) + "\n"
        for f in (out / "launch.jsonl", state / "launch.jsonl"):
            with f.open("a") as fo:
                fo.write(line)
        with done.open("a") as fo:
            fo.write(key + "\n")
        subprocess.run(["rm", "-rf", str(work)], check=False)
        before_mib = {g["index"]: g["used_mib"] for g in rec["gpu_before"]}
        after = rec.get("gpu_after_request", [])
        used = [g["used_mib"] - before_mib.get(g["index"], 0) for g in after]
        print(json.dumps({"row": key, "ready": ready, "status": rec.get("completion_status"),
                          "used_mib": used, "est_mib": round(row["total_bytes"] / 2**20),
                          "s": rec["wall_s"]}), flush=True)  # fmt: skip
    with tarfile.open(out / "launch-logs.tar.gz", "w:gz") as tar:
        tar.add(logs, arcname="launch-logs")
    (out / "launch-all.jsonl").write_text((state / "launch.jsonl").read_text())


def main() -> None:
    """CLI: ``plan OUT.json`` | ``run SERVER PLAN OUT --until EPOCH [--state DIR]``."""
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    pl = sub.add_parser("plan")
    pl.add_argument("out", type=Path)
    r = sub.add_parser("run")
    r.add_argument("server", type=Path)
    r.add_argument("plan", type=Path)
    r.add_argument("out", type=Path)
    r.add_argument("--until", type=float, required=True)
    r.add_argument("--state", type=Path, default=Path("build/launch"))
    a = p.parse_args()
    if a.cmd == "plan":
        plan(a.out)
    else:
        run(a.server.resolve(), a.plan, a.out, a.until, a.state)


if __name__ == "__main__":
    main()
