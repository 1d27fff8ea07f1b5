"""Offline lever study: dump per-query candidate features once, then score levers in numpy.

The defaults of the default search were chosen this way (bench/results/default-search.md):
build the store through the product (``MemoryStore.put_documents``), and for every
question take the union of the top ``--depth`` of BM25, context-field BM25 and cosine
(the SQL macros themselves), with each candidate's scores, MaxSim over its stored token
vectors, and the entry's session, position and date. ``python bench/lever_study/levers.py dump``
writes that to a pickle; the scripts in bench/lever_study/ evaluate a ranking rule on
a subset of questions (bench/lever_study/, see its README). Nothing here is used by the product,
and nothing here is installed: it needs the harness (``pip install -e ./bench``).

    python bench/lever_study/levers.py dump locomo ../shared/data/locomo/locomo-dev7.json.gz --out /tmp/dev7.pkl
"""

from __future__ import annotations

import argparse
import pickle
import sys
import tempfile
from pathlib import Path

import numpy as np


def _load(dataset: str, path: str):
    if dataset == "locomo":
        from lethe_bench.locomo import load

        return load(path)
    if dataset == "nfcorpus":
        from lethe_bench.beir import load

        return load(path)
    if dataset == "longmemeval":
        from lethe_bench.longmemeval import load

        return load(path)
    raise SystemExit(f"unknown data set {dataset}")


def dump(dataset: str, path: str, out: str, depth: int = 200) -> None:
    from lethe_sql import MemoryStore
    from lethe_sql.judges import LateInteractionJudge, encode_query
    from lethe_sql.search import clean_query

    from lethe_bench.runner import build_store, entry_relevance, make_embedder

    bench = _load(dataset, path)
    corpus = bench.corpora[0]
    emb = make_embedder(True, None, token_index=True)
    tmp = tempfile.mkdtemp(prefix="lethe-levers-")
    store = MemoryStore(Path(tmp) / "p", db_path=Path(tmp) / "s.duckdb", embedder=emb)
    built = build_store(store, corpus, f"bench/{dataset}")
    con = store.con
    ents = con.execute(
        "SELECT e.id, e.session_id, coalesce(o.position, e.position), epoch(e.created_at), e.embedding "
        "FROM entries e LEFT JOIN entry_context o USING (id) ORDER BY e.id"
    ).fetchall()
    ids = [r[0] for r in ents]
    index = {i: n for n, i in enumerate(ids)}
    session = np.array([r[1] or "" for r in ents], dtype=object)
    position = np.array([r[2] if r[2] is not None else -1 for r in ents], dtype=np.int64)
    date = np.array([r[3] if r[3] is not None else np.nan for r in ents], dtype=np.float64)
    emb_mat = np.array([r[4] for r in ents], dtype=np.float32)
    tv = con.execute("SELECT id, v, scale FROM token_vectors ORDER BY id, pos").arrow()
    if hasattr(tv, "read_all"):
        tv = tv.read_all()
    tid = np.array([index[i] for i in tv.column("id").to_pylist()], dtype=np.int64)
    tvec = np.asarray(tv.column("v").combine_chunks().values, dtype=np.float32).reshape(tv.num_rows, -1)
    tvec *= np.asarray(tv.column("scale").to_numpy(), dtype=np.float32)[:, None]
    texts = dict(con.execute("SELECT id, text FROM entries").fetchall())
    ctx = dict(con.execute("SELECT id, text FROM entry_context").fetchall())
    tok_of = con.execute("SELECT token FROM token_vectors ORDER BY id, pos").fetchnumpy()["token"].astype(np.int64)
    judge = LateInteractionJudge()
    queries = []
    for qi, q in enumerate(corpus.queries):
        text = clean_query(q.text)
        rel = entry_relevance(q.relevant, built.item_entry)
        if not rel:
            continue
        enc = encode_query(emb, text)
        lists = {}
        for name, sql in (("bm25", "SELECT id, score FROM lethe_bm25(?, ?)"),
                          ("ctx", "SELECT id, score FROM lethe_bm25_ctx(?, ?)")):
            lists[name] = con.execute(sql, [text, 100000]).fetchall()
        cos = emb_mat @ enc.vec.astype(np.float32)
        cand = set(i for i, _ in lists["bm25"][:depth]) | set(i for i, _ in lists["ctx"][:depth])
        cand |= {ids[j] for j in np.argsort(-cos)[:depth]}
        cidx = np.array(sorted(index[i] for i in cand), dtype=np.int64)
        feats = {}
        for name in ("bm25", "ctx"):
            m = dict(lists[name])
            feats[name] = np.array([m.get(ids[j], 0.0) for j in cidx])
        feats["cos"] = cos[cidx]
        w = judge.weights(con, enc)
        queries.append(dict(qid=q.id, text=text, cat=q.category, rel={index[k]: v for k, v in rel.items()},
                            cand=cidx, feats=feats, tok_ids=enc.tok_ids, tok_vecs=enc.tok_vecs, w=w,
                            vec=enc.vec))
        if qi % 100 == 0:
            print(f"{qi}/{len(corpus.queries)}", file=sys.stderr)
    with open(out, "wb") as fh:
        pickle.dump(dict(ids=ids, session=session, position=position, date=date, emb=emb_mat, tid=tid,
                         tvec=tvec.astype(np.float16), tok=tok_of, queries=queries,
                         n_entries=len(ids), texts=[texts[i] for i in ids],
                         ctx=[ctx.get(i, texts[i]) for i in ids]), fh, protocol=4)
    store.close()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python bench/lever_study/levers.py")
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("dump")
    d.add_argument("dataset")
    d.add_argument("path")
    d.add_argument("--out", required=True)
    d.add_argument("--depth", type=int, default=200)
    a = ap.parse_args(argv)
    if a.cmd == "dump":
        dump(a.dataset, a.path, a.out, a.depth)


if __name__ == "__main__":
    main()
