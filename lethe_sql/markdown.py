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
  the time of the nearest section above it in the file whose heading states one (a
  ``### Decision`` under ``## 10:05 load test`` was written at 10:05 or later, not
  at midnight), else the file's date (``2026-11-03.md``), else None. ``session_id`` comes from an
  anchor comment ``<!-- lethe session=ID turn=N -->``, else the file's stem.
* Privacy (``privacy.py``): ``<private>...</private>`` spans are cut out of the
  whole file before it is split, and secrets are redacted in every section's
  content, text and heading; ``Chunk.redacted`` counts what was taken out.
* Markers: comment lines ``<!-- lethe key=value flag ... -->`` outside code fences
  (``Marks``). ``supersedes=ID[,ID]``: this memory replaces those (a revision,
  ``revisions.py``); ``distinct=ID[,ID]``: it does not, whatever detection thinks;
  ``forgotten``: the section is a tombstone, never indexed (``forget.py``);
  ``source=add|hook|transcript``: lethe wrote the section; ``session=``/``turn=``:
  the anchor of an agent's turn. A marker is a whole-line comment, so it is not part
  of the indexed text and never changes the id.
* ``dedup_key``: what two memories must share to be duplicates (``dedup.py``): the
  same words in the same order, ignoring case, punctuation, whitespace and the
  articles a/an/the. Any other difference (a number, a name, a path, a negation, a
  word) makes two distinct memories.
"""

from __future__ import annotations

import functools

import hashlib
import re
from dataclasses import dataclass
from datetime import date, datetime, time

# Regexes on user text run in linear time (tests/test_linear_time.py):
# a heading's closing #s are stripped in code, not by a lazy group before [ \t#]*$ (quadratic
# on "## # # # ... x"), and a marker's attributes stop at the next < (no rescan to the end).
_HEADING = re.compile(r"^(#{1,6})[ \t]+(.*)")
_MARKER = re.compile(r"<!--\s*+lethe\b(?P<attrs>[^<>]*)-->")
_MARK_ATTR = re.compile(r"([A-Za-z_][\w-]*)(?:=(\"[^\"]*\"|[^\s\"]+))?")
_FENCE = re.compile(r"^[ \t]{0,3}(`{3,}|~{3,})")
_COMMENT_LINE = re.compile(r"^\s*<!--.*-->\s*$")
_FILE_DATE = re.compile(r"(\d{4})-(\d{2})-(\d{2})")
_HEAD_TS = re.compile(r"(?P<d>\d{4}-\d{2}-\d{2})(?:[ T](?P<t>\d{1,2}:\d{2}(?::\d{2})?))?")
_HEAD_TIME = re.compile(r"^(?P<t>\d{1,2}:\d{2}(?::\d{2})?)\b")
_WS = re.compile(r"\s+")
_WORDS = re.compile(r"\w+")
_ARTICLES = frozenset({"a", "an", "the"})
_PRIVATE_MARK = "\u2063"  # where a private span stood, until its section is known


@dataclass(frozen=True)
class Marks:
    """What a section's ``<!-- lethe ... -->`` marker lines say (module docstring)."""

    supersedes: tuple[str, ...] = ()
    distinct: tuple[str, ...] = ()
    forgotten: bool = False
    origin: str | None = None       # source=: add | hook | transcript (lethe wrote it)
    session: str | None = None

    @property
    def lethe_wrote(self) -> bool:
        return self.origin in ("add", "hook", "transcript")


NO_MARKS = Marks()


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
    marks: Marks = NO_MARKS


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


def dedup_key(text: str) -> str | None:
    """Two texts with the same key say the same thing (module docstring); None for a text
    without a word, which is never a near-duplicate of anything."""
    words = [w for w in _WORDS.findall((text or "").casefold()) if w not in _ARTICLES]
    if not words:
        return None
    return hashlib.sha256(" ".join(words).encode("utf-8")).hexdigest()[:16]


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
    """The date and time ``heading`` gives (a timestamp, or a time on the file's date
    ``fdate``); None when it gives none."""
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
    return None


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
            h = _heading(line)
            if h:
                if h[0] <= 3:
                    continue
                line = h[1]
        out.append(line)
    return "\n".join(out).strip()


def _heading(line: str) -> tuple[int, str] | None:
    """(level, title) of an ATX heading line (closing #s and trailing blanks dropped), else None."""
    m = _HEADING.match(line)
    return (len(m.group(1)), m.group(2).rstrip(" \t#")) if m else None


def _id_list(value: str) -> tuple[str, ...]:
    return tuple(v.strip().lower() for v in value.split(",") if v.strip())


def marks_of(lines: list[str]) -> Marks:
    """The markers of a section's lines (outside code fences)."""
    sup: list[str] = []
    dis: list[str] = []
    forgotten = False
    origin = session = None
    in_fence = False
    for line in lines:
        if _FENCE.match(line):
            in_fence = not in_fence
            continue
        if in_fence or "<!--" not in line:
            continue
        for m in _MARKER.finditer(line):
            for key, raw in _MARK_ATTR.findall(m["attrs"]):
                value = raw.strip('"')
                key = key.lower()
                if key == "supersedes" and value:
                    sup.extend(_id_list(value))
                elif key == "distinct" and value:
                    dis.extend(_id_list(value))
                elif key == "forgotten":
                    forgotten = True
                elif key == "source" and value and origin is None:
                    origin = value
                elif key == "session" and value and session is None:
                    session = value
    return Marks(tuple(dict.fromkeys(sup)), tuple(dict.fromkeys(dis)), forgotten, origin, session)


