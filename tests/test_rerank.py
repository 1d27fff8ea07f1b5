"""The cross-encoder, the ``rerank`` UDF, reranker resolution, ``lethe models`` and ``pull``.

No test touches the network. The cross-encoder is a tiny ONNX model built here,
of the same signature as ms-marco-MiniLM-L-6-v2 (``input_ids``,
``attention_mask``, ``token_type_ids`` -> ``logits`` [batch, 1]), run by the real
onnxruntime code path with the real MiniLM ``tokenizer.json``. Its logit is a
known function of the tokens, recomputed independently in numpy:

    logit = #{(i, j): token i in the query segment (type 0, [CLS] and [SEP] included),
                      token j in the passage segment (type 1), ids equal}
            + sum over passage-segment tokens j of weight[ids[j]]

so it rewards lexical overlap with the query and sees exactly what the pair
encoding (and its truncation) fed it. Downloads come from an ``http.server``
on 127.0.0.1 in a thread.
"""

from __future__ import annotations

import functools
import http.server
import json
import shutil
import socket
import subprocess
import threading
from pathlib import Path

import numpy as np
import pytest

from conftest import BIN, write

LETHE = str(BIN / "lethe")
REPO_PATH = "cross-encoder/ms-marco-MiniLM-L-6-v2"


# --- the tiny cross-encoder ------------------------------------------------------------------


@pytest.fixture(scope="session")
def tokenizer_json() -> Path:
    from lethe_sql.udfs.models import resolve_embedder

    return resolve_embedder().tokenizer_path


def _vocab_size(tokenizer_json: Path) -> int:
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(tokenizer_json)).get_vocab_size()


def build_tiny_cross_encoder(path: Path, weights: np.ndarray, *, flat_output: bool = False) -> Path:
    """An ONNX cross-encoder whose logit is overlap(query, passage) + sum of passage-token weights."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    nodes = [
        helper.make_node("Cast", ["attention_mask"], ["maskf"], to=TensorProto.FLOAT),
        helper.make_node("Cast", ["token_type_ids"], ["typef"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["maskf", "typef"], ["pmask"]),  # passage segment
        helper.make_node("Sub", ["maskf", "pmask"], ["qmask"]),  # query segment
        helper.make_node("Gather", ["weight", "input_ids"], ["w"]),
        helper.make_node("Mul", ["w", "pmask"], ["wp"]),
        helper.make_node("ReduceSum", ["wp", "ax1"], ["wsum"], keepdims=1),  # [b, 1]
        helper.make_node("Unsqueeze", ["input_ids", "ax2"], ["ids_col"]),  # [b, t, 1]
        helper.make_node("Unsqueeze", ["input_ids", "ax1"], ["ids_row"]),  # [b, 1, t]
        helper.make_node("Equal", ["ids_col", "ids_row"], ["eq"]),
        helper.make_node("Cast", ["eq"], ["eqf"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["qmask", "ax2"], ["qm"]),
        helper.make_node("Unsqueeze", ["pmask", "ax1"], ["pm"]),
        helper.make_node("Mul", ["eqf", "qm"], ["eq_q"]),
        helper.make_node("Mul", ["eq_q", "pm"], ["eq_qp"]),
        helper.make_node("ReduceSum", ["eq_qp", "ax12"], ["overlap"], keepdims=0),  # [b]
        helper.make_node("Unsqueeze", ["overlap", "ax1"], ["overlap_col"]),  # [b, 1]
        helper.make_node("Add", ["overlap_col", "wsum"], ["logits2d"]),
    ]
    out_name = "logits2d"
    if flat_output:
        nodes.append(helper.make_node("Squeeze", ["logits2d", "ax1"], ["logits"]))
        out_name = "logits"
    ints = lambda name, v: numpy_helper.from_array(np.array(v, dtype=np.int64), name)  # noqa: E731
    graph = helper.make_graph(
        nodes,
        "tiny_cross_encoder",
        [
            helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "tokens"])
            for n in ("input_ids", "attention_mask", "token_type_ids")
        ],
        [helper.make_tensor_value_info(out_name, TensorProto.FLOAT, ["batch"] if flat_output else ["batch", 1])],
        [
            numpy_helper.from_array(weights.astype(np.float32), "weight"),
            ints("ax1", [1]),
            ints("ax2", [2]),
            ints("ax12", [1, 2]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path


@pytest.fixture(scope="session")
def weights(tokenizer_json) -> np.ndarray:
    return np.random.default_rng(7).normal(0.0, 0.3, _vocab_size(tokenizer_json)).astype(np.float32)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, tokenizer_json, weights) -> Path:
    """A folder holding model.onnx + tokenizer.json, like the lethe cache folder."""
    d = tmp_path_factory.mktemp("tiny_reranker")
    build_tiny_cross_encoder(d / "model.onnx", weights)
    shutil.copy(tokenizer_json, d / "tokenizer.json")
    return d


@pytest.fixture(scope="session")
def tiny_source(tiny_model_dir):
    from lethe_sql.udfs.models import ModelSource, RERANK_MODEL_NAME

    return ModelSource(RERANK_MODEL_NAME, tiny_model_dir / "model.onnx", tiny_model_dir / "tokenizer.json", "test")


def reference_logit(tokenizer_json: Path, weights: np.ndarray, query: str, passage: str,
                    max_passage_tokens: int | None = None) -> float:
    """The tiny model's logit, computed in numpy from the tokenizer's own pair encoding."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer_json))
    tok.no_padding()
    tok.no_truncation()
    enc = tok.encode(query, passage)
    ids = np.array(enc.ids)
    types = np.array(enc.type_ids)
    q_ids = ids[types == 0]
    p_ids = ids[types == 1]  # passage word pieces, then the final [SEP]
    if max_passage_tokens is not None and len(p_ids) - 1 > max_passage_tokens:
        p_ids = np.concatenate([p_ids[:max_passage_tokens], p_ids[-1:]])
    overlap = (q_ids[:, None] == p_ids[None, :]).sum()
    return float(overlap + weights[p_ids].astype(np.float64).sum())


