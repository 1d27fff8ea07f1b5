"""LoCoMo (snap-research/LoCoMo ``locomo10.json`` layout, plain or gzipped).

The file is a list of conversations: ``sample_id``, ``conversation`` with
``speaker_a``, ``speaker_b``, ``session_N`` (lists of ``{speaker, dia_id, text}``, some
turns with ``blip_caption``) and ``session_N_date_time``, and ``qa`` with
``question``, ``answer``, ``evidence`` (dia_ids) and ``category`` (1 multi-hop,
2 temporal, 3 open-domain, 4 single-hop, 5 adversarial).

Protocols:

* ``turn-global``: every turn of every conversation is one item of one corpus
  (id ``<sample_id>:<dia_id>``; text ``Speaker: text``, plus ``(image: caption)``
  when the turn shares an image); questions of categories 1-4; relevant = the
  question's evidence turns (grade 1).
* ``session-local``: one corpus per conversation, one item per session (its turns,
  one ``Speaker: text`` line each); relevant = the sessions holding evidence.

Evidence ids are cleaned the way the data needs: ``"D8:6; D9:17"`` is two ids and
``"D:11:26"`` is ``D11:26``; ids that match no turn are dropped and counted, and a
question left without evidence is skipped (both reported in the notes).
"""

from __future__ import annotations

import json
import random
import re
from datetime import datetime
from pathlib import Path

from .data import BenchData, Corpus, Item, Query, read_json, read_jsonl, sha256_file

PROTOCOLS = ("turn-global", "session-local")
CATEGORIES = {"1": "multi-hop", "2": "temporal", "3": "open-domain", "4": "single-hop"}
_SESSION = re.compile(r"^session_(\d+)$")
_DIA = re.compile(r"^D:?(\d+):(\d+)$")


def _session_date(text) -> datetime | None:
    if not isinstance(text, str):
        return None
    for fmt in ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y"):
        try:
            return datetime.strptime(text.strip(), fmt)
        except ValueError:
            continue
    return None


def turn_text(turn: dict) -> str:
    text = f"{turn.get('speaker', '').strip()}: {str(turn.get('text') or '').strip()}"
    caption = turn.get("blip_caption")
    if caption:
        text += f" (image: {str(caption).strip()})"
    return text


def norm_dia_id(raw) -> str:
    """``"D:11:26"`` and ``"D11:26"`` -> ``"D11:26"``; ids of any other shape are kept as written."""
    tok = str(raw).strip()
    m = _DIA.match(tok)
    return f"D{int(m[1])}:{int(m[2])}" if m else tok


def evidence_ids(evidence) -> list[str]:
    """Normalised dia_ids of one question's evidence list (``"D8:6; D9:17"`` is two ids)."""
    if isinstance(evidence, str):
        evidence = [evidence]
    out: list[str] = []
    for raw in evidence or []:
        for tok in re.split(r"[;,\s]+", str(raw)):
            did = norm_dia_id(tok)
            if did and did not in out:
                out.append(did)
    return out


def _sessions(conv: dict) -> list[tuple[int, list[dict], datetime | None]]:
    out = []
    for key, turns in conv.items():
        m = _SESSION.match(key)
        if m and isinstance(turns, list):
            n = int(m[1])
            out.append((n, turns, _session_date(conv.get(f"session_{n}_date_time"))))
    return sorted(out, key=lambda s: s[0])


SUBSETS = ("tune", "report")


def split_conversations(ids: list[str], seed: int = 0) -> dict[str, list[str]]:
    """A seeded split of conversation ids into ``tune`` (the larger half when odd) and
    ``report``: defaults are chosen on ``tune`` questions and reported on ``report``
    questions, whose conversations the tuning never looked at."""
    order = sorted(ids)
    random.Random(seed).shuffle(order)
    half = (len(order) + 1) // 2
    return {"tune": sorted(order[:half]), "report": sorted(order[half:])}


