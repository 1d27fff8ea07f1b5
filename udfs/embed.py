"""The bi-encoder and the ``embed`` UDF.

``Embedder.encode`` turns texts into L2-normalised FLOAT[384] vectors:
tokenise (truncate at ``max_length``, pad each batch only to its longest
member), run the ONNX model, mask-weighted mean over ``last_hidden_state``,
normalise. Texts are sorted by length before batching so that padding stays
small, and results are returned in the caller's order.

Long texts (``encode_full``): the model reads at most ``max_length`` wordpieces, so
a text's own vector covers its first window only. The rest is read in further windows
of the same width, each starting ``WINDOW_STRIDE`` wordpieces after the one before
(overlapping by the difference, so that no sentence is only ever seen cut in two): a
vector per window (``TokenVectors.windows``; ``lethe_dense`` scores a memory by its best
window) and token vectors for every wordpiece of the text (each taken from the first
window that reads it with its left context). Cost and size grow with the text's length.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from .models import ModelMissing, ModelSource, intra_op_threads, resolve_embedder

EMBED_DIM = 384
#: wordpieces between the starts of two windows of a long text (window width:
#: ``max_length`` - 2, for [CLS] and [SEP]); the overlap is the width less this
WINDOW_STRIDE = 192
#: wordpieces read from one text at most (token positions are SMALLINT in the index):
#: a longer text is read up to here (about 120 KB of English text)
MAX_TEXT_WORDPIECES = 32000


@dataclass(frozen=True)
class TokenVectors:
    """One text's token vectors: wordpiece ids and L2-normalised float32 rows, and for a
    text longer than one window the vectors of its further windows ((k, 384), the first
    window's vector being the text's own vector; None for a short text)."""

    ids: np.ndarray
    vecs: np.ndarray
    windows: np.ndarray | None = None


def window_starts(n: int, width: int, stride: int = WINDOW_STRIDE) -> list[int]:
    """Start offsets of the windows that read ``n`` wordpieces ``width`` at a time: the
    first at 0, each next ``stride`` later, the last ending at the text's end."""
    if n <= width:
        return [0]
    starts = list(range(0, n - width, stride))
    starts.append(n - width)
    return starts