# --- CrossEncoder.score ----------------------------------------------------------------------

PASSAGES = [
    "Local postgres runs on port 5433; 5432 is the system one.",
    "Webhook retries: five attempts, exponential backoff from 2 s.",
    "The reconcile test is flaky because of timezones.",
    "",
    "postgres postgres postgres port port",
    "Deploys go through the staging cluster first, then production after a soak of one hour.",
]


def test_score_equals_the_known_function_of_the_pair_encoding(tiny_source, tokenizer_json, weights):
    from lethe_sql.udfs.rerank import CrossEncoder

    ce = CrossEncoder(tiny_source, batch_size=4)  # two batches, padded differently
    query = "which port does local postgres use?"
    got = ce.score(query, PASSAGES)
    assert got.dtype == np.float32 and got.shape == (len(PASSAGES),)
    want = [reference_logit(tokenizer_json, weights, query, p) for p in PASSAGES]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
    assert int(np.argmax(got)) == 4  # most overlap with the query
    assert ce.score(query, []).shape == (0,)
    assert ce.model_id == tiny_source.model_id


def test_flat_output_shape_is_accepted(tmp_path, tokenizer_json, weights, tiny_source):
    from lethe_sql.udfs.models import ModelSource
    from lethe_sql.udfs.rerank import CrossEncoder

    flat = build_tiny_cross_encoder(tmp_path / "flat.onnx", weights, flat_output=True)
    ce = CrossEncoder(ModelSource("flat", flat, tokenizer_json, "test"))
    np.testing.assert_allclose(ce.score("postgres port", PASSAGES), CrossEncoder(tiny_source).score("postgres port", PASSAGES),
                               rtol=1e-6)


