"""What a loader hands the runner: corpora of items, queries with graded relevance.

An *item* is one benchmark document (a LoCoMo turn, a LongMemEval session, a BEIR
document). It becomes one ``lethe_sql.markdown.Document`` and so one entry, unless
its text equals another item's (entries are content hashes: see ``runner.py``).
Relevance lives only on ``Query`` objects and never reaches the index.

A *protocol* decides how many corpora a data set makes: ``turn-global`` and ``beir``
put everything in one corpus (one on-disk store); ``session-local`` makes one small
corpus per conversation or per question (one in-memory store each).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Item:
    id: str
    text: str
    session: str | None = None  # the family a turn belongs to (behaviour metrics)
    heading: str | None = None
    created_at: datetime | None = None


@dataclass(frozen=True)
class Query:
    id: str
    text: str
    relevant: dict[str, int]  # item id -> grade (> 0)
    category: str | None = None


@dataclass
class Corpus:
    name: str
    items: list[Item]
    queries: list[Query]


@dataclass
class BenchData:
    dataset: str
    protocol: str
    path: Path
    corpora: list[Corpus]
    turn_level: bool  # behaviour metrics (exact / sibling / wrong family) apply
    session_level: bool = False  # documents are sessions: report recall_any@5
    files: dict[str, str] = field(default_factory=dict)  # data file -> sha256
    notes: list[str] = field(default_factory=list)
    category_names: dict[str, str] = field(default_factory=dict)

    @property
    def n_queries(self) -> int:
        return sum(len(c.queries) for c in self.corpora)

    @property
    def n_items(self) -> int:
        return sum(len(c.items) for c in self.corpora)


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while True:
            b = fh.read(chunk)
            if not b:
                break
            h.update(b)
    return h.hexdigest()


def open_text(path: str | os.PathLike):
    """Open a plain or gzipped text file (detected by its magic bytes, not its name)."""
    p = Path(path)
    with open(p, "rb") as fh:
        magic = fh.read(2)
    if magic == b"\x1f\x8b":
        return gzip.open(p, "rt", encoding="utf-8")
    return open(p, encoding="utf-8")


def read_json(path: str | os.PathLike) -> Any:
    with open_text(path) as fh:
        return json.load(fh)


def read_jsonl(path: str | os.PathLike) -> list[dict]:
    out = []
    with open_text(path) as fh:
        for line in fh:
            line = line.strip()
            if line:
                out.append(json.loads(line))
    return out
