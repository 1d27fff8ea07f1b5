"""`lethe bench` end to end through the CLI, on the smoke data: checks the report's shape, not its numbers.

LongMemEval's 16-question file (session-local: 16 in-memory stores of its 80-session
haystack) and one LoCoMo conversation (turn-global: one on-disk store of 419 turns),
configs bm25, dense and hybrid, the real model, an empty embedding cache.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
LETHE = Path(sys.executable).parent / "lethe"
LME = SHARED_DATA / "longmemeval-smoke" / "longmemeval_smoke16.json.gz"
LOCOMO = SHARED_DATA / "locomo" / "locomo-dev7.json.gz"

pytestmark = pytest.mark.skipif(
    not (LME.exists() and LOCOMO.exists()), reason=f"bench smoke data not found under {SHARED_DATA}"
)


def _bench(tmp_path, *args) -> dict:
    env = dict(os.environ, LETHE_CACHE=str(tmp_path / "cache"), HOME=str(tmp_path / "home"))
    cmd = [str(LETHE) if LETHE.exists() else sys.executable, *([] if LETHE.exists() else ["-m", "lethe_sql.cli"]),
           "bench", *args, "--config", "bm25", "--config", "dense", "--config", "hybrid",
           "--json", "--quiet", "--latency-queries", "5", "--no-pool-diagnostic", "--workdir", str(tmp_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def _check_shape(r: dict, protocol: str, metrics: set[str]) -> None:
    assert r["protocol"] == protocol and r["n_queries"] > 0
    assert set(r["configs"]) == {"bm25", "dense", "hybrid"}
    assert r["baseline"] == "hybrid" and set(r["vs_baseline"]) == {"bm25", "dense"}
    for name, c in r["configs"].items():
        for k in metrics:
            assert 0.0 <= c[k] <= 1.0, (name, k, c[k])
            lo, hi = c["ci95"][k] if k in c["ci95"] else (0, 1)
            assert 0.0 <= lo <= c[k] <= hi <= 1.0
        assert c["p50_ms"] > 0 and c["p95_ms"] >= c["p50_ms"]
        assert c["per_category"]
    for v in r["vs_baseline"].values():
        assert -1 <= v["delta"] <= 1 and len(v["ci95"]) == 2 and 0 < v["p"] <= 1
    assert r["data"]["sha256"] and r["package_version"] and r["machine"]["cpu_count"] and r["command"].startswith("lethe bench")
    assert r["index"]["entries"] > 0 and r["latency"]["peak_rss_mib"] > 0
    assert "per_query" not in r


@pytest.mark.slow
def test_bench_smoke_cli_end_to_end(tmp_path):
    lme = _bench(tmp_path, "longmemeval", str(LME), "--protocol", "session-local", "--no-cold")
    _check_shape(lme, "session-local", {"ndcg@10", "recall@10", "recall@30", "mrr", "recall_any@5"})
    assert lme["dataset"] == "longmemeval" and lme["index"]["stores"] == lme["n_queries"] == 16

    out = tmp_path / "report"
    loc = _bench(tmp_path, "locomo", str(LOCOMO), "--limit-conversations", "1", "--queries", "40", "--out", str(out))
    _check_shape(loc, "turn-global", {"ndcg@10", "recall@10", "recall@30", "mrr", "top1_exact", "top1_sibling"})
    assert loc["dataset"] == "locomo" and loc["n_queries"] == 40 and loc["index"]["items"] == 419
    assert loc["latency"]["cold_search"]["exit"] == 0
    assert abs(loc["bm25_check"]["independent_ndcg@10"] - loc["bm25_check"]["sql_ndcg@10"]) <= 0.02
    assert json.loads((out / "results.json").read_text())["configs"].keys() == loc["configs"].keys()
    assert "lethe bench locomo" in (out / "report.md").read_text()