def test_passage_is_truncated_to_max_passage_tokens(tiny_source, tokenizer_json, weights):
    from lethe_sql.udfs.rerank import CrossEncoder

    query = "postgres port"
    long_passage = " ".join(f"word{i} postgres port" for i in range(200))  # far more than 16 pieces
    short = CrossEncoder(tiny_source, max_passage_tokens=16)
    full = CrossEncoder(tiny_source, max_passage_tokens=2000, max_length=100_000)
    got = short.score(query, [long_passage, "postgres port"])
    want = reference_logit(tokenizer_json, weights, query, long_passage, max_passage_tokens=16)
    assert got[0] == pytest.approx(want, abs=1e-4)
    assert full.score(query, [long_passage])[0] == pytest.approx(
        reference_logit(tokenizer_json, weights, query, long_passage), abs=1e-3)
    assert full.score(query, [long_passage])[0] != pytest.approx(got[0], abs=1e-3)
    # a short passage is untouched by the cap
    assert got[1] == pytest.approx(reference_logit(tokenizer_json, weights, query, "postgres port"), abs=1e-4)

    enc = short._encode(query, [long_passage])[0]
    assert sum(enc.type_ids) == 16 + 1  # 16 passage pieces + the closing [SEP]
    assert enc.tokens[0] == "[CLS]" and enc.tokens[-1] == "[SEP]"


def test_overlong_query_is_cut_so_the_pair_fits(tiny_source):
    from lethe_sql.udfs.rerank import CrossEncoder

    ce = CrossEncoder(tiny_source, max_passage_tokens=16, max_length=40)
    q = ce._cut_query("postgres " * 100)
    enc = ce._encode(q, ["alpha " * 100])[0]
    assert len(enc.ids) <= 40 and sum(enc.type_ids) == 17
    assert np.isfinite(ce.score("postgres " * 100, ["alpha " * 100, "beta"])).all()


# --- the rerank UDF --------------------------------------------------------------------------


def _counting(source, **kw):
    from lethe_sql.udfs.rerank import CrossEncoder

    class Counting(CrossEncoder):
        calls: list[tuple[str, int]]

        def score(self, query, passages):
            self.calls.append((query, len(passages)))
            return super().score(query, passages)

    ce = Counting(source, **kw)
    ce.calls = []
    return ce


POOL = [f"note {i}: " + t for i, t in enumerate(
    ["postgres on port 5433", "webhook retries five times", "flaky reconcile test and timezones",
     "staging soak of one hour", "the port of the postgres replica", "redis cache eviction policy",
     "mongodb pool size is 50", "postgres vacuum runs nightly", "kafka consumer lag alert",
     "nginx timeout is 60 s"] * 3)]


def test_order_by_rerank_in_sql_end_to_end_one_model_call(tiny_source, tokenizer_json, weights):
    import lethe_sql
    from lethe_sql.udfs.rerank import LazyReranker, register_rerank

    ce = _counting(tiny_source)
    lazy = LazyReranker(lambda: ce)
    con = lethe_sql.connect()
    try:
        register_rerank(con, lazy)
        assert not lazy.loaded  # registering loads nothing
        con.executemany(
            "INSERT INTO entries (id, content, text) VALUES (?, ?, ?)",
            [[f"e{i:02d}", t, t] for i, t in enumerate(POOL)],
        )
        query = "which port is postgres on"
        rows = con.execute(
            "SELECT id, rerank(?, text) AS score FROM entries ORDER BY score DESC, id", [query]
        ).fetchall()
        assert len(rows) == 30 and lazy.loaded
        assert ce.calls == [(query, 30)]  # the whole pool in one model call

        want = {f"e{i:02d}": reference_logit(tokenizer_json, weights, query, t) for i, t in enumerate(POOL)}
        expected_order = sorted(want, key=lambda k: (-round(want[k], 4), k))
        assert [r[0] for r in rows] == expected_order
        for id_, score in rows:
            assert score == pytest.approx(want[id_], abs=1e-4)
        assert "postgres" in POOL[int(rows[0][0][1:])]
    finally:
        con.close()


