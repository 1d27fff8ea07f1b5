"""The cross-encoder and the ``rerank`` UDF.

``CrossEncoder.score(query, passages)`` scores each (query, passage) pair
with a cross-encoder (ms-marco-MiniLM-L-6-v2 or any ONNX model of the same
signature: ``input_ids``, ``attention_mask``, ``token_type_ids`` int64 in,
one logit per pair out, shape ``[batch, 1]`` or ``[batch]``).

Each pair is encoded as the tokenizer encodes a pair
(``[CLS] query [SEP] passage [SEP]``, token types 0 then 1). The passage is
cut to ``max_passage_tokens`` with the tokenizer's own ``only_second``
truncation, so the query is never cut to make room; a query so long that the
pair would not fit in ``max_length`` is cut to what fits. Batches are padded
only to their longest pair, and passages are sorted by length before
batching so that padding stays small; scores come back in the caller's order.

Scores are raw logits (not probabilities): ms-marco-MiniLM-L-6-v2 gives
roughly -11 .. +11, higher is more relevant. Compare them within one query.

The cross-encoder dominates search latency (about 30-50 pairs/s on 2 cores at
200 tokens): ``register_rerank`` registers an arrow UDF that scores a whole
DuckDB chunk with one ``score`` call per distinct query text, so a 30-entry
pool costs one model call.
"""

from __future__ import annotations

import threading
from typing import Callable, Generic, Sequence, TypeVar

import numpy as np

from .models import ModelMissing, ModelSource, intra_op_threads, resolve_reranker

T = TypeVar("T")


