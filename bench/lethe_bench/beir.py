"""BEIR layout (NFCorpus and friends): one folder holding

* ``corpus.jsonl`` or ``corpus.jsonl.gz``: ``{"_id", "title", "text"}`` per line;
* ``queries.jsonl`` or ``queries.<split>.jsonl`` (optionally gzipped): ``{"_id", "text"}``;
* ``qrels/<split>.tsv``: ``query-id  corpus-id  score`` with a header line.

Protocol ``beir``: the whole corpus is one store; a document's text is its title and
its text on separate lines; every query with at least one qrel of grade > 0 is scored
with graded relevance (NFCorpus grades are 1 and 2).
"""

from __future__ import annotations

from pathlib import Path

from .data import BenchData, Corpus, Item, Query, read_jsonl, sha256_file

PROTOCOLS = ("beir",)


def _first(folder: Path, names: list[str]) -> Path | None:
    for n in names:
        p = folder / n
        if p.is_file():
            return p
    return None


def load(path: str | Path, protocol: str = "beir", *, split: str = "test", name: str | None = None) -> BenchData:
    if protocol not in PROTOCOLS:
        raise ValueError(f"BEIR data has no protocol {protocol!r}; the only one is 'beir'")
    folder = Path(path)
    if not folder.is_dir():
        raise ValueError(f"{folder} is not a folder in BEIR layout (corpus.jsonl, queries.jsonl, qrels/)")
    corpus_p = _first(folder, ["corpus.jsonl", "corpus.jsonl.gz"])
    queries_p = _first(
        folder,
        [f"queries.{split}.jsonl", f"queries.{split}.jsonl.gz", "queries.jsonl", "queries.jsonl.gz"],
    )
    qrels_p = _first(folder / "qrels", [f"{split}.tsv", f"{split}.tsv.gz"])
    missing = [n for n, p in (("corpus.jsonl", corpus_p), ("queries.jsonl", queries_p), (f"qrels/{split}.tsv", qrels_p)) if p is None]
    if missing:
        raise ValueError(f"{folder} lacks {', '.join(missing)} (BEIR layout)")

    items = []
    for d in read_jsonl(corpus_p):
        title = str(d.get("title") or "").strip()
        text = str(d.get("text") or "").strip()
        items.append(Item(str(d["_id"]), f"{title}\n{text}" if title else text, heading=str(d["_id"])))
    qtext = {str(q["_id"]): str(q.get("text", "")).strip() for q in read_jsonl(queries_p)}

    from .data import open_text

    qrels: dict[str, dict[str, int]] = {}
    with open_text(qrels_p) as fh:
        for i, line in enumerate(fh):
            parts = line.rstrip("\n").split("\t")
            if len(parts) < 3 or (i == 0 and not parts[2].strip().lstrip("-").isdigit()):
                continue
            qid, did, grade = parts[0], parts[1], int(parts[2])
            if grade > 0:
                qrels.setdefault(qid, {})[did] = grade
    known = {it.id for it in items}
    queries = []
    n_unknown = 0
    for qid, rel in qrels.items():
        rel = {d: g for d, g in rel.items() if d in known}
        if qid not in qtext or not rel:
            n_unknown += 1
            continue
        queries.append(Query(qid, qtext[qid], rel))
    files = {p.relative_to(folder).as_posix(): sha256_file(p) for p in (corpus_p, queries_p, qrels_p)}
    bench = BenchData(
        dataset=name or folder.name,
        protocol=protocol,
        path=folder,
        corpora=[Corpus("all", items, queries)],
        turn_level=False,
        files=files,
    )
    bench.notes.append(f"split {split!r}: {len(queries)} queries with graded qrels over {len(items)} documents")
    if n_unknown:
        bench.notes.append(f"{n_unknown} qrels queries skipped (no query text or no known relevant document)")
    return bench