def test_rerank_groups_a_chunk_by_query_and_passes_nulls(tiny_source):
    import lethe_sql
    from lethe_sql.udfs.rerank import register_rerank

    ce = _counting(tiny_source)
    con = lethe_sql.connect()
    try:
        register_rerank(con, ce)
        rows = con.execute(
            """
            SELECT q, p, rerank(q, p) AS s
            FROM (VALUES ('postgres port'), ('webhook retries'), (NULL)) qs(q),
                 (VALUES ('postgres on port 5433'), ('webhook retries five times'), (NULL)) ps(p)
            ORDER BY q, p
            """
        ).fetchall()
        assert sorted(ce.calls) == [("postgres port", 2), ("webhook retries", 2)]
        scored = {(q, p): s for q, p, s in rows}
        assert all(s is None for (q, p), s in scored.items() if q is None or p is None)
        assert all(s is not None for (q, p), s in scored.items() if q is not None and p is not None)
        assert scored[("postgres port", "postgres on port 5433")] > scored[("postgres port", "webhook retries five times")]
        assert scored[("webhook retries", "webhook retries five times")] > scored[("webhook retries", "postgres on port 5433")]

        assert con.execute("SELECT rerank('x', NULL), rerank(NULL, 'x')").fetchone() == (None, None)
        typ = con.execute("SELECT typeof(rerank('a', 'b'))").fetchone()[0]
        assert typ == "FLOAT"
    finally:
        con.close()


def test_lazy_reranker_with_nothing_installed_is_a_clear_error(tmp_path, monkeypatch):
    import duckdb
    import lethe_sql
    from lethe_sql.udfs.rerank import LazyReranker, register_rerank

    _isolate(monkeypatch, tmp_path)
    con = lethe_sql.connect()
    try:
        register_rerank(con, LazyReranker())
        assert con.execute("SELECT rerank('q', NULL)").fetchone() == (None,)  # no model needed
        with pytest.raises(duckdb.Error, match="no reranker installed"):
            con.execute("SELECT rerank('q', 'p')").fetchall()
    finally:
        con.close()


# --- resolution ------------------------------------------------------------------------------


def _isolate(monkeypatch, tmp_path) -> dict:
    """Point every place a reranker may live at empty temporary folders."""
    dirs = {"cache": tmp_path / "lethe-cache", "hf": tmp_path / "hf-home", "home": tmp_path / "home"}
    monkeypatch.delenv("LETHE_RERANK_MODEL", raising=False)
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    monkeypatch.setenv("LETHE_CACHE", str(dirs["cache"]))
    monkeypatch.setenv("HF_HOME", str(dirs["hf"]))
    monkeypatch.setenv("HOME", str(dirs["home"]))
    return dirs


def _fake_model(folder: Path, onnx_rel: str = "model.onnx") -> Path:
    write(folder / onnx_rel, b"not really onnx")
    write(folder / "tokenizer.json", "{}")
    return folder


