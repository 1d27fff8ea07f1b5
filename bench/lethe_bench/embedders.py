"""Embedder wrappers for the bench, with the interface ``MemoryStore`` expects:
``encode(texts, progress=None) -> float32 (n, 384)`` and ``model_id``.

* ``CachedEmbedder``: an on-disk cache keyed by sha256(text) under one folder per
  model id (``$LETHE_CACHE/bench/embeddings/<model id>/`` or
  ``~/.cache/lethe-sql/bench/embeddings/...``). Vectors are stored exactly as the model
  returned them (float32), so a cache hit gives the identical vector; the MiniLM encoder
  here gives the same vector for a text whatever batch it is in (checked in the tests).
  New vectors are written as ``.npz`` shards (atomic rename, one per flush), so
  concurrent bench runs never corrupt each other's cache. ``bypass()`` turns the cache
  off for a block (latency measurements embed queries for real).
* ``RandomVectorEmbedder``: seeded random unit vectors for the *stored* entries, for
  latency-only figures on corpora too big to embed in the time at hand. Queries (after
  ``use_model()``) go through the real model, so search latency includes a real query
  embedding. It reports the real model's id so that a cold ``lethe add`` or ``lethe
  search`` process can open the database; reports say when it was used.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import uuid
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

DIM = 384


def default_cache_root() -> Path:
    from lethe_sql.udfs.models import cache_dir

    return cache_dir() / "bench" / "embeddings"


def _key(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8")).digest()


class CachedEmbedder:
    def __init__(self, inner, cache_root: str | os.PathLike | None = None, *, flush_every: int = 4096) -> None:
        self.inner = inner
        safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", inner.model_id)
        self.folder = Path(cache_root or default_cache_root()) / safe
        self.flush_every = flush_every
        self._index: dict[bytes, np.ndarray] | None = None
        self._pending_keys: list[bytes] = []
        self._pending_vecs: list[np.ndarray] = []
        self._bypass = False
        self.hits = 0
        self.misses = 0

    @property
    def model_id(self) -> str:
        return self.inner.model_id

    @property
    def dim(self) -> int:
        return DIM

    def _load(self) -> dict[bytes, np.ndarray]:
        if self._index is None:
            self._index = {}
            if self.folder.is_dir():
                for shard in sorted(self.folder.glob("*.npz")):
                    try:
                        with np.load(shard) as z:
                            keys, vecs = z["keys"], z["vecs"]
                    except Exception:  # a broken shard is ignored, never fatal
                        continue
                    for k, v in zip(keys, vecs):
                        self._index[bytes(k)] = v
        return self._index

    def __len__(self) -> int:
        return len(self._load())

    @contextlib.contextmanager
    def bypass(self):
        old, self._bypass = self._bypass, True
        try:
            yield self
        finally:
            self._bypass = old

    def encode(self, texts: Sequence[str], progress: Callable[[int], None] | None = None) -> np.ndarray:
        if self._bypass:
            return self.inner.encode(texts, progress=progress)
        index = self._load()
        keys = [_key(t) for t in texts]
        out = np.zeros((len(texts), DIM), dtype=np.float32)
        todo: dict[bytes, list[int]] = {}
        for i, k in enumerate(keys):
            v = index.get(k)
            if v is None:
                todo.setdefault(k, []).append(i)
            else:
                out[i] = v
        self.hits += len(texts) - sum(len(v) for v in todo.values())
        if progress is not None and len(texts) - sum(len(v) for v in todo.values()):
            progress(len(texts) - sum(len(v) for v in todo.values()))
        if todo:
            first = [rows[0] for rows in todo.values()]
            vecs = self.inner.encode([texts[i] for i in first], progress=progress)
            self.misses += len(first)
            for (k, rows), v in zip(todo.items(), vecs):
                v = np.array(v, dtype=np.float32)
                index[k] = v
                out[rows] = v
                self._pending_keys.append(k)
                self._pending_vecs.append(v)
            if len(self._pending_keys) >= self.flush_every:
                self.flush()
        return out

    def flush(self) -> None:
        """Write the vectors computed since the last flush as one shard."""
        if not self._pending_keys:
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        keys = np.frombuffer(b"".join(self._pending_keys), dtype="S32")
        vecs = np.stack(self._pending_vecs).astype(np.float32)
        name = f"{uuid.uuid4().hex}.npz"
        tmp = self.folder / f".{name}.tmp"
        with open(tmp, "wb") as fh:
            np.savez(fh, keys=keys, vecs=vecs)
        os.replace(tmp, self.folder / name)
        self._pending_keys, self._pending_vecs = [], []


class CachedFullEmbedder(CachedEmbedder):
    """A ``CachedEmbedder`` that also gives token vectors (``encode_full``), so the store
    builds its token index. Token vectors are never cached (they are large): every
    ``encode_full`` call runs the model, and stores its sentence vectors in the cache."""

    def encode_full(self, texts: Sequence[str], progress: Callable[[int], None] | None = None, *,
                    windows: bool = True):
        vecs, toks = self.inner.encode_full(texts, progress, windows=windows)
        index = self._load()
        for t, v in zip(texts, vecs):
            k = _key(t)
            if k not in index:
                v = np.array(v, dtype=np.float32)
                index[k] = v
                self._pending_keys.append(k)
                self._pending_vecs.append(v)
        self.misses += len(texts)
        return vecs, toks


class RandomVectorEmbedder:
    """Seeded random unit vectors for stored entries; the real model for queries."""

    label = "random unit vectors (latency-only; seeded per text)"

    def __init__(self, model_factory: Callable[[], object], model_id: str, seed: int = 0) -> None:
        self._factory = model_factory
        self._model = None
        self._model_id = model_id
        self.seed = seed
        self.random_mode = True

    @property
    def model_id(self) -> str:
        return self._model_id

    @property
    def model(self):
        if self._model is None:
            self._model = self._factory()
        return self._model

    def use_model(self) -> None:
        """From now on, embed for real (queries, added memories)."""
        self.random_mode = False

    def encode(self, texts: Sequence[str], progress: Callable[[int], None] | None = None) -> np.ndarray:
        if not self.random_mode:
            return self.model.encode(texts, progress=progress)
        out = random_unit_vectors(texts, self.seed)
        if progress is not None:
            progress(len(texts))
        return out

    def encode_full(self, texts: Sequence[str], progress: Callable[[int], None] | None = None, *,
                    windows: bool = True):
        """Random sentence vectors and, for the token index, one random unit vector per
        wordpiece the real tokenizer gives (real ids, so ``token_df`` and the number of
        token rows per entry are real; the vectors mean nothing). The late-interaction
        judge then reads a token index of its real size."""
        if not self.random_mode:
            return self.model.encode_full(texts, progress, windows=windows)
        from lethe_sql.udfs.embed import TokenVectors

        vecs = random_unit_vectors(texts, self.seed)
        toks = []
        for t, ids in zip(texts, self.model.wordpieces(texts)):
            rng = np.random.default_rng(_text_seed(t, self.seed + 1))
            v = rng.standard_normal((len(ids), DIM), dtype=np.float32)
            v /= np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)
            toks.append(TokenVectors(ids, v))
        if progress is not None:
            progress(len(texts))
        return vecs, toks


def _text_seed(text: str, seed: int) -> int:
    salt = str(seed).encode()
    return int.from_bytes(hashlib.sha256(salt + b"\x00" + text.encode("utf-8")).digest()[:8], "little")


def random_unit_vectors(texts: Sequence[str], seed: int = 0) -> np.ndarray:
    """One unit vector per text, a pure function of (seed, text)."""
    out = np.empty((len(texts), DIM), dtype=np.float32)
    for i, t in enumerate(texts):
        out[i] = np.random.default_rng(_text_seed(t, seed)).standard_normal(DIM, dtype=np.float32)
    out /= np.linalg.norm(out, axis=1, keepdims=True)
    return out
