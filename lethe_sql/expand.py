"""Whole memories by id: what ``lethe expand`` prints and the MCP server's ``get_memory`` returns.

An id may be an unambiguous prefix, or the id of a memory merged into a near-duplicate (the
memory it was merged into is returned, with a note)."""

from __future__ import annotations

from typing import List

from .errors import UsageError


def resolve_ids(con, ids: List[str]) -> list[tuple[str, str | None]]:
    """Each requested id (or unambiguous prefix) -> (entry id, note). Unknown or
    ambiguous ids raise one UsageError naming them all."""
    from .dedup import absorbed_map

    out: list[tuple[str, str | None]] = []
    problems: list[str] = []
    absorbed = None
    for raw in ids:
        want = raw.strip()
        if not want:
            problems.append("an empty id")
            continue
        rows = [r[0] for r in con.execute(
            "SELECT id FROM entries WHERE starts_with(id, ?) ORDER BY id LIMIT 6", [want]).fetchall()]
        if want in rows:
            out.append((want, None))
            continue
        if len(rows) == 1:
            out.append((rows[0], None))
            continue
        if len(rows) > 1:
            problems.append(f"{want} is ambiguous ({', '.join(rows[:5])}{', ...' if len(rows) > 5 else ''})")
            continue
        if absorbed is None:
            absorbed = absorbed_map(con)
        hit = [a for a in absorbed if a.startswith(want)]
        if len(hit) == 1:
            out.append((absorbed[hit[0]], f"{hit[0]} was merged into this near-duplicate"))
            continue
        problems.append(f"no memory with id {want}")
    if problems:
        raise UsageError("; ".join(problems))
    return out


def expand_entries(con, ids: List[str]) -> list[dict]:
    rows = []
    for eid, note in resolve_ids(con, ids):
        r = con.execute(
            "SELECT id, source, heading, created_at, session_id, tier, content, text FROM entries WHERE id = ?", [eid]
        ).fetchone()
        d = dict(zip(("id", "source", "heading", "created_at", "session_id", "tier", "content", "text"), r))
        d["created_at"] = d["created_at"].isoformat() if d["created_at"] else None
        d["occurs_in"] = [
            {"source": s, "heading": h}
            for s, h in con.execute(
                "SELECT source, heading FROM entry_sources WHERE id = ? ORDER BY source, position", [eid]
            ).fetchall()
        ]
        if note:
            d["note"] = note
        rows.append(d)
    return rows
