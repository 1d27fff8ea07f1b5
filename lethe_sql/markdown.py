"""Markdown memory files -> chunks, one per ``##`` / ``###`` section.

Rules:

* A line ``## ...`` or ``### ...`` outside a fenced code block starts a section.
* Text before the first such heading is a chunk of its own (its heading is None).
* A top-level ``# ...`` line is the file's title: never a chunk, never indexed.
* The indexed ``text`` drops heading lines (deeper ``####`` headings keep their
  words) and whole-line HTML comments (single- or multi-line); sections whose
  text is then empty are dropped.
* The chunk ``id`` is the first 16 hex digits of sha256 over the indexed text
  with whitespace collapsed: the same words are the same memory wherever they
  stand, and an unchanged section keeps its id when its file changes.
* ``created_at`` comes from a timestamp heading (``## 2026-11-03 14:02``), else
  the file's date (``2026-11-03.md``), else None. ``session_id`` comes from an
  anchor comment ``<!-- lethe session=ID turn=N -->``, else the file's stem.
* Privacy (``privacy.py``): ``<private>...</private>`` spans are cut out of the
  whole file before it is split, and secrets are redacted in every section's
  content, text and heading; ``Chunk.redacted`` counts what was taken out.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from datetime import date, datetime, time

_HEADING = re.compile(r"^(#{1,6})[ \t]+(.*?)[ \t#]*$")
_FENCE = re.compile(r"^[ \t]{0,3}(`{3,}|~{3,})")
_COMMENT_LINE = re.compile(r"^\s*<!--.*-->\s*$")
_ANCHOR = re.compile(r"<!--\s*lethe\b(?P<attrs>[^>]*)-->")
_ATTR = re.compile(r"(\w+)=(\"[^\"]*\"|\S+)")
_FILE_DATE = re.compile(r"(\d{4})-(\d{2})-(\d{2})")
_HEAD_TS = re.compile(r"(?P<d>\d{4}-\d{2}-\d{2})(?:[ T](?P<t>\d{1,2}:\d{2}(?::\d{2})?))?")
_HEAD_TIME = re.compile(r"^(?P<t>\d{1,2}:\d{2}(?::\d{2})?)\b")
_WS = re.compile(r"\s+")
_PRIVATE_MARK = "\u2063"  # where a private span stood, until its section is known


@dataclass(frozen=True)
class Chunk:
    position: int
    heading: str | None
    content: str
    text: str
    id: str
    created_at: datetime | None
    session_id: str | None
    redacted: int = 0       # secrets redacted + private spans removed (privacy.py)


@dataclass(frozen=True)
class Document:
    """A memory from a source other than a markdown file (a transcript turn, a benchmark
    document). ``content`` is stored as written and indexed as is."""

    content: str
    heading: str | None = None
    created_at: datetime | None = None
    session_id: str | None = None

    def to_chunk(self, position: int, source: str) -> "Chunk":
        from .privacy import scrub

        content = scrub(self.content)
        heading = scrub(self.heading) if self.heading else None
        text = content.text.strip()
        return Chunk(
            position, heading.text if heading else None, content.text, text, content_id(text),
            self.created_at, self.session_id, content.count + (heading.count if heading else 0),
        )


def content_id(text: str) -> str:
    """The entry id of an indexed text: sha256 over whitespace-collapsed text, 16 hex digits."""
    norm = _WS.sub(" ", text).strip()
    return hashlib.sha256(norm.encode("utf-8")).hexdigest()[:16]


def file_date(name: str) -> date | None:
    m = _FILE_DATE.search(name)
    if not m:
        return None
    try:
        return date(int(m[1]), int(m[2]), int(m[3]))
    except ValueError:
        return None


def _parse_time(t: str | None) -> time:
    if not t:
        return time(0, 0)
    parts = [int(p) for p in t.split(":")]
    try:
        return time(*parts)
    except ValueError:
        return time(0, 0)


def _heading_time(heading: str | None, fdate: date | None) -> datetime | None:
    if heading:
        m = _HEAD_TS.search(heading)
        if m:
            try:
                d = date.fromisoformat(m["d"])
                return datetime.combine(d, _parse_time(m["t"]))
            except ValueError:
                pass
        m = _HEAD_TIME.match(heading)
        if m and fdate:
            return datetime.combine(fdate, _parse_time(m["t"]))
    return datetime.combine(fdate, time(0, 0)) if fdate else None


def _index_text(lines: list[str]) -> str:
    """Body lines -> indexed text: no chunk headings, no whole-line comments."""
    out: list[str] = []
    in_comment = False
    in_fence = False
    for line in lines:
        if in_comment:
            if "-->" in line:
                in_comment = False
            continue
        if _FENCE.match(line):
            in_fence = not in_fence
            out.append(line)
            continue
        if not in_fence:
            if _COMMENT_LINE.match(line):
                continue
            stripped = line.lstrip()
            if stripped.startswith("<!--") and "-->" not in stripped:
                in_comment = True
                continue
            h = _HEADING.match(line)
            if h:
                if len(h.group(1)) <= 3:
                    continue
                line = h.group(2)
        out.append(line)
    return "\n".join(out).strip()


def _anchor_session(lines: list[str]) -> str | None:
    for line in lines:
        m = _ANCHOR.search(line)
        if m:
            attrs = dict((k, v.strip('"')) for k, v in _ATTR.findall(m["attrs"]))
            if attrs.get("session"):
                return attrs["session"]
    return None


def parse(markdown: str, filename: str = "") -> list[Chunk]:
    """Split one memory file into chunks (see the module docstring for the rules)."""
    from .privacy import redact_secrets, strip_private

    text = markdown.replace("\r\n", "\n").replace("\r", "\n")
    if text.startswith("\ufeff"):
        text = text[1:]
    # A private span may cross sections: cut it from the whole file, leaving a mark
    # that the section holding its start counts.
    text, n_private = strip_private(text, _PRIVATE_MARK)
    sections: list[tuple[str | None, list[str]]] = [(None, [])]
    in_fence = False
    for line in text.split("\n"):
        if _FENCE.match(line):
            in_fence = not in_fence
        elif not in_fence:
            m = _HEADING.match(line)
            if m and len(m.group(1)) in (2, 3):
                sections.append((m.group(2).strip(), [line]))
                continue
            if m and len(m.group(1)) == 1:
                # A title: not part of any chunk's text or content.
                continue
        sections[-1][1].append(line)

    fdate = file_date(filename)
    stem = filename.rsplit("/", 1)[-1].rsplit(".", 1)[0] if filename else None
    chunks: list[Chunk] = []
    for heading, lines in sections:
        n = 0
        if n_private:
            n = sum(line.count(_PRIVATE_MARK) for line in lines)
            lines = [line.replace(_PRIVATE_MARK, "") for line in lines]
            heading = heading.replace(_PRIVATE_MARK, "").strip() if heading else heading
        body, found = redact_secrets(_index_text(lines))
        if not body:
            continue
        content, found_c = redact_secrets("\n".join(lines).strip())
        if heading:
            heading, found_h = redact_secrets(heading)
            found_c += found_h
        chunks.append(
            Chunk(
                position=len(chunks),
                heading=heading,
                content=content,
                text=body,
                id=content_id(body),
                created_at=_heading_time(heading, fdate),
                session_id=_anchor_session(lines) or stem,
                redacted=n + max(len(found), len(found_c)),
            )
        )
    return chunks
