"""Latency of ``lethe hook prompt`` as Claude Code runs it: the ``lethe`` executable (entry.py).

    flock /tmp/lethe-bench.lock python -m lethe_bench.hook_latency [--size 10000] [-n 60] [--out DIR] [--root DIR]

Builds (or reuses, ``--root``) a project of ``--size`` memories: the synthetic turns of
``bench/synthetic.py`` written as daily memory files (``## HH:MM:SS`` sections, one file
per day) and indexed with the real embedder. Then ``-n`` prompts (half synthetic
questions from the corpus's vocabulary, half the unrelated prompts of
``bench/data/prompts``), each in a fresh session, are piped to ``lethe hook prompt`` in
the project, and the wall time from process start to exit is taken:

* **warm**: a ``lethe serve`` is running (private ``LETHE_HOME``), so the executable
  hands the hook to it (``client.py``); a few prompts warm it first;
* **cold**: ``LETHE_SERVE=0``: every hook imports lethe, loads the model and opens the
  index itself.

Reports p50 / p95 / max per mode, how many prompts got context, and the service's own
time per command (from its log).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def build(root: Path, size: int, seed: int = 0) -> None:
    from lethe_sql import MemoryStore

    from . import synthetic

    mem = root / ".lethe" / "memory"
    mem.mkdir(parents=True, exist_ok=True)
    days: dict[str, list[str]] = {}
    for item in synthetic.generate(size, seed):
        day = f"{item.created_at:%Y-%m-%d}"
        days.setdefault(day, []).append(f"## {item.created_at:%H:%M:%S} {item.session}\n\n{item.text}\n")
    for day, parts in days.items():
        (mem / f"{day}.md").write_text(f"# {day}\n\n" + "\n".join(parts), encoding="utf-8")
    t0 = time.perf_counter()
    with MemoryStore(root) as store:
        report = store.index()
        n = store.con.execute("SELECT count(*) FROM entries").fetchone()[0]
    print(f"indexed {n} memories from {len(days)} files in {time.perf_counter() - t0:.0f} s ({report})", flush=True)


def prompts(n: int, seed: int = 0) -> list[str]:
    from . import synthetic
    from .hook_prompts import unrelated

    half = n // 2
    qs = [f"Can you check {q} and fix it" for q in synthetic.queries(half, seed)]
    other = unrelated()
    qs += [other[i % len(other)] for i in range(n - half)]
    return [q for pair in zip(qs[:half], qs[half:]) for q in pair] + qs[2 * half:]


def _pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    k = (len(xs) - 1) * p
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def time_hooks(root: Path, texts: list[str], env: dict, tag: str) -> dict:
    lethe = str(Path(sys.executable).parent / "lethe")
    ms, given = [], 0
    for i, text in enumerate(texts):
        payload = json.dumps({"session_id": f"{tag}-{i}-{time.time_ns()}", "transcript_path": "", "cwd": str(root),
                              "hook_event_name": "UserPromptSubmit", "prompt": text})
        t0 = time.perf_counter()
        p = subprocess.run([lethe, "hook", "prompt"], input=payload, env=env, cwd=root, capture_output=True, text=True)
        ms.append((time.perf_counter() - t0) * 1000)
        if p.returncode != 0 or p.stderr.strip():
            print(f"  {tag} prompt {i}: exit {p.returncode}: {p.stderr.strip()[:200]}", flush=True)
        given += bool(p.stdout.strip())
    return {"n": len(ms), "p50_ms": round(_pct(ms, 0.5), 1), "p95_ms": round(_pct(ms, 0.95), 1),
            "max_ms": round(max(ms), 1), "mean_ms": round(statistics.fmean(ms), 1), "with_context": given}


def time_turns(root: Path, texts: list[str], env: dict, pause: float) -> dict:
    """Each prompt after a write through the service (untimed), ``pause`` seconds later."""
    lethe = str(Path(sys.executable).parent / "lethe")
    runs = []
    for i, text in enumerate(texts):
        note = f"Turn note {time.time_ns()}: the agent finished step {i} of the benchmark."
        p = subprocess.run([lethe, "--root", str(root), "add", note], env=env, capture_output=True, text=True)
        if p.returncode != 0:
            print(f"  turns add {i}: exit {p.returncode}: {p.stderr.strip()[:200]}", flush=True)
        time.sleep(pause)
        runs.append(time_hooks(root, [text], env, f"turns-{i}"))
    ms = [r["p50_ms"] for r in runs]  # one prompt each: its time
    return {"n": len(ms), "p50_ms": round(_pct(ms, 0.5), 1), "p95_ms": round(_pct(ms, 0.95), 1),
            "max_ms": round(max(ms), 1), "mean_ms": round(statistics.fmean(ms), 1),
            "with_context": sum(r["with_context"] for r in runs)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="latency of `lethe hook prompt`, warm and cold")
    ap.add_argument("--size", type=int, default=10_000)
    ap.add_argument("-n", type=int, default=60, help="prompts per mode")
    ap.add_argument("--root", type=Path, default=None, help="a project to use (built there when it has no index)")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--modes", default="warm,cold",
                    help="warm, cold, turns (warm, with a `lethe add` through the service before each prompt, "
                         "as the Stop hook's reindex writes between an agent's turns; untimed, then a pause)")
    ap.add_argument("--serve-env", action="append", default=[], metavar="KEY=VALUE",
                    help="an environment variable for the service and the hooks (e.g. LETHE_SERVE_READER_IDLE=0)")
    ap.add_argument("--pause", type=float, default=0.5, help="turns: seconds between the write and the prompt")
    args = ap.parse_args(argv)
    from .meta import machine, now_iso

    tmp = None
    root = args.root
    if root is None:
        tmp = tempfile.TemporaryDirectory(prefix="lethe-bench-hooklat-")
        root = Path(tmp.name) / "project"
    root = root.resolve()
    if not (root / ".lethe" / "index" / "lethe.duckdb").exists():
        build(root, args.size)
    texts = prompts(args.n)
    home = Path(tempfile.mkdtemp(prefix="lethe-hooklat-home-"))
    base = {k: v for k, v in os.environ.items() if not k.startswith("LETHE_")}
    base.update(kv.split("=", 1) for kv in args.serve_env)
    out = {"command": "python -m lethe_bench.hook_latency " + " ".join(argv if argv is not None else sys.argv[1:]),
           "size": args.size, "machine": machine(), "load_before": os.getloadavg(), "modes": {}}
    lethe = str(Path(sys.executable).parent / "lethe")
    for mode in args.modes.split(","):
        if mode in ("warm", "turns"):
            env = dict(base, LETHE_SERVE="1", LETHE_HOME=str(home))
            srv = subprocess.Popen([lethe, "serve"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            log = home / "run" / "serve.log"
            try:
                deadline = time.monotonic() + 120
                while time.monotonic() < deadline and not (log.exists() and "listening" in log.read_text()):
                    time.sleep(0.1)
                time_hooks(root, texts[:5], env, "warmup")
                if mode == "warm":
                    out["modes"][mode] = time_hooks(root, texts, env, "warm")
                else:
                    out["modes"][mode] = time_turns(root, texts, env, args.pause)
                served = [float(line.rsplit(" in ", 1)[1].split()[0]) for line in log.read_text().splitlines()
                          if "lethe hook -> " in line][5:]
                if served:
                    out["modes"][mode]["in_service_p50_ms"] = round(_pct(served, 0.5), 1)
                    out["modes"][mode]["in_service_p95_ms"] = round(_pct(served, 0.95), 1)
            finally:
                subprocess.run([lethe, "serve", "--stop"], env=env, capture_output=True, timeout=60)
                srv.wait(timeout=60)
        elif mode == "cold":
            env = dict(base, LETHE_SERVE="0", LETHE_HOME=str(home))
            out["modes"]["cold"] = time_hooks(root, texts, env, "cold")
        print(mode, out["modes"].get(mode), flush=True)
    out["load_after"] = os.getloadavg()
    out["finished"] = now_iso()
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "result.json").write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out, indent=1))
    if tmp is not None:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