def test_resolve_reranker_order(tmp_path, monkeypatch):
    from lethe_sql.udfs.models import RERANK_MODEL_NAME, resolve_reranker

    dirs = _isolate(monkeypatch, tmp_path)
    assert resolve_reranker() is None  # nothing installed: None, never an error

    snap = dirs["hf"] / "hub" / "models--cross-encoder--ms-marco-MiniLM-L-6-v2" / "snapshots" / "abc123"
    _fake_model(snap, "onnx/model.onnx")
    src = resolve_reranker()
    assert src.onnx_path == snap / "onnx" / "model.onnx" and "huggingface" in src.origin
    assert src.name == RERANK_MODEL_NAME

    cache = _fake_model(dirs["cache"] / "models" / RERANK_MODEL_NAME)
    src = resolve_reranker()
    assert src.onnx_path == cache / "model.onnx" and src.origin == "cache"

    env_dir = _fake_model(tmp_path / "mine", "onnx/model.onnx")
    monkeypatch.setenv("LETHE_RERANK_MODEL", str(env_dir))
    src = resolve_reranker()
    assert src.onnx_path == env_dir / "onnx" / "model.onnx" and "LETHE_RERANK_MODEL" in src.origin

    lone = _fake_model(tmp_path / "lone")
    assert resolve_reranker(lone / "model.onnx").onnx_path == lone / "model.onnx"  # explicit beats env
    assert resolve_reranker(str(lone)).tokenizer_path == lone / "tokenizer.json"


def test_hf_cache_prefers_the_snapshot_main_points_at(tmp_path, monkeypatch):
    from lethe_sql.udfs.models import resolve_reranker

    dirs = _isolate(monkeypatch, tmp_path)
    repo = dirs["hf"] / "hub" / "models--cross-encoder--ms-marco-MiniLM-L-6-v2"
    _fake_model(repo / "snapshots" / "old", "onnx/model.onnx")
    _fake_model(repo / "snapshots" / "new", "onnx/model.onnx")
    write(repo / "refs" / "main", "old\n")
    assert resolve_reranker().onnx_path.parent.parent.name == "old"
    (repo / "snapshots" / "partial" / "onnx").mkdir(parents=True)  # incomplete snapshots are skipped
    monkeypatch.setenv("HF_HUB_CACHE", str(dirs["hf"] / "hub"))
    assert resolve_reranker() is not None


def test_bad_explicit_reranker_path_raises(tmp_path, monkeypatch):
    from lethe_sql.udfs.models import ModelMissing, resolve_reranker

    _isolate(monkeypatch, tmp_path)
    with pytest.raises(ModelMissing, match="does not exist"):
        resolve_reranker(tmp_path / "nowhere")
    write(tmp_path / "half" / "model.onnx", b"x")
    with pytest.raises(ModelMissing, match="tokenizer.json"):
        resolve_reranker(tmp_path / "half")
    with pytest.raises(ModelMissing, match="no tokenizer.json beside it"):
        resolve_reranker(tmp_path / "half" / "model.onnx")
    monkeypatch.setenv("LETHE_RERANK_MODEL", str(tmp_path / "nowhere"))
    with pytest.raises(ModelMissing, match="LETHE_RERANK_MODEL"):
        resolve_reranker()


# --- pull, from a local http.server ----------------------------------------------------------


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # keep pytest output clean
        pass


@pytest.fixture()
def hf_server(tmp_path, tiny_model_dir):
    """A stand-in for huggingface.co on 127.0.0.1 serving the tiny model at the repo's paths."""
    root = tmp_path / "served"
    base = root / REPO_PATH / "resolve" / "main"
    (base / "onnx").mkdir(parents=True)
    shutil.copy(tiny_model_dir / "model.onnx", base / "onnx" / "model.onnx")
    shutil.copy(tiny_model_dir / "tokenizer.json", base / "tokenizer.json")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", base
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture()
def closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_pull_reranker_from_a_local_server(tmp_path, monkeypatch, hf_server, tiny_model_dir, tiny_source):
    from lethe_sql.udfs.models import pull_reranker, rerank_cache_dir, resolve_reranker
    from lethe_sql.udfs.rerank import CrossEncoder

    _isolate(monkeypatch, tmp_path)
    url, served = hf_server
    monkeypatch.setenv("LETHE_HF_ENDPOINT", url)
    seen = []
    src = pull_reranker(progress=lambda done, total: seen.append((done, total)))
    total = (served / "onnx" / "model.onnx").stat().st_size + (served / "tokenizer.json").stat().st_size
    assert seen and seen[-1] == (total, total)
    assert all(a[0] <= b[0] for a, b in zip(seen, seen[1:]))
    assert src.onnx_path == rerank_cache_dir() / "model.onnx" and src.origin == "cache"
    assert src.onnx_path.read_bytes() == (tiny_model_dir / "model.onnx").read_bytes()
    assert sorted(p.name for p in rerank_cache_dir().iterdir()) == ["model.onnx", "tokenizer.json"]  # no .part left
    assert resolve_reranker() == src
    np.testing.assert_allclose(CrossEncoder(src).score("postgres port", PASSAGES),
                               CrossEncoder(tiny_source).score("postgres port", PASSAGES))

    seen.clear()
    assert pull_reranker(progress=lambda *a: seen.append(a)) == src and seen == []  # installed: no download
    pull_reranker(progress=lambda *a: seen.append(a), force=True)
    assert seen


