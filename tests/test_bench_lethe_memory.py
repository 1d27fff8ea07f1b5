"""``lethe bench lethe-memory``: its pure pieces, without lethe-memory installed (CI has none)."""

import importlib.util
import json

import numpy as np
import pytest

from lethe_bench import lethe_memory as LM


@pytest.fixture
def no_lethe_memory(monkeypatch):
    real = importlib.util.find_spec

    def find_spec(name, *a, **kw):
        if name.split(".")[0] in ("lethe", "faiss", "rank_bm25"):
            return None
        return real(name, *a, **kw)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


def test_missing_package_is_one_line_and_exit_2(no_lethe_memory, tmp_path):
    from typer.testing import CliRunner

    from lethe_sql.cli import app

    assert LM.missing() == LM.INSTALL_HINT
    assert LM.INSTALL_HINT == ("lethe bench lethe-memory needs: pip install --no-deps lethe-memory==0.6.0 "
                               "faiss-cpu rank-bm25 (its own `lethe` command replaces ours: then pip install "
                               "--no-deps -e . again)")
    data = tmp_path / "locomo.json"
    data.write_text("[]")
    r = CliRunner().invoke(app, ["bench", "lethe-memory", str(data), "--out", str(tmp_path / "out")])
    assert r.exit_code == 2
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert lines == [f"lethe: error: {LM.INSTALL_HINT}"]  # one line, no traceback
    assert not (tmp_path / "out").exists()
    with pytest.raises(Exception, match="pip install --no-deps lethe-memory==0.6.0"):
        LM.run(data)


def test_pick_conversations():
    ids = ["conv-26", "conv-30", "conv-41", "conv-42", "conv-43"]
    assert LM.pick_conversations(ids, None) == ids[: LM.DEFAULT_CONVERSATIONS]
    assert LM.pick_conversations(ids, "2") == ["conv-26", "conv-30"]
    assert LM.pick_conversations(ids, "conv-41, conv-26") == ["conv-26", "conv-41"]  # the file's order
    with pytest.raises(ValueError, match="no conversation conv-99"):
        LM.pick_conversations(ids, "conv-26,conv-99")
    assert LM.conversation_of("conv-26:D1:3") == "conv-26" and LM.conversation_of("conv-26:q4") == "conv-26"


def test_theirs_item_entry_maps_deduplicated_items():
    v = np.eye(4, dtype=np.float32)
    near = (v[2] + 0.05 * v[3]) / np.linalg.norm(v[2] + 0.05 * v[3])
    items = [("c:D1:1", "a: hi"), ("c:D1:2", "a: hi"), ("c:D1:3", "b: long text"), ("c:D1:4", "b: long text!")]
    vecs = np.stack([v[0], v[0], near, v[2]])
    # store after ingest: D1:2 dropped (same text); D1:3 replaced by the longer D1:4 (near-duplicate)
    live = {"c:D1:1": "a: hi", "c:D1:4": "b: long text!"}
    live_vecs = {"c:D1:1": v[0], "c:D1:4": v[2]}
    out, how = LM.theirs_item_entry(items, vecs, live, live_vecs)
    assert out == {"c:D1:1": "c:D1:1", "c:D1:2": "c:D1:1", "c:D1:3": "c:D1:4", "c:D1:4": "c:D1:4"}
    assert how == {"own": 2, "text": 1, "nearest": 1}
    assert LM.entry_relevance({"c:D1:2": 1, "c:D1:3": 1, "c:D9:9": 1}, out) == {"c:D1:1": 1, "c:D1:4": 1}


def test_encoder_adapter_shapes_and_prefill():
    class Fake:
        def __init__(self):
            self.calls = 0

        def encode(self, texts):
            self.calls += 1
            return np.stack([np.full(4, float(len(t))) for t in texts])

    fake = Fake()
    enc = LM.Encoder(fake, dim=4)
    one = enc.encode("abc", normalize_embeddings=True)
    assert one.shape == (4,) and abs(float(np.linalg.norm(one)) - 1) < 1e-6
    assert enc.encode(["a", "bb"]).shape == (2, 4) and enc.get_embedding_dimension() == 4
    enc.prefill = {"x": np.ones(4, np.float32) / 2}
    calls = fake.calls
    enc.encode("x")
    assert fake.calls == calls  # answered from the prefill
    enc.prefill = None
    enc.encode("x")
    assert fake.calls == calls + 1


def test_summary_and_report_shape():
    lat = {n: [float(i + k) for i in range(20)] for k, n in enumerate(LM.OURS + LM.THEIRS, start=1)}
    rng = np.random.default_rng(0)
    quality = {n: [{"ndcg@10": float(x), "recall@10": float(x), "mrr@10": float(x)} for x in rng.random(20)]
               for n in lat}
    s = LM.summarize(lat, quality, seed=0)
    assert set(s["sides"]) == set(lat)
    assert s["sides"]["lm"]["side"] == "lethe-memory" and s["sides"]["default"]["side"] == "lethe-sql"
    assert s["sides"]["default"]["n"] == 20 and "ci95" in s["sides"]["default"]
    assert s["ratio_p50"]["default / lm"] == round(s["sides"]["default"]["p50_ms"] / s["sides"]["lm"]["p50_ms"], 2)
    assert set(s["paired_ndcg"]) == {f"{a} / {b}" for a, b in LM.PAIRS}
    result = dict(s, conversations=["conv-26"], n_queries=20, warmup=5, data={"path": "x.json", "sha256": "00"},
                  index={"items": 3, "ours_entries": 3, "theirs_entries": 3}, versions={"lethe-memory": "0.6.0"},
                  machine={"processor": "cpu", "cpu_count": 2, "load_avg_1_5_15": [3.0, 3.0, 3.0]},
                  load_avg_start=[3.0, 3.0, 3.0], shared_machine=True, notes=["a note"])
    md = LM.markdown(result, "lethe bench lethe-memory x.json")
    assert "`lethe bench lethe-memory x.json`" in md and "| default / lm |" in md
    assert "shared with other work" in md and "* a note" in md
    json.dumps(result)  # what results.json holds serialises