def load(
    path: str | Path,
    protocol: str = "turn-global",
    *,
    limit_conversations: int | None = None,
    subset: str | None = None,
    split_seed: int = 0,
) -> BenchData:
    """``subset`` (``tune`` or ``report``) keeps only the questions of that half of the
    conversations (``split_conversations``); the corpus stays whole, so every run over
    the file searches the same turns."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"LoCoMo has no protocol {protocol!r}; choose one of {', '.join(PROTOCOLS)}")
    path = Path(path)
    try:
        data = read_json(path)
    except json.JSONDecodeError:
        data = read_jsonl(path)  # one conversation per line
    if isinstance(data, dict):  # a single conversation object
        data = [data]
    if not isinstance(data, list) or not all(isinstance(c, dict) and "conversation" in c for c in data):
        raise ValueError(f"{path} is not in LoCoMo layout (a list of objects with 'conversation' and 'qa')")
    if limit_conversations:
        data = data[:limit_conversations]
    keep_questions: set[str] | None = None
    if subset is not None:
        if subset not in SUBSETS:
            raise ValueError(f"--subset is one of {', '.join(SUBSETS)}, not {subset!r}")
        cids = [str(c.get("sample_id") or f"conv-{i}") for i, c in enumerate(data)]
        keep_questions = set(split_conversations(cids, split_seed)[subset])

    bench = BenchData(
        dataset="locomo",
        protocol=protocol,
        path=path,
        corpora=[],
        turn_level=protocol == "turn-global",
        session_level=protocol == "session-local",
        files={path.name: sha256_file(path)},
        category_names=dict(CATEGORIES),
    )
    all_items: list[Item] = []
    all_queries: list[Query] = []
    dropped_ids = skipped = skipped_cat5 = 0
    for ci, conv_obj in enumerate(data):
        cid = str(conv_obj.get("sample_id") or f"conv-{ci}")
        conv = conv_obj["conversation"]
        turn_session: dict[str, str] = {}
        items: list[Item] = []
        for n, turns, when in _sessions(conv):
            sid = f"{cid}:session_{n}"
            lines = []
            for ti, t in enumerate(turns):
                did = norm_dia_id(t.get("dia_id", "")) or f"D{n}:{ti + 1}"
                text = turn_text(t)
                lines.append(text)
                turn_session[did] = sid
                if protocol == "turn-global":
                    items.append(Item(f"{cid}:{did}", text, session=sid, heading=f"{cid} {did}", created_at=when))
            if protocol == "session-local" and lines:
                items.append(Item(sid, "\n".join(lines), session=sid, heading=f"{cid} session {n}", created_at=when))
        queries: list[Query] = []
        for qi, qa in enumerate(conv_obj.get("qa", []) if keep_questions is None or cid in keep_questions else []):
            cat = str(qa.get("category"))
            if cat not in CATEGORIES:
                skipped_cat5 += 1
                continue
            ev = evidence_ids(qa.get("evidence"))
            found = [e for e in ev if e in turn_session]
            dropped_ids += len(ev) - len(found)
            if not found:
                skipped += 1
                continue
            if protocol == "turn-global":
                rel = {f"{cid}:{e}": 1 for e in found}
            else:
                rel = {turn_session[e]: 1 for e in found}
            queries.append(Query(f"{cid}:q{qi}", str(qa.get("question", "")).strip(), rel, cat))
        if protocol == "turn-global":
            all_items.extend(items)
            all_queries.extend(queries)
        else:
            bench.corpora.append(Corpus(cid, items, queries))
    if protocol == "turn-global":
        bench.corpora.append(Corpus("all", all_items, all_queries))
    bench.notes.append(
        f"{len(data)} conversation(s); questions of categories 1-4 only ({skipped_cat5} of category 5 left out)"
    )
    if keep_questions is not None:
        bench.notes.append(
            f"subset {subset} (split seed {split_seed}): questions of {', '.join(sorted(keep_questions))} only; "
            "every conversation's turns are indexed"
        )
    if dropped_ids or skipped:
        bench.notes.append(
            f"{dropped_ids} evidence id(s) matched no turn and were dropped; "
            f"{skipped} question(s) left without evidence were skipped"
        )
    return bench
