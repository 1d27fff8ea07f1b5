"""LongMemEval (xiaowu0162/LongMemEval ``longmemeval_*.json`` layout, plain or gzipped).

The file is a list of questions: ``question_id``, ``question_type``, ``question``,
``answer``, ``question_date``, and the question's haystack as three parallel lists
(``haystack_session_ids``, ``haystack_dates``, ``haystack_sessions``: lists of
``{role, content}`` turns, evidence turns marked ``has_answer: true``), plus
``answer_session_ids``.

Protocols:

* ``turn-global``: all unique turns across all haystacks in one corpus (a turn is
  ``<session id>:<turn index>``, first occurrence wins; text ``role: content``);
  relevant = the answer sessions' turns marked ``has_answer``, else every turn of
  the answer sessions.
* ``session-local``: one corpus per question holding only its haystack, one item
  per session (its turns, one ``role: content`` line each); relevant = the answer
  sessions.

Abstention questions (``question_id`` ending in ``_abs``) have no evidence to find
and are left out, as in LongMemEval's own retrieval evaluation. When the file is the
official ``longmemeval_s_cleaned.json`` its sha256 is checked against the published one.
"""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path

from .data import BenchData, Corpus, Item, Query, read_json, sha256_file

PROTOCOLS = ("turn-global", "session-local")
OFFICIAL_SHA256 = {
    "longmemeval_s_cleaned.json": "d6f21ea9d60a0d56f34a05b609c79c88a451d2ae03597821ea3d5a9678c3a442",
}
_WEEKDAY = re.compile(r"\s*\([A-Za-z]{3}\)\s*")


def _date(text) -> datetime | None:
    if not isinstance(text, str):
        return None
    s = _WEEKDAY.sub(" ", text).strip()
    for fmt in ("%Y/%m/%d %H:%M", "%Y/%m/%d", "%Y-%m-%d %H:%M", "%Y-%m-%d"):
        try:
            return datetime.strptime(s, fmt)
        except ValueError:
            continue
    return None


def turn_text(turn: dict) -> str:
    return f"{str(turn.get('role', '')).strip()}: {str(turn.get('content') or '').strip()}"


def check_official(path: Path, digest: str) -> str | None:
    """A note about the official checksum, or None when the file is not an official one."""
    want = OFFICIAL_SHA256.get(path.name)
    if want is None:
        return None
    if digest == want:
        return f"{path.name}: sha256 verified against the official release ({want})"
    return (
        f"WARNING: {path.name} has sha256 {digest}, not the official {want}: "
        "the file differs from the published LongMemEval release"
    )


def load(path: str | Path, protocol: str = "turn-global", *, limit_questions: int | None = None) -> BenchData:
    if protocol not in PROTOCOLS:
        raise ValueError(f"LongMemEval has no protocol {protocol!r}; choose one of {', '.join(PROTOCOLS)}")
    path = Path(path)
    digest = sha256_file(path)
    data = read_json(path)
    if not isinstance(data, list) or not all(isinstance(q, dict) and "haystack_sessions" in q for q in data):
        raise ValueError(f"{path} is not in LongMemEval layout (a list of questions with 'haystack_sessions')")
    bench = BenchData(
        dataset="longmemeval",
        protocol=protocol,
        path=path,
        corpora=[],
        turn_level=protocol == "turn-global",
        session_level=protocol == "session-local",
        files={path.name: digest},
    )
    note = check_official(path, digest)
    if note:
        bench.notes.append(note)

    turns: dict[str, Item] = {}
    queries: list[Query] = []
    n_abs = n_noev = n_conflict = 0
    kept = 0
    for qobj in data:
        qid = str(qobj.get("question_id"))
        if qid.endswith("_abs"):
            n_abs += 1
            continue
        if limit_questions is not None and kept >= limit_questions:
            break
        sids = [str(s) for s in qobj.get("haystack_session_ids", [])]
        dates = list(qobj.get("haystack_dates") or [None] * len(sids))
        sessions = qobj.get("haystack_sessions", [])
        answer = {str(s) for s in qobj.get("answer_session_ids", [])}
        session_items: list[Item] = []
        marked: list[str] = []
        answer_turns: list[str] = []
        for sid, when, sess in zip(sids, dates, sessions):
            when = _date(when)
            lines = []
            for ti, t in enumerate(sess or []):
                tid = f"{sid}:{ti}"
                text = turn_text(t)
                lines.append(text)
                if protocol == "turn-global":
                    prev = turns.get(tid)
                    if prev is None:
                        turns[tid] = Item(tid, text, session=sid, heading=f"{sid} turn {ti}", created_at=when)
                    elif prev.text != text:
                        n_conflict += 1
                if sid in answer:
                    answer_turns.append(tid)
                    if t.get("has_answer"):
                        marked.append(tid)
            if protocol == "session-local" and lines:
                session_items.append(Item(sid, "\n".join(lines), session=sid, heading=f"session {sid}", created_at=when))
        if protocol == "turn-global":
            rel = {t: 1 for t in (marked or answer_turns)}
        else:
            rel = {s.id: 1 for s in session_items if s.id in answer}
        if not rel:
            n_noev += 1
            continue
        kept += 1
        q = Query(qid, str(qobj.get("question", "")).strip(), rel, str(qobj.get("question_type") or "") or None)
        if protocol == "turn-global":
            queries.append(q)
        else:
            bench.corpora.append(Corpus(qid, session_items, [q]))
    if protocol == "turn-global":
        bench.corpora.append(Corpus("all", list(turns.values()), queries))
    bench.notes.append(f"{n_abs} abstention question(s) (_abs) left out, as in LongMemEval's retrieval evaluation")
    if n_noev:
        bench.notes.append(f"{n_noev} question(s) without answer sessions in their haystack were skipped")
    if n_conflict:
        bench.notes.append(f"{n_conflict} turn(s) had the same session id and index but different text; first kept")
    return bench