class Embedder:
    """all-MiniLM-L6-v2 (or any model of the same signature) on onnxruntime."""

    def __init__(
        self,
        source: ModelSource | None = None,
        *,
        max_length: int = 256,
        batch_size: int = 64,
        threads: int | None = None,
    ) -> None:
        try:
            import onnxruntime as ort
            from tokenizers import Tokenizer
        except ImportError as exc:  # pragma: no cover - both are hard dependencies
            raise ModelMissing(f"cannot load the embedding runtime: {exc}") from exc
        self.source = source or resolve_embedder()
        self.max_length = max_length
        self.batch_size = batch_size
        self._lock = threading.Lock()
        tok = Tokenizer.from_file(str(self.source.tokenizer_path))
        tok.no_padding()
        tok.enable_truncation(max_length)
        self._tokenizer = tok
        whole = Tokenizer.from_str(tok.to_str())
        whole.no_truncation()
        self._whole = whole  # the same tokenizer, reading a text to its end (windows)
        self._cls_id = tok.token_to_id("[CLS]") if tok.token_to_id("[CLS]") is not None else -1
        self._sep_id = tok.token_to_id("[SEP]") if tok.token_to_id("[SEP]") is not None else -1
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = intra_op_threads(threads)
        opts.inter_op_num_threads = 1
        opts.log_severity_level = 3
        # Idle intra-op threads sleep instead of spinning: spinning threads kept both cores
        # busy for a while after each query encoding and slowed the DuckDB statements that
        # follow (search at 10,000 entries: p50 ~80 ms spinning, ~65 ms not); batch
        # encoding throughput is the same either way (~212 items/s on 2 cores).
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        try:
            self._session = ort.InferenceSession(
                str(self.source.onnx_path), opts, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:  # onnxruntime raises its own exception types
            raise ModelMissing(f"cannot load embedding model {self.source.onnx_path}: {exc}") from exc
        names = {i.name for i in self._session.get_inputs()}
        self._needs_token_types = "token_type_ids" in names
        self.dim = EMBED_DIM

    @property
    def model_id(self) -> str:
        return self.source.model_id

    def _batches(self, texts: Sequence[str]):
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        for start in range(0, len(order), self.batch_size):
            yield order[start : start + self.batch_size]

    def _run(self, batch_texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        enc = self._tokenizer.encode_batch(batch_texts)
        width = max(1, max(len(e.ids) for e in enc))
        ids = np.zeros((len(enc), width), dtype=np.int64)
        mask = np.zeros((len(enc), width), dtype=np.int64)
        for row, e in enumerate(enc):
            n = len(e.ids)
            ids[row, :n] = e.ids
            mask[row, :n] = e.attention_mask
        feed = {"input_ids": ids, "attention_mask": mask}
        if self._needs_token_types:
            feed["token_type_ids"] = np.zeros_like(ids)
        with self._lock:
            hidden = self._session.run(None, feed)[0]
        return hidden, mask, ids

    def wordpieces(self, texts: Sequence[str]) -> list[np.ndarray]:
        """The wordpiece ids ``encode_full`` gives token vectors for (truncated as the
        model sees them, without [CLS] and [SEP]), one int32 array per text."""
        out = []
        for e in self._tokenizer.encode_batch([t or " " for t in texts]):
            ids = np.asarray(e.ids, dtype=np.int64)
            out.append(ids[(ids != self._cls_id) & (ids != self._sep_id)].astype(np.int32))
        return out

    def encode(
        self, texts: Sequence[str], progress: Callable[[int], None] | None = None
    ) -> np.ndarray:
        """Vectors for ``texts`` as a float32 array of shape (n, 384), rows L2-normalised."""
        return self.encode_full(texts, progress, tokens=False)[0]

    def encode_full(
        self,
        texts: Sequence[str],
        progress: Callable[[int], None] | None = None,
        *,
        tokens: bool = True,
        windows: bool = True,
    ) -> tuple[np.ndarray, list[TokenVectors]]:
        """Sentence vectors and, from the same forward pass, per-token vectors.

        Token vectors (for late interaction) are the model's last hidden states of
        every real token but [CLS] and [SEP], each L2-normalised. ``windows``: a long
        text is read to its end (module docstring); a query is read as the model
        truncates it (``windows=False``).
        """
        out = np.zeros((len(texts), EMBED_DIM), dtype=np.float32)
        toks: list[TokenVectors] = [None] * len(texts) if tokens else []  # type: ignore[list-item]
        for idx in self._batches(texts):
            hidden, mask, ids = self._run([texts[i] or " " for i in idx])
            m = mask[:, :, None].astype(np.float32)
            pooled = (hidden * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1e-9)
            norms = np.linalg.norm(pooled, axis=1, keepdims=True)
            out[idx] = pooled / np.maximum(norms, 1e-12)
            if tokens:
                keep = (mask == 1) & (ids != self._cls_id) & (ids != self._sep_id)
                for row, i in enumerate(idx):
                    h = hidden[row][keep[row]]
                    h = h / np.maximum(np.linalg.norm(h, axis=1, keepdims=True), 1e-12)
                    toks[i] = TokenVectors(ids[row][keep[row]].astype(np.int32), h.astype(np.float32))
            if progress is not None:
                progress(len(idx))
        if tokens and windows:
            self._read_windows(texts, toks)
        return out, toks

    def _read_windows(self, texts: Sequence[str], toks: list) -> None:
        """Give each text longer than one window its further windows' vectors and the
        token vectors of the rest of its wordpieces (module docstring), in place."""
        width = self.max_length - 2
        if self._cls_id < 0 or self._sep_id < 0:
            return  # a tokenizer without [CLS]/[SEP]: its texts are read as the model truncates them
        long = []
        for i, e in enumerate(self._whole.encode_batch([t or " " for t in texts], add_special_tokens=False)):
            if len(e.ids) > width:
                long.append((i, np.asarray(e.ids[:MAX_TEXT_WORDPIECES], dtype=np.int64)))
        if not long:
            return
        jobs = []  # (text index, where the window before ended, start, wordpieces)
        for i, ids in long:
            starts = window_starts(len(ids), width)
            for k in range(1, len(starts)):
                jobs.append((i, starts[k - 1] + width, starts[k], ids[starts[k]:starts[k] + width]))
        vecs: dict[int, list] = {i: [] for i, _ in long}
        extra: dict[int, list] = {i: [] for i, _ in long}
        for b in range(0, len(jobs), self.batch_size):
            batch = jobs[b:b + self.batch_size]
            n = max(len(j[3]) for j in batch) + 2
            ids = np.zeros((len(batch), n), dtype=np.int64)
            mask = np.zeros((len(batch), n), dtype=np.int64)
            for row, (_, _, _, w) in enumerate(batch):
                ids[row, :len(w) + 2] = np.concatenate(([self._cls_id], w, [self._sep_id]))
                mask[row, :len(w) + 2] = 1
            feed = {"input_ids": ids, "attention_mask": mask}
            if self._needs_token_types:
                feed["token_type_ids"] = np.zeros_like(ids)
            with self._lock:
                hidden = self._session.run(None, feed)[0]
            m = mask[:, :, None].astype(np.float32)
            pooled = (hidden * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1e-9)
            pooled /= np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
            for row, (i, prev_end, start, w) in enumerate(batch):
                vecs[i].append(pooled[row])
                fresh = max(prev_end - start, 0)  # the wordpieces no earlier window read start here
                h = hidden[row, 1 + fresh:1 + len(w)]
                h = h / np.maximum(np.linalg.norm(h, axis=1, keepdims=True), 1e-12)
                extra[i].append((w[fresh:].astype(np.int32), h.astype(np.float32)))
        for i, _ in long:
            first = toks[i]
            parts_ids = [first.ids] + [p[0] for p in extra[i]]
            parts_vecs = [first.vecs] + [p[1] for p in extra[i]]
            toks[i] = TokenVectors(np.concatenate(parts_ids), np.concatenate(parts_vecs),
                                   np.stack(vecs[i]).astype(np.float32))


_SHARED: dict[tuple, Embedder] = {}
_SHARED_LOCK = threading.Lock()


def shared_embedder() -> Embedder:
    """One ``Embedder`` per process and model (files and ``LETHE_THREADS``): a long-lived
    process (``lethe serve``) loads the model once, whichever store asks."""
    src = resolve_embedder()
    key = (str(src.onnx_path), str(src.tokenizer_path), os.environ.get("LETHE_THREADS", ""))
    with _SHARED_LOCK:
        emb = _SHARED.get(key)
        if emb is None:
            emb = _SHARED[key] = Embedder(src)
        return emb


class LazyEmbedder:
    """Loads the model on first use, so opening a database costs no model load."""

    def __init__(self, factory: Callable[[], Embedder]) -> None:
        self._factory = factory
        self._embedder: Embedder | None = None

    def get(self) -> Embedder:
        if self._embedder is None:
            self._embedder = self._factory()
        return self._embedder

    @property
    def loaded(self) -> bool:
        return self._embedder is not None


def register_embed(con, embedder: Embedder | LazyEmbedder, name: str = "embed") -> None:
    """Register ``embed(VARCHAR) -> FLOAT[384]`` on ``con`` as a vectorised arrow UDF."""
    import duckdb
    import pyarrow as pa

    get = embedder.get if isinstance(embedder, LazyEmbedder) else (lambda: embedder)

    def _embed(texts: "pa.Array") -> "pa.Array":
        values = texts.to_pylist()
        present = [i for i, v in enumerate(values) if v is not None]
        vecs = get().encode([values[i] for i in present]) if present else np.zeros((0, EMBED_DIM), np.float32)
        flat = np.zeros((len(values), EMBED_DIM), dtype=np.float32)
        flat[present] = vecs
        arr = pa.FixedSizeListArray.from_arrays(pa.array(flat.reshape(-1)), EMBED_DIM)
        if len(present) != len(values):
            valid = np.zeros(len(values), dtype=bool)
            valid[present] = True
            arr = pa.FixedSizeListArray.from_arrays(
                pa.array(flat.reshape(-1)), EMBED_DIM, mask=pa.array(~valid)
            )
        return arr

    vec_type = duckdb.sqltypes.DuckDBPyType(f"FLOAT[{EMBED_DIM}]")
    con.create_function(
        name,
        _embed,
        [duckdb.sqltypes.VARCHAR],
        vec_type,
        type="arrow",
        null_handling="special",
    )
