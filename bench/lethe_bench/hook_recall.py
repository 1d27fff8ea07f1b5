"""Abstain or inject: the prompt hook (``lethe hook prompt``) on the fixed prompt set.

    python -m lethe_bench.hook_recall [--out bench/results/hook-prompt] [--target 0.05]

Per project of the update dev set (``bench/data/updates``): its memories are written
as a user's folder and indexed; then every prompt of ``bench/data/prompts`` is searched
the way the hook searches (``hooks.recall``: read-only, late interaction, top
``PROMPT_TOP_K``; superseded memories left out; the per-prompt budget), in a fresh
session each:

* the project's *needed* prompts (``needed.json``: its static and current questions,
  phrased as requests to the agent): a **hit** when the memory the question needs is
  among what the hook injects;
* every *unrelated* prompt (``unrelated.txt``): an **inject** when the hook injects
  anything at all.

The abstain threshold is chosen on the tune projects (p01, p02, p04, p05, p07) for each
candidate score (the cosine of prompt and memory; the late-interaction MaxSim; the
blended final score): the lowest threshold whose inject rate on unrelated prompts is at
most ``--target``; then it is applied, unchanged, to the report projects (p03, p06, p08,
p09). Finally the real hook process (the ``lethe`` executable, through a warm ``lethe
serve``) runs every report prompt with the chosen score's threshold
(``LETHE_PROMPT_MIN_SCORE``), and its output is scored the same way, as a check that the
process does what the simulation says.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

TUNE = ("p01", "p02", "p04", "p05", "p07")
REPORT = ("p03", "p06", "p08", "p09")
#: the scores a threshold can be put on, per result
SCORES = {
    "cosine": lambda r: r["dense"],
    "maxsim": lambda r: r["maxsim"],
    "final": lambda r: r["final"],
}


def _collect(root: Path, project, prompts: list[tuple[str, str, str | None]], id_of: dict, log) -> list[dict]:
    """Each prompt's results as the hook sees them (top PROMPT_TOP_K, with their scores)."""
    from lethe_sql.agents import hooks
    from lethe_sql.settings import load_settings

    back = {v: k for k, v in id_of.items()}
    settings = load_settings(root)
    rows = []
    for kind, text, want in prompts:
        q = hooks.prompt_query(text)
        res = []
        if q is not None:
            out = hooks.recall(root, q, settings)
            for c in out.results:
                res.append({"eid": c.id, "bid": back.get(c.id, c.id), "dense": float(c.dense_score or 0.0),
                            "maxsim": float(c.judge_raw or 0.0), "final": float(c.judge_score or 0.0),
                            "superseded": c.superseded is not None,
                            "created_at": c.created_at, "text": c.text})
        rows.append({"project": project, "kind": kind, "prompt": text, "want": want, "results": res})
    return rows


def _given(row: dict, score, threshold: float, budget_tokens: int) -> list[str]:
    """The bench ids the hook would inject for ``row`` at ``threshold`` on ``score``."""
    from lethe_sql.agents import hooks

    hits = [SimpleNamespace(id=r["eid"], created_at=r["created_at"], text=r["text"], bid=r["bid"])
            for r in row["results"] if not r["superseded"] and score(r) >= threshold]
    _, ids = hooks.prompt_context(hits, set(), budget_tokens)
    by = {h.id: h.bid for h in hits}
    return [by[i] for i in ids]


def rates(rows: list[dict], score, threshold: float, budget_tokens: int) -> dict:
    need = [r for r in rows if r["kind"] == "needed"]
    unrel = [r for r in rows if r["kind"] == "unrelated"]
    hit = sum(1 for r in need if r["want"] in _given(r, score, threshold, budget_tokens))
    anyn = sum(1 for r in need if _given(r, score, threshold, budget_tokens))
    inj = sum(1 for r in unrel if _given(r, score, threshold, budget_tokens))
    return {"hit": round(hit / max(len(need), 1), 4), "needed_injected": round(anyn / max(len(need), 1), 4),
            "unrelated_inject": round(inj / max(len(unrel), 1), 4), "n_needed": len(need), "n_unrelated": len(unrel)}


def choose(rows: list[dict], score, target: float, budget_tokens: int) -> float:
    """The lowest threshold (over the observed scores) whose unrelated inject rate is at most ``target``."""
    cands = sorted({round(score(r), 4) for row in rows for r in row["results"]})
    best = None
    for t in reversed(cands):  # from the top down: the inject rate only grows as t falls
        if rates(rows, score, t, budget_tokens)["unrelated_inject"] <= target:
            best = t
        else:
            break
    return best if best is not None else (cands[-1] + 1e-4 if cands else 1.0)


def _ci(k: int, n: int) -> list[float]:
    """Wilson 95% interval of a rate k/n."""
    import math

    if n == 0:
        return [0.0, 0.0]
    z = 1.959964
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return [round(c - h, 4), round(c + h, 4)]