def test_pull_reranker_unreachable_is_one_clean_error(tmp_path, monkeypatch, closed_port):
    from lethe_sql.errors import LetheError
    from lethe_sql.udfs.models import ModelDownloadError, pull_reranker, rerank_cache_dir, resolve_reranker

    _isolate(monkeypatch, tmp_path)
    monkeypatch.setenv("LETHE_HF_ENDPOINT", f"http://127.0.0.1:{closed_port}")
    with pytest.raises(ModelDownloadError) as exc:
        pull_reranker()
    msg = str(exc.value)
    assert isinstance(exc.value, LetheError) and "\n" not in msg
    assert "cannot reach 127.0.0.1" in msg and "LETHE_RERANK_MODEL" in msg and str(rerank_cache_dir()) in msg
    assert resolve_reranker() is None


def test_pull_reranker_missing_file_leaves_nothing_behind(tmp_path, monkeypatch, hf_server):
    from lethe_sql.udfs.models import ModelDownloadError, pull_reranker, rerank_cache_dir, resolve_reranker

    _isolate(monkeypatch, tmp_path)
    url, served = hf_server
    (served / "onnx" / "model.onnx").unlink()  # tokenizer downloads, the model 404s
    monkeypatch.setenv("LETHE_HF_ENDPOINT", url)
    with pytest.raises(ModelDownloadError, match="HTTP 404"):
        pull_reranker()
    assert resolve_reranker() is None
    assert list(rerank_cache_dir().iterdir()) == []  # the finished tokenizer was not moved in alone


# --- the CLI ---------------------------------------------------------------------------------


@pytest.fixture()
def models_env(cli_env):
    env = dict(cli_env)
    for k in ("LETHE_RERANK_MODEL", "HF_HUB_CACHE", "HF_ENDPOINT", "LETHE_HF_ENDPOINT"):
        env.pop(k, None)
    env["HF_HOME"] = str(Path(env["HOME"]) / "hf")
    return env


def _lethe(args, env, check=True):
    p = subprocess.run([LETHE, *args], env=env, capture_output=True, text=True, timeout=300)
    if check and p.returncode != 0:
        raise AssertionError(f"lethe {args} exited {p.returncode}: {p.stderr}")
    return p


def test_lethe_models_json_lists_the_reranker(models_env, tiny_model_dir):
    rows = json.loads(_lethe(["models", "--json"], models_env).stdout)
    by_role = {r["role"]: r for r in rows}
    assert set(by_role) == {"embedder", "reranker"}
    assert by_role["embedder"]["installed"] is True and by_role["embedder"]["size"] > 0
    rr = by_role["reranker"]
    assert rr["installed"] is False and rr["name"] == "ms-marco-MiniLM-L-6-v2" and "lethe models pull" in rr["problem"]

    cache = Path(models_env["LETHE_CACHE"]) / "models" / "ms-marco-MiniLM-L-6-v2"
    shutil.copytree(tiny_model_dir, cache)
    rr = {r["role"]: r for r in json.loads(_lethe(["models", "--json"], models_env).stdout)}["reranker"]
    assert rr["installed"] is True and rr["origin"] == "cache"
    assert rr["path"] == str(cache / "model.onnx")
    assert rr["size"] == (cache / "model.onnx").stat().st_size + (cache / "tokenizer.json").stat().st_size

    text = _lethe(["models"], models_env).stdout
    assert "reranker" in text and "installed" in text and "NOT INSTALLED" not in text