@dataclass(frozen=True)
class Section:
    """A ``##``/``###`` section (or the preamble) with where it stands in the file."""

    chunk: Chunk            # what the index holds of it (a tombstone's too, for its id)
    start: int              # its first line (its heading line; 0 for the preamble)
    end: int                # one past its last line
    forgotten: bool         # a tombstone: ``<!-- lethe forgotten -->``, never indexed


def _normalise(markdown: str) -> str:
    text = markdown.replace("\r\n", "\n").replace("\r", "\n")
    return text[1:] if text.startswith("\ufeff") else text


def _section_parts(heading: str | None, block: str, fdate):
    """``_parts``, remembered for sections of up to ``_REMEMBER_CHARS`` (so the memo stays
    a few megabytes however big the files are)."""
    return (_parts_remembered if len(block) <= _REMEMBER_CHARS else _parts)(heading, block, fdate)


_REMEMBER_CHARS = 8192


def _parts(heading: str | None, block: str, fdate):
    """What one section's lines hold, secrets redacted: (heading, content, indexed text,
    id, the time its heading gives or None, secrets redacted, marks), or None for a
    section with nothing to index.
    A pure function of its arguments, remembered: a file that grows by one section is
    parsed again whole (by ``lethe add``'s retry check and by the index), and the
    redaction's regexes over its unchanged sections were most of an add's time (about
    110 ms per parse of a 1,000-section day file)."""
    from .privacy import redact_secrets

    lines = block.split("\n")
    body, found = redact_secrets(_index_text(lines))
    if not body:
        return None
    content, found_c = redact_secrets(block.strip())
    if heading:
        heading, found_h = redact_secrets(heading)
        found_c += found_h
    marks = marks_of(lines)
    return (heading, content, body, content_id(body), _heading_time(heading, fdate),
            max(len(found), len(found_c)), marks)


_parts_remembered = functools.lru_cache(maxsize=16384)(_parts)


def sections(markdown: str, filename: str = "") -> list[Section]:
    """Every non-empty section of one memory file, tombstones included, with its line
    span in the file's text after line endings are normalised (``\\r\\n`` -> ``\\n``, BOM
    dropped). Spans are exact unless a ``<private>`` span crosses a line break; see
    ``editable_sections``."""
    from .privacy import strip_private

    # A private span may cross sections: cut it from the whole file, leaving a mark
    # that the section holding its start counts.
    text, n_private = strip_private(_normalise(markdown), _PRIVATE_MARK)
    raw: list[tuple[str | None, int, list[str]]] = [(None, 0, [])]
    in_fence = False
    for i, line in enumerate(text.split("\n")):
        if _FENCE.match(line):
            in_fence = not in_fence
        elif not in_fence:
            m = _heading(line)
            if m and m[0] in (2, 3):
                raw.append((m[1].strip(), i, [line]))
                continue
            if m and m[0] == 1:
                continue  # a title: not part of any chunk's text or content
        raw[-1][2].append(line)
    n_lines = text.count("\n") + 1

    fdate = file_date(filename)
    stem = filename.rsplit("/", 1)[-1].rsplit(".", 1)[0] if filename else None
    out: list[Section] = []
    position = 0
    above = None  # the time of the nearest section above whose heading states one
    for k, (heading, start, lines) in enumerate(raw):
        end = raw[k + 1][1] if k + 1 < len(raw) else n_lines
        n = 0
        if n_private:
            n = sum(line.count(_PRIVATE_MARK) for line in lines)
            lines = [line.replace(_PRIVATE_MARK, "") for line in lines]
            heading = heading.replace(_PRIVATE_MARK, "").strip() if heading else heading
        parts = _section_parts(heading, "\n".join(lines), fdate)
        if parts is None:
            continue
        heading, content, body, cid, stated, redacted, marks = parts
        above = stated or above
        created_at = above or (datetime.combine(fdate, time(0, 0)) if fdate else None)
        chunk = Chunk(
            position=position,
            heading=heading,
            content=content,
            text=body,
            id=cid,
            created_at=created_at,
            session_id=marks.session or stem,
            redacted=n + redacted,
            marks=marks,
        )
        out.append(Section(chunk, start, end, marks.forgotten))
        if not marks.forgotten:
            position += 1
    return out


def parse(markdown: str, filename: str = "") -> list[Chunk]:
    """Split one memory file into chunks (see the module docstring for the rules);
    tombstones (``<!-- lethe forgotten -->``) are left out."""
    return [s.chunk for s in sections(markdown, filename) if not s.forgotten]


def editable_sections(markdown: str, filename: str = "") -> tuple[list[str], list[Section]]:
    """(the file's lines, its sections) for an edit that must not touch anything else.
    ``lines`` keep their line endings, so ``"".join(lines)`` is the file. Refuses (a
    LetheError) a file where a ``<private>`` span crosses a line break: there a
    section's span cannot be trusted."""
    from .errors import LetheError
    from .privacy import strip_private

    name = filename or "the file"
    if markdown.replace("\r\n", "\n").count("\r"):
        raise LetheError(f"{name} has old Mac line endings (a lone carriage return); edit that file by hand")
    lines = [line + "\n" for line in markdown.split("\n")]
    lines[-1] = lines[-1][:-1]
    if not lines[-1]:
        lines.pop()
    stripped, n_private = strip_private(_normalise(markdown), _PRIVATE_MARK)
    if n_private and stripped.count("\n") != _normalise(markdown).count("\n"):
        raise LetheError(f"{name} has a <private> span across lines; edit that file by hand")
    from dataclasses import replace

    return lines, [replace(x, end=min(x.end, len(lines))) for x in sections(markdown, filename)]