class CrossEncoder:
    """A cross-encoder reranker on onnxruntime: one logit per (query, passage) pair."""

    def __init__(
        self,
        source: ModelSource,
        *,
        max_passage_tokens: int = 256,
        batch_size: int = 32,
        threads: int | None = None,
        max_length: int = 512,
    ) -> None:
        try:
            import onnxruntime as ort
            from tokenizers import Tokenizer
        except ImportError as exc:  # pragma: no cover - both are hard dependencies
            raise ModelMissing(f"cannot load the reranker runtime: {exc}") from exc
        if max_passage_tokens < 1 or batch_size < 1:
            raise ValueError("max_passage_tokens and batch_size must be at least 1")
        self.source = source
        self.max_passage_tokens = max_passage_tokens
        self.batch_size = batch_size
        self.max_length = max_length
        # The tokenizer's truncation is set per query, so tokenising and running
        # one query's pairs is one critical section.
        self._lock = threading.Lock()
        try:
            tok = Tokenizer.from_file(str(source.tokenizer_path))
        except Exception as exc:  # tokenizers raises a plain Exception
            raise ModelMissing(f"cannot read reranker tokenizer {source.tokenizer_path}: {exc}") from exc
        tok.no_padding()
        tok.no_truncation()
        self._tokenizer = tok
        self._pair_specials = tok.num_special_tokens_to_add(True)
        # Longest query (in word pieces) that still leaves the passage its full budget.
        self._max_query_tokens = max(1, max_length - self._pair_specials - max_passage_tokens)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = intra_op_threads(threads)
        opts.inter_op_num_threads = 1
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")  # as in embed.py
        opts.log_severity_level = 3
        try:
            self._session = ort.InferenceSession(str(source.onnx_path), opts, providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises its own exception types
            raise ModelMissing(f"cannot load reranker model {source.onnx_path}: {exc}") from exc
        self._inputs = {i.name for i in self._session.get_inputs()}
        missing = {"input_ids", "attention_mask"} - self._inputs
        if missing:
            raise ModelMissing(
                f"reranker model {source.onnx_path} is not a cross-encoder of the expected signature "
                f"(missing inputs: {', '.join(sorted(missing))})"
            )

    @property
    def model_id(self) -> str:
        return self.source.model_id

    def _cut_query(self, query: str) -> str:
        """The longest prefix of ``query`` that is at most ``_max_query_tokens`` word pieces."""
        enc = self._tokenizer.encode(query, add_special_tokens=False)
        keep = self._max_query_tokens
        while len(enc.ids) > self._max_query_tokens and keep > 0:
            # Cutting inside a word can re-tokenise into more pieces: re-check.
            query = query[: enc.offsets[keep - 1][1]]
            enc = self._tokenizer.encode(query, add_special_tokens=False)
            keep -= 1
        return query

    def _encode(self, query: str, passages: list[str]):
        """Pair encodings, passages cut (``only_second``) to at most ``max_passage_tokens``."""
        q_len = len(self._tokenizer.encode(query, add_special_tokens=False).ids)
        self._tokenizer.enable_truncation(
            q_len + self._pair_specials + self.max_passage_tokens, strategy="only_second"
        )
        try:
            return self._tokenizer.encode_batch([(query, p) for p in passages])
        finally:
            self._tokenizer.no_truncation()

    def _run(self, enc) -> np.ndarray:
        width = max(len(e.ids) for e in enc)
        ids = np.zeros((len(enc), width), dtype=np.int64)
        mask = np.zeros((len(enc), width), dtype=np.int64)
        types = np.zeros((len(enc), width), dtype=np.int64)
        for row, e in enumerate(enc):
            n = len(e.ids)
            ids[row, :n] = e.ids
            mask[row, :n] = e.attention_mask
            types[row, :n] = e.type_ids
        feed = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self._inputs:
            feed["token_type_ids"] = types
        out = np.asarray(self._session.run(None, feed)[0], dtype=np.float32)
        if out.size != len(enc):
            raise ModelMissing(
                f"reranker model {self.source.onnx_path} returned shape {list(out.shape)} "
                f"for {len(enc)} pairs; expected one logit per pair"
            )
        return out.reshape(len(enc))

    def score(self, query: str, passages: Sequence[str]) -> np.ndarray:
        """One float32 logit per passage, in the order given (higher = more relevant)."""
        out = np.zeros(len(passages), dtype=np.float32)
        if not len(passages):
            return out
        texts = [p if p is not None else "" for p in passages]
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        with self._lock:
            q = self._cut_query(query or "")
            for start in range(0, len(order), self.batch_size):
                idx = order[start : start + self.batch_size]
                out[idx] = self._run(self._encode(q, [texts[i] for i in idx]))
        return out


class LazyModel(Generic[T]):
    """Loads a model on first use, so opening a database costs no model load.

    ``factory`` may raise (``ModelMissing``); the error surfaces on the first
    call that needs the model, and the next call tries again.
    """

    def __init__(self, factory: Callable[[], T]) -> None:
        self._factory = factory
        self._model: T | None = None
        self._lock = threading.Lock()

    def get(self) -> T:
        if self._model is None:
            with self._lock:
                if self._model is None:
                    self._model = self._factory()
        return self._model

    @property
    def loaded(self) -> bool:
        return self._model is not None


class LazyReranker(LazyModel[CrossEncoder]):
    """``LazyModel`` for the cross-encoder; with no factory, the resolved default."""

    def __init__(self, factory: Callable[[], CrossEncoder] | None = None) -> None:
        super().__init__(factory or default_reranker)


def default_reranker() -> CrossEncoder:
    """The configured / cached cross-encoder; ``ModelMissing`` when none is installed."""
    src = resolve_reranker()
    if src is None:
        raise ModelMissing(
            "no reranker installed (cross-encoder ms-marco-MiniLM-L-6-v2): run `lethe models pull`, "
            "or set LETHE_RERANK_MODEL to a folder holding model.onnx and tokenizer.json"
        )
    return CrossEncoder(src)


def register_rerank(con, reranker: CrossEncoder | LazyModel, name: str = "rerank") -> None:
    """Register ``rerank(VARCHAR query, VARCHAR passage) -> FLOAT`` on ``con``.

    A vectorised arrow UDF: each chunk DuckDB hands over is grouped by query
    text and scored with one ``score`` call per distinct query. A NULL query or
    passage gives NULL. The score is the cross-encoder's raw logit.
    """
    import duckdb
    import pyarrow as pa

    get = reranker.get if isinstance(reranker, LazyModel) or not hasattr(reranker, "score") else (lambda: reranker)

    def _rerank(queries: "pa.Array", passages: "pa.Array") -> "pa.Array":
        qs = queries.to_pylist()
        ps = passages.to_pylist()
        groups: dict[str, list[int]] = {}
        for i, (q, p) in enumerate(zip(qs, ps)):
            if q is not None and p is not None:
                groups.setdefault(q, []).append(i)
        scores = np.zeros(len(qs), dtype=np.float32)
        valid = np.zeros(len(qs), dtype=bool)
        if groups:
            model = get()
            for q, rows in groups.items():
                scores[rows] = model.score(q, [ps[i] for i in rows])
                valid[rows] = True
        return pa.array(scores, type=pa.float32(), mask=~valid)

    con.create_function(
        name,
        _rerank,
        [duckdb.sqltypes.VARCHAR, duckdb.sqltypes.VARCHAR],
        duckdb.sqltypes.FLOAT,
        type="arrow",
        null_handling="special",
    )
