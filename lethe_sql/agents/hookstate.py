"""What the hooks gave one agent session: ``.lethe/index/sessions/<session>.json``.

The session-start and prompt hooks share one token budget per session
(``Settings.context_tokens``) and never inject a memory twice in a session. Each
session's record holds the ids injected and the tokens used::

    {"session": "ID", "injected": ["3f2a...", ...], "tokens": 412, "started": 1767000000.0, "updated": ...}

* **Safe under concurrent hooks.** Every read-modify-write of a record happens under
  ``sessions/.lock`` (``flock``, waited for at most ``LOCK_WAIT`` seconds, polled so it
  works in the service's worker thread too), and a record is replaced whole (temporary
  file + rename), so a reader never sees half of one. The search happens before the
  lock is taken: the lock is held for a file read and a file write.
* **Bounded.** At most ``MAX_IDS`` ids per record (the oldest go first); a record not
  touched for ``MAX_AGE_S`` seconds is deleted, and at most ``MAX_SESSIONS`` records are
  kept (the least recently used go first), checked whenever a new record is made.
* **Derived, never committed**: it lives in the index folder, which ``.lethe/.gitignore``
  leaves out. A record that cannot be read counts as empty.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import time
from pathlib import Path

MAX_IDS = 1000
MAX_SESSIONS = 256
MAX_AGE_S = 7 * 24 * 3600.0
LOCK_WAIT = 2.0
CHARS_PER_TOKEN = 4

_UNSAFE = re.compile(r"[^A-Za-z0-9_.\-]")


class StateBusy(Exception):
    """The session records stayed locked for ``LOCK_WAIT`` seconds."""


def tokens(text: str) -> int:
    """The estimate every hook uses: about 4 characters a token, rounded up."""
    return -(-len(text) // CHARS_PER_TOKEN)


def sessions_dir(root: Path) -> Path:
    return Path(root) / ".lethe" / "index" / "sessions"


def session_key(session: str | None) -> str:
    """A file name for any session id: its safe characters (at most 64), plus a short hash
    whenever that changed anything (so two ids never share a record)."""
    raw = str(session or "no-session")
    safe = _UNSAFE.sub("-", raw)[:64].lstrip(".") or "session"
    if safe != raw:
        safe += "-" + hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()[:10]
    return safe


@contextlib.contextmanager
def _locked(path: Path, wait: float = LOCK_WAIT):
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        deadline = time.monotonic() + wait
        delay = 0.002
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise StateBusy(f"{path} stayed locked for {wait:g} s") from None
                time.sleep(delay)
                delay = min(delay * 2, 0.05)
        yield
    finally:
        os.close(fd)  # closing the descriptor lets go of the lock


def _read(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("injected"), list):
        return None
    try:
        data["tokens"] = max(0, int(data.get("tokens") or 0))
    except (TypeError, ValueError):
        data["tokens"] = 0
    data["injected"] = [str(i) for i in data["injected"]][-MAX_IDS:]
    return data


def _write(path: Path, data: dict) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    os.replace(tmp, path)


def _prune(folder: Path, keep: Path) -> None:
    now = time.time()
    live = []
    for p in folder.glob("*.json"):
        try:
            mtime = p.stat().st_mtime
        except OSError:
            continue
        if p != keep and now - mtime > MAX_AGE_S:
            p.unlink(missing_ok=True)
        else:
            live.append((mtime, p))
    if len(live) > MAX_SESSIONS:
        for _, p in sorted(live)[: len(live) - MAX_SESSIONS]:
            if p != keep:
                p.unlink(missing_ok=True)


class SessionState:
    """One session's record while the lock is held: ``injected`` (ids, in order),
    ``tokens`` (used so far); ``add(ids, n_tokens)`` records an injection."""

    def __init__(self, data: dict) -> None:
        self.data = data

    @property
    def injected(self) -> set[str]:
        return set(self.data["injected"])

    @property
    def tokens(self) -> int:
        return int(self.data["tokens"])

    def add(self, ids, n_tokens: int) -> None:
        seen = self.injected
        self.data["injected"] = (self.data["injected"] + [i for i in ids if i not in seen])[-MAX_IDS:]
        self.data["tokens"] = self.tokens + max(0, int(n_tokens))


@contextlib.contextmanager
def session_state(root: Path, session: str | None, *, reset: bool = False):
    """The record of ``session`` in project ``root``, locked; written back (atomically)
    when the block changed it and left without an exception. ``reset`` starts it over
    (the agent's context was cleared or compacted: what was injected is gone from it)."""
    folder = sessions_dir(root)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{session_key(session)}.json"
    with _locked(folder / ".lock"):
        old = None if reset else _read(path)
        now = time.time()
        data = old or {"session": str(session or ""), "injected": [], "tokens": 0, "started": now}
        before = json.dumps(data, sort_keys=True)
        state = SessionState(data)
        yield state
        if old is None or json.dumps(state.data, sort_keys=True) != before:
            state.data["updated"] = now
            _write(path, state.data)
        if old is None:
            _prune(folder, path)
