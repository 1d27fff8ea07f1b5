"""Optional write-time enrichment with an Anthropic model (``lethe enrich``).

Per entry the model returns, through a forced tool call whose input schema is strict
JSON: a one-sentence ``gist``, three anticipated ``questions`` in varied wording,
``entities`` (exact surface forms) and ``temporal`` markers. The result is cached in
the ``enrichment`` table (migrations/005_enrichment.sql) by (entry id = content hash,
model): a run is resumable and no text is paid for twice. The enrichment text is
indexed beside the raw text: it joins the entry's context field for BM25
(``fts.py``) and its vector is stored beside the entry's own; the judge (reranker)
still scores the raw text only.

Entries are sent as indexed, i.e. already scrubbed of private spans and secrets.
Without ``ANTHROPIC_API_KEY`` nothing is sent and nothing changes.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field

from ..db import transaction
from ..errors import LetheError, UsageError

DEFAULT_MODEL = "claude-haiku-4-5"
# USD per million tokens (input, output); unknown models are priced as the dearest listed.
PRICES = {"claude-haiku-4-5": (1.0, 5.0), "claude-sonnet-4-5": (3.0, 15.0), "claude-opus-4-1": (15.0, 75.0)}
PROMPT_TOKENS = 420        # the instructions and the tool schema, per request
OUTPUT_TOKENS = 180        # a typical enrichment
MAX_TEXT_CHARS = 6000      # longer entries are cut for the request
CONFIRM_USD = 0.25         # ask before a run expected to cost more than this

TOOL = {
    "name": "record_enrichment",
    "description": "Record retrieval metadata for one memory entry.",
    "input_schema": {
        "type": "object",
        "additionalProperties": False,
        "required": ["gist", "questions", "entities", "temporal"],
        "properties": {
            "gist": {"type": "string", "description": "One sentence saying what the memory is about."},
            "questions": {
                "type": "array", "items": {"type": "string"}, "minItems": 3, "maxItems": 3,
                "description": "Three questions this memory answers, each worded differently.",
            },
            "entities": {
                "type": "array", "items": {"type": "string"},
                "description": "Names, files, commands, numbers, exactly as written in the memory.",
            },
            "temporal": {
                "type": "array", "items": {"type": "string"},
                "description": "Dates, times and relative time expressions, as written (empty if none).",
            },
        },
    },
}
INSTRUCTIONS = (
    "You index a developer's long-term memory for later search. Read the memory entry and call "
    "record_enrichment once. Keep entities and temporal markers verbatim; do not invent facts."
)


class NoApiKey(LetheError):
    """No ANTHROPIC_API_KEY: enrichment is optional and changes nothing without one."""


@dataclass
class EnrichReport:
    model: str
    pending: int = 0          # entries without an enrichment for this model
    enriched: int = 0
    cached: int = 0           # already enriched earlier: not paid for again
    failed: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    estimated_usd: float = 0.0
    cost_usd: float = 0.0
    warnings: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def price(model: str) -> tuple[float, float]:
    for name, p in PRICES.items():
        if model.startswith(name):
            return p
    return max(PRICES.values())


def estimate_usd(texts: list[str], model: str) -> float:
    pin, pout = price(model)
    tin = sum(min(len(t), MAX_TEXT_CHARS) / 4 + PROMPT_TOKENS for t in texts)
    return (tin * pin + len(texts) * OUTPUT_TOKENS * pout) / 1e6


def pending(con, model: str, limit: int | None = None) -> tuple[list[tuple[str, str]], int]:
    """(entries not yet enriched by ``model``: (id, text), count already enriched)."""
    sql = ("SELECT e.id, e.text FROM entries AS e WHERE NOT EXISTS "
           "(SELECT 1 FROM enrichment AS x WHERE x.id = e.id AND x.model = ?) ORDER BY e.created_at DESC NULLS LAST, e.id")
    params: list = [model]
    if limit:
        sql += " LIMIT ?"
        params.append(int(limit))
    todo = con.execute(sql, params).fetchall()
    done = con.execute(
        "SELECT count(*) FROM enrichment WHERE model = ? AND id IN (SELECT id FROM entries)", [model]
    ).fetchone()[0]
    return todo, done


def make_client():
    key = os.environ.get("ANTHROPIC_API_KEY")
    if not key:
        raise NoApiKey("ANTHROPIC_API_KEY is not set: enrichment needs it (nothing was sent or changed)")
    import anthropic

    return anthropic.Anthropic(api_key=key, max_retries=3)


def _valid(data) -> dict | None:
    if not isinstance(data, dict):
        return None
    gist, qs, ents, temp = (data.get(k) for k in ("gist", "questions", "entities", "temporal"))
    if not isinstance(gist, str) or not gist.strip():
        return None
    lists = []
    for v in (qs, ents, temp):
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            return None
        lists.append([" ".join(x.split()) for x in v if x.strip()])
    if len(lists[0]) < 3:
        return None
    return {"gist": " ".join(gist.split()), "questions": lists[0][:3], "entities": lists[1], "temporal": lists[2]}


def enrich_one(client, model: str, text: str) -> tuple[dict | None, int, int]:
    """One request: (validated enrichment or None, input tokens, output tokens)."""
    msg = client.messages.create(
        model=model,
        max_tokens=600,
        system=INSTRUCTIONS,
        tools=[TOOL],
        tool_choice={"type": "tool", "name": TOOL["name"]},
        messages=[{"role": "user", "content": f"<memory>\n{text[:MAX_TEXT_CHARS]}\n</memory>"}],
    )
    data = next((b.input for b in msg.content if getattr(b, "type", None) == "tool_use"), None)
    usage = getattr(msg, "usage", None)
    return _valid(data), int(getattr(usage, "input_tokens", 0) or 0), int(getattr(usage, "output_tokens", 0) or 0)


def enrichment_text(e: dict) -> str:
    from ..privacy import scrub

    parts = [e["gist"], *e["questions"], " ".join(e["entities"]), " ".join(e["temporal"])]
    return scrub("\n".join(p for p in parts if p)).text


def enrich(
    store,
    *,
    model: str = DEFAULT_MODEL,
    limit: int | None = None,
    concurrency: int = 4,
    client=None,
    confirm=None,
    confirm_over: float = CONFIRM_USD,
    progress=None,
) -> EnrichReport:
    """Enrich the entries of ``store`` that ``model`` has not enriched yet.

    ``confirm(report) -> bool`` is asked when the estimate exceeds ``confirm_over`` USD
    (None: go on). ``client`` defaults to an ``anthropic.Anthropic`` from the environment."""
    if concurrency < 1:
        raise UsageError("--concurrency must be at least 1")
    con = store.con
    todo, done = pending(con, model, limit)
    report = EnrichReport(model, pending=len(todo), cached=done)
    report.estimated_usd = round(estimate_usd([t for _, t in todo], model), 4)
    if not todo:
        return report
    if client is None:
        client = make_client()
    if confirm is not None and report.estimated_usd > confirm_over and not confirm(report):
        report.warnings.append("cancelled: nothing was sent")
        return report
    import anthropic

    results: list[tuple[str, dict, int, int]] = []
    stop_error: Exception | None = None
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        futs = {pool.submit(enrich_one, client, model, text): eid for eid, text in todo}
        for n, fut in enumerate(as_completed(futs), 1):
            eid = futs[fut]
            try:
                data, tin, tout = fut.result()
            except (anthropic.AuthenticationError, anthropic.PermissionDeniedError, anthropic.NotFoundError) as exc:
                stop_error = stop_error or exc
                report.failed += 1
                continue
            except anthropic.APIError as exc:
                report.failed += 1
                if len(report.warnings) < 5:
                    report.warnings.append(f"{eid}: {type(exc).__name__}: {exc}")
                continue
            report.input_tokens += tin
            report.output_tokens += tout
            if data is None:
                report.failed += 1
                if len(report.warnings) < 5:
                    report.warnings.append(f"{eid}: the model's answer did not fit the schema; not cached")
                continue
            results.append((eid, data, tin, tout))
            if progress:
                progress("enriching", n, len(todo))
    pin, pout = price(model)
    report.cost_usd = round((report.input_tokens * pin + report.output_tokens * pout) / 1e6, 4)
    if results:
        _store_results(store, model, results)
        report.enriched = len(results)
    if stop_error is not None and not results:
        raise LetheError(f"the Anthropic API refused the request ({type(stop_error).__name__}): {stop_error}")
    if stop_error is not None:
        report.warnings.append(f"stopped early: {stop_error}")
    return report


def _store_results(store, model: str, results) -> None:
    import pyarrow as pa

    from ..fts import context_refresh
    from ..ingest import check_model

    texts = [enrichment_text(d) for _, d, _, _ in results]
    emb = store.embedder
    check_model(store.con, emb.model_id)
    vecs = emb.encode(texts)
    con = store.con
    con.register("_lethe_enr", pa.table({
        "id": [r[0] for r in results],
        "gist": [r[1]["gist"] for r in results],
        "questions": [r[1]["questions"] for r in results],
        "entities": [r[1]["entities"] for r in results],
        "temporal": [r[1]["temporal"] for r in results],
        "text": texts,
        "embedding": pa.FixedSizeListArray.from_arrays(pa.array(vecs.astype("float32").reshape(-1)), 384),
        "input_tokens": pa.array([r[2] for r in results], pa.int32()),
        "output_tokens": pa.array([r[3] for r in results], pa.int32()),
    }))
    try:
        with transaction(con):
            con.execute(
                "INSERT OR REPLACE INTO enrichment (id, model, gist, questions, entities, temporal, text, embedding, "
                "input_tokens, output_tokens) SELECT id, ?, gist, questions, entities, temporal, text, embedding, "
                "input_tokens, output_tokens FROM _lethe_enr", [model])
            context_refresh(con, [r[0] for r in results])
    finally:
        con.unregister("_lethe_enr")