def test_lethe_models_pull(models_env, hf_server, closed_port):
    url, _ = hf_server
    bad = _lethe(["models", "pull"], {**models_env, "LETHE_HF_ENDPOINT": f"http://127.0.0.1:{closed_port}"}, check=False)
    assert bad.returncode == 1 and "Traceback" not in bad.stderr
    assert bad.stderr.strip().splitlines() == [bad.stderr.strip()] and bad.stderr.startswith("lethe: error: ")
    assert "cannot reach" in bad.stderr

    env = {**models_env, "LETHE_HF_ENDPOINT": url}
    out = json.loads(_lethe(["models", "pull", "--json"], env).stdout)
    assert out["installed"] is True and out["downloaded"] is True and out["origin"] == "cache"
    again = json.loads(_lethe(["models", "pull", "--json"], env).stdout)
    assert again["downloaded"] is False
    assert "already installed" in _lethe(["models", "pull"], env).stdout
    assert json.loads(_lethe(["models", "pull", "--force", "--json"], env).stdout)["downloaded"] is True


# --- the cross-encoder as the search's judge: blended, not alone --------------------------


def test_cross_encoder_score_is_blended_with_the_cues(tmp_path, monkeypatch, tiny_model_dir, tokenizer_json, weights):
    """With a cross-encoder installed, the final order blends its logits with the first
    stage's context BM25 and the query's cues: a question naming a period ("in March
    2026") puts the memory dated then first, although the cross-encoder alone prefers
    the other one (more of the query's words)."""
    from lethe_sql import MemoryStore

    monkeypatch.setenv("LETHE_RERANK_MODEL", str(tiny_model_dir))
    root = tmp_path / "p"
    mem = root / ".lethe" / "memory"
    mem.mkdir(parents=True)
    old = "Deploys use the blue green script."
    new = "Shipped the invoice exporter to production."
    write(mem / "2026-01-10.md", f"# 2026-01-10\n\n## 10:00 Deploy\n\n{old}\n")
    write(mem / "2026-03-12.md", f"# 2026-03-12\n\n## 10:00 Release\n\n{new}\n")
    others = ["The office plants need water on Fridays.", "Lunch order: two pizzas and a salad.",
              "Renamed the wiki page about onboarding.", "The printer on floor two is out of toner."]
    write(mem / "2026-02-02.md", "# 2026-02-02\n\n" + "".join(f"## 1{i}:00 Note {i}\n\n{t}\n\n" for i, t in enumerate(others)))
    q = "what did we deploy in March 2026?"
    assert reference_logit(tokenizer_json, weights, q, old) > reference_logit(tokenizer_json, weights, q, new)
    with MemoryStore(root) as st:
        st.index()
        out = st.search_outcome(q, top_k=2, learn=False, judge="cross-encoder")
        assert out.judge == "cross-encoder"
        assert [c.text for c in out.results] == [new, old]
        alone = st.search_outcome(q, top_k=2, learn=False, judge="cross-encoder",
                                  settings=st.settings.with_(blend_bm25=0.0, blend_ctx=0.0, blend_date=0.0,
                                                             blend_time=0.0, blend_phrase=0.0, blend_ident=0.0))
        assert [c.text for c in alone.results] == [old, new]  # the cross-encoder's own order
        raw = {c.text: c.judge_raw for c in out.results}
        assert raw[old] == pytest.approx(reference_logit(tokenizer_json, weights, q, old), abs=1e-3)