def _process_rates(roots: dict[str, Path], rows: list[dict], threshold: float, id_maps: dict, log) -> dict:
    """The same prompts through the real ``lethe hook prompt`` process, the service warm."""
    lethe = str(Path(sys.executable).parent / "lethe")
    home = Path(tempfile.mkdtemp(prefix="lethe-hook-home-"))
    env = dict(os.environ, LETHE_SERVE="1", LETHE_HOME=str(home), LETHE_PROMPT_MIN_SCORE=repr(threshold))
    srv = subprocess.Popen([lethe, "serve"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        sock = home / "run" / "serve.log"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not (sock.exists() and "listening" in sock.read_text()):
            time.sleep(0.1)
        time.sleep(2.0)  # the model warms after "listening"
        out = {"needed": [0, 0], "unrelated": [0, 0]}
        for n, row in enumerate(rows):
            root = roots[row["project"]]
            back = {v: k for k, v in id_maps[row["project"]].items()}
            payload = {"session_id": f"bench-{n}", "transcript_path": "", "cwd": str(root),
                       "hook_event_name": "UserPromptSubmit", "prompt": row["prompt"]}
            p = subprocess.run([lethe, "hook", "prompt"], input=json.dumps(payload), env=env, cwd=root,
                               capture_output=True, text=True, timeout=120)
            ids = []
            if p.stdout.strip():
                ctx = json.loads(p.stdout)["hookSpecificOutput"]["additionalContext"]
                ids = [back.get(line.rsplit("(id ", 1)[1].rstrip(")"), "?") for line in ctx.splitlines()[1:]]
            k = row["kind"]
            out[k][1] += 1
            if k == "needed":
                out[k][0] += row["want"] in ids
            else:
                out[k][0] += bool(ids)
    finally:
        subprocess.run([lethe, "serve", "--stop"], env=env, capture_output=True, timeout=60)
        srv.wait(timeout=60)
    return {"hit": round(out["needed"][0] / max(out["needed"][1], 1), 4), "n_needed": out["needed"][1],
            "unrelated_inject": round(out["unrelated"][0] / max(out["unrelated"][1], 1), 4),
            "n_unrelated": out["unrelated"][1]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=None, help="write result.json and report.md here")
    ap.add_argument("--target", type=float, default=0.05, help="largest inject rate on unrelated prompts (tune)")
    ap.add_argument("--no-process", action="store_true", help="skip the check through the hook process")
    ap.add_argument("--pool", type=int, default=None, help="the hook's pool (hooks.PROMPT_POOL) for this run")
    ap.add_argument("--judge", default=None, help="the hook's judge (hooks.PROMPT_JUDGE) for this run")
    args = ap.parse_args(argv)
    from lethe_sql.agents import hooks

    if args.pool:
        hooks.PROMPT_POOL = args.pool
    if args.judge:
        hooks.PROMPT_JUDGE = args.judge

    from lethe_sql import MemoryStore
    from lethe_sql.agents.hooks import context_budget
    from lethe_sql.settings import Settings

    from . import updates
    from .hook_prompts import load_needed, unrelated
    from .meta import machine, now_iso

    _, _, budget = context_budget(Settings())
    needed = load_needed()
    others = unrelated()
    projects = updates.load(Path(__file__).resolve().parent.parent / "data" / "updates")
    rows: list[dict] = []
    roots: dict[str, Path] = {}
    id_maps: dict[str, dict] = {}
    tmp = tempfile.TemporaryDirectory(prefix="lethe-bench-hook-")
    t0 = time.perf_counter()
    for p in projects:
        root = Path(tmp.name) / p.id
        updates.write_project(p, root)
        with MemoryStore(root) as store:
            store.index()
            id_maps[p.id] = updates._ids(store, p)
        roots[p.id] = root
        prompts = [("needed", r["prompt"], r["want"]) for r in needed if r["project"] == p.id]
        prompts += [("unrelated", t, None) for t in others]
        rows += _collect(root, p.id, prompts, id_maps[p.id], print)
        print(f"{p.id}: {sum(1 for x in prompts if x[0] == 'needed')} needed, {len(others)} unrelated "
              f"({time.perf_counter() - t0:.0f} s)", flush=True)
    tune = [r for r in rows if r["project"] in TUNE]
    report = [r for r in rows if r["project"] in REPORT]
    result = {"command": "python -m lethe_bench.hook_recall " + " ".join(argv if argv is not None else sys.argv[1:]),
              "target_unrelated_inject": args.target, "pool": hooks.PROMPT_POOL, "judge": hooks.PROMPT_JUDGE, "prompt_budget_tokens": budget,
              "n_needed": {"tune": sum(r["kind"] == "needed" for r in tune),
                           "report": sum(r["kind"] == "needed" for r in report)},
              "n_unrelated_prompts": len(others), "machine": machine(), "finished": None, "scores": {}}
    for name, score in SCORES.items():
        t = choose(tune, score, args.target, budget)
        tr, rr = rates(tune, score, t, budget), rates(report, score, t, budget)
        k_hit = round(rr["hit"] * rr["n_needed"])
        k_inj = round(rr["unrelated_inject"] * rr["n_unrelated"])
        rr["hit_ci95"], rr["unrelated_inject_ci95"] = _ci(k_hit, rr["n_needed"]), _ci(k_inj, rr["n_unrelated"])
        curve = {f"{x:.2f}": rates(report, score, x, budget) for x in
                 sorted({round(t + d, 2) for d in (-0.1, -0.05, 0.0, 0.05, 0.1)})} if name == "cosine" else None
        result["scores"][name] = {"threshold": t, "tune": tr, "report": rr, "no_threshold_report": rates(report, score, float("-inf"), budget)}
        if curve:
            result["scores"][name]["report_around_threshold"] = curve
        print(f"{name}: threshold {t}: tune {tr}; report {rr}", flush=True)
    from lethe_sql.agents.hooks import prompt_score  # noqa: F401  (the hook's score: the cosine)

    d = Settings().prompt_min_score
    result["default_threshold"] = {"prompt_min_score": d, "tune": rates(tune, SCORES["cosine"], d, budget),
                                   "report": rates(report, SCORES["cosine"], d, budget)}
    print(f"cosine at the default prompt_min_score {d}: {result['default_threshold']}", flush=True)
    if not args.no_process:
        t = d
        result["process_report"] = _process_rates(roots, report, t, id_maps, print)
        print(f"hook process on report projects at the default cosine >= {t}: {result['process_report']}", flush=True)
    result["finished"] = now_iso()
    tmp.cleanup()
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "result.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
