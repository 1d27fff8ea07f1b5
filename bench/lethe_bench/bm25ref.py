"""An independent Okapi BM25 in numpy, to check the SQL BM25 (``lethe_bm25``) against.

Same tokenizer as ``sql/00_tokens.sql`` (lowercase, runs of ``[a-z0-9_]``), written
again here in Python; distinct query terms; k1 = 1.2, b = 0.75; idf
``ln((N - df + 0.5) / (df + 0.5) + 1)`` (the SQL uses log10: a constant factor, same
ranking). Ties break on document id, as the SQL does. Nothing is shared with the SQL
path but the definition.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Sequence

import numpy as np

_TOKEN = re.compile(r"[a-z0-9_]+")


def tokenize(text: str) -> list[str]:
    return _TOKEN.findall(text.lower())


class BM25:
    def __init__(self, ids: Sequence[str], texts: Sequence[str], k1: float = 1.2, b: float = 0.75) -> None:
        self.ids = list(ids)
        self.k1, self.b = k1, b
        self.vocab: dict[str, int] = {}
        postings: dict[int, list[tuple[int, int]]] = {}
        lens = np.zeros(len(texts), dtype=np.float64)
        for d, text in enumerate(texts):
            toks = tokenize(text)
            lens[d] = len(toks)
            for term, tf in Counter(toks).items():
                t = self.vocab.setdefault(term, len(self.vocab))
                postings.setdefault(t, []).append((d, tf))
        self.postings = {
            t: (np.array([d for d, _ in p], dtype=np.int64), np.array([f for _, f in p], dtype=np.float64))
            for t, p in postings.items()
        }
        self.n = len(texts)
        self.lens = lens
        self.avgdl = float(lens.mean()) if len(texts) else 0.0
        # Rank ties by id: position of each doc in id order.
        order = sorted(range(self.n), key=lambda i: self.ids[i])
        self.id_rank = np.empty(self.n, dtype=np.int64)
        self.id_rank[order] = np.arange(self.n)

    def scores(self, query: str) -> np.ndarray:
        s = np.zeros(self.n, dtype=np.float64)
        norm = self.k1 * (1 - self.b + self.b * self.lens / max(self.avgdl, 1e-12))
        for term in set(tokenize(query)):
            t = self.vocab.get(term)
            if t is None:
                continue
            docs, tf = self.postings[t]
            df = len(docs)
            idf = np.log((self.n - df + 0.5) / (df + 0.5) + 1.0)
            s[docs] += idf * tf * (self.k1 + 1) / (tf + norm[docs])
        return s

    def search(self, query: str, k: int = 10) -> list[str]:
        s = self.scores(query)
        hit = np.flatnonzero(s > 0)
        if hit.size == 0:
            return []
        order = np.lexsort((self.id_rank[hit], -s[hit]))[:k]
        return [self.ids[i] for i in hit[order]]
