"""Agent hooks: what ``lethe hook session-start`` / ``prompt`` / ``pre-compact`` / ``stop`` /
``codex-notify`` do.

Claude Code runs a hook command with a JSON payload on stdin (``session_id``,
``transcript_path``, ``cwd``, ``hook_event_name``); Codex runs its ``notify``
program with a JSON payload as the last argument. The hooks act only in a project
that has a ``.lethe`` folder (run ``lethe init`` once; ``LETHE_HOOK_AUTO_INIT=1``
creates it on first use instead), and never fail the agent: problems go to stderr
and the exit status stays 0.

* session start: creates today's memory file (``.lethe/memory/YYYY-MM-DD.md``) and
  prints the most recent memories (daily files and mined transcripts, newest section
  first) as additional context, at most ``start_tokens`` of the session's budget;
  nothing at all when the project has no memories yet. It reads the markdown files,
  not the index, so it never waits for a database lock.
* prompt (UserPromptSubmit): a read-only search for the prompt (never the write lock,
  learns nothing) whose results reach the agent only when their cosine with the prompt
  is at least ``prompt_min_score``; never a superseded one, never one already given in
  the session, at most ``prompt_tokens``; else nothing.
* Both share one budget per session (``context_tokens``, about 4 characters a token)
  and record what they gave in ``.lethe/index/sessions/<session>.json`` (``hookstate``).
* pre-compact: appends the extractive summary of the session's last exchanges to today's
  file under an anchor ``<!-- lethe session=ID compact-turn=N source=hook -->`` (once
  per session and compaction), then reindexes in the background.
* stop: appends a terse summary of the last exchange to today's file under a
  timestamped heading with an anchor ``<!-- lethe session=ID turn=N source=hook -->``
  (written once per session and turn), then reindexes in the background under a
  single-flight lock. The summary comes from ``claude -p --model haiku`` when that
  command exists (``LETHE_SUMMARY_CMD`` overrides it; ``LETHE_SUMMARY_CMD=none``
  turns it off), else it is extractive. With a model summary the whole stop work
  runs in a detached process, so the agent never waits for it.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
from datetime import datetime
from pathlib import Path

from ..privacy import scrub
from .mine import SUMMARY_MARKER, Exchange, read_transcript

NESTED_ENV = "LETHE_HOOK_NESTED"  # set for the `claude -p` child: its own hooks do nothing
CHARS_PER_TOKEN = 4
SUMMARY_TIMEOUT = 60.0  # seconds; LETHE_SUMMARY_TIMEOUT overrides it (read when a summary is asked for)

_DAILY = re.compile(r"^\d{4}-\d{2}-\d{2}\.md$")
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
_FACTY = re.compile(r"\d|/|`|\b(?:decid|chose|use[sd]?|fix|because|instead|port|path|must|never|always)\w*", re.I)


def _warn(msg: str) -> None:
    print(f"lethe hook: {msg}", file=sys.stderr)


def project_root(cwd: str | None) -> Path | None:
    """The project a hook acts in: the nearest folder holding ``.lethe``, or None."""
    from ..store import LETHE_DIR, find_root

    start = Path(cwd or os.getcwd())
    root = find_root(start)
    if (root / LETHE_DIR).is_dir():
        return root
    if os.environ.get("LETHE_HOOK_AUTO_INIT") == "1":
        from ..store import MemoryStore

        root = start.expanduser().resolve()
        MemoryStore(root).init()  # as `lethe init` (with its .gitignore), no database yet
        return root
    return None


def today_file(root: Path, now: datetime | None = None) -> Path:
    now = now or datetime.now()
    path = root / ".lethe" / "memory" / f"{now:%Y-%m-%d}.md"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            with open(path, "x", encoding="utf-8") as fh:
                fh.write(f"# {now:%Y-%m-%d}\n")
        except FileExistsError:
            pass
    return path


# -- session start ---------------------------------------------------------------------


def context_budget(settings) -> tuple[int, int, int]:
    """(whole session, session start, one prompt) in tokens: ``context_tokens``,
    ``start_tokens`` and ``prompt_tokens`` (``settings.py``; the two parts never exceed
    the whole)."""
    total = settings.context_tokens
    return total, min(settings.start_tokens, total), min(settings.prompt_tokens, total)


def _memory_files(root: Path) -> list[tuple[datetime, Path, str]]:
    """The files session start reads, as (latest date a section in it can carry, path,
    name for the parser), latest first: the daily files ``YYYY-MM-DD.md`` (the end of
    their day) and the mined transcripts ``transcripts/*.md`` (the file's mtime: a mined
    exchange is written after it happened). Links that lead out of the folder are skipped."""
    mem = root / ".lethe" / "memory"
    base = mem.resolve()
    out = []
    for folder, prefix in ((mem, ""), (mem / "transcripts", "transcripts/")):
        try:
            names = sorted(p for p in folder.glob("*.md") if not p.name.startswith("."))
        except OSError:
            continue
        for p in names:
            if prefix == "" and not _DAILY.match(p.name):
                continue
            try:
                if p.is_symlink() and not p.resolve(strict=True).is_relative_to(base):
                    continue
                bound = datetime.fromtimestamp(p.stat().st_mtime)
            except (OSError, RuntimeError):
                continue
            if prefix == "":
                try:
                    bound = datetime.combine(datetime.strptime(p.stem, "%Y-%m-%d").date(), datetime.max.time())
                except ValueError:
                    pass
            out.append((bound, p, prefix + p.name))
    out.sort(key=lambda t: (t[0], t[2]), reverse=True)
    return out


def recent_memories(root: Path):
    """The project's memories from the markdown files (daily files and mined transcripts),
    newest section first by its date, as (date, chunk); never a superseded one (the
    index's list, ``revisions.read_sidecar``, and every ``supersedes=`` marker in the
    files read) nor a forgotten one. Files are read lazily, latest first, so a consumer
    that stops early reads only the newest files."""
    import heapq

    from ..markdown import parse
    from ..revisions import read_sidecar

    stale = read_sidecar(root / ".lethe" / "index")
    short = [t for t in stale if len(t) < 16]
    files = _memory_files(root)
    heap: list = []
    i = 0
    while i < len(files) or heap:
        # every section still unread is dated at most files[i]'s bound: what beats it may go out
        while heap and (i >= len(files) or -heap[0][0] >= files[i][0].timestamp()):
            _, _, when, c = heapq.heappop(heap)
            if c.id in stale or any(c.id.startswith(t) for t in short):
                continue
            yield when, c
        if i >= len(files):
            break
        bound, f, name = files[i]
        i += 1
        try:
            chunks = parse(f.read_text(encoding="utf-8", errors="replace"), name)
        except OSError:
            continue
        # a marker stands in a file as new as, or newer than, what it supersedes: read before it goes out
        stale.update(t for c in chunks for t in c.marks.supersedes)
        short = [t for t in stale if len(t) < 16]
        for pos, c in enumerate(chunks):
            when = c.created_at or bound
            # newest first; within one date, the newer file, then later in its file, first
            heapq.heappush(heap, (-when.timestamp(), (i, -pos), when, c))


def _line(when: datetime | None, text: str, ident: str, room: int, cap: int = 400) -> str | None:
    """``- [when] text (id ID)`` in at most ``room`` characters (the text cut to ``cap``), or None."""
    stamp = f"{when:%Y-%m-%d %H:%M}" if when else "?"
    body = " ".join(text.split())
    fit = min(room - len(stamp) - len(ident) - 12, cap)
    if fit < 40:
        return None
    if len(body) > fit:
        body = body[: fit - 1].rstrip() + "…"
    return f"- [{stamp}] {body} (id {ident})"


START_HEADER = "Recent project memory (lethe; more: `lethe search \"...\" --json`, full entry: `lethe expand ID`):\n"


def recent_context(root: Path, budget_tokens: int, skip: set[str] | frozenset = frozenset()) -> tuple[str, list[str]]:
    """The newest memories (``recent_memories``) within ``budget_tokens`` (about 4
    characters a token), leaving out the ids in ``skip``; (context, ids given), or
    ("", []) when nothing fits."""
    budget = max(0, budget_tokens) * CHARS_PER_TOKEN
    lines: list[str] = []
    ids: list[str] = []
    used = len(START_HEADER)
    for when, c in recent_memories(root):
        if c.id in skip or c.id in ids:
            continue
        line = _line(when, c.text, c.id, budget - used)
        if line is None:
            break
        lines.append(line)
        ids.append(c.id)
        used += len(line) + 1
    return (START_HEADER + "\n".join(lines), ids) if lines else ("", [])


def _settings(root: Path):
    from ..settings import load_settings

    return load_settings(root)


def session_start(payload: dict) -> str:
    """Hook output (JSON for Claude Code) or '' when there is nothing to say. What it
    injects is recorded in the session's record (``hookstate``), which starts over when
    the session was cleared or compacted (``source``)."""
    from .hookstate import session_state, tokens

    if os.environ.get(NESTED_ENV):
        return ""
    root = project_root(payload.get("cwd"))
    if root is None:
        return ""
    today_file(root)
    total, start, _ = context_budget(_settings(root))
    session = payload.get("session_id")
    reset = payload.get("source") in ("clear", "compact")
    with session_state(root, session, reset=reset) as st:
        ctx, ids = recent_context(root, min(start, total - st.tokens), st.injected)
        if ctx:
            st.add(ids, tokens(ctx))
    if not ctx:
        return ""
    return json.dumps(
        {"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": ctx}}, ensure_ascii=False
    )


# -- prompt ------------------------------------------------------------------------------

#: prompts shorter than this (characters, or words) get nothing: "yes", "go on", "thanks"
MIN_PROMPT_CHARS = 12
MIN_PROMPT_WORDS = 3
#: what of a long prompt is searched for (the embedder reads 256 tokens at most)
MAX_QUERY_CHARS = 1000
#: memories a prompt may get at most
PROMPT_TOP_K = 3
#: the judge of the prompt's search, and its pool (first stage and judged candidates):
#: smaller than a search's (k_deep 100) to keep the hook fast (bench/results/hook-prompt)
PROMPT_JUDGE = "late-interaction"
PROMPT_POOL = 30
#: the longest a prompt waits for an index that a writer holds (seconds); then it gets nothing
PROMPT_LOCK_WAIT = 0.5
PROMPT_HEADER = "Project memory that may bear on this prompt (lethe; full entry: `lethe expand ID`):\n"

#: set by ``lethe serve``: (root, lock_wait) -> the store it keeps open for that project (for
#: writing while busy, else its read-only reader), or None
KEPT_STORE = None
#: set by ``lethe serve``: runs a clean-up after the reply is sent (closing an index: 10 ms)
AFTER_REPLY = None


def prompt_query(prompt: str) -> str | None:
    """What a prompt searches for, or None when it gets nothing (a slash command, a
    prompt too short to say what it is about)."""
    text = (prompt or "").strip()
    if text.startswith("/") or len(text) < MIN_PROMPT_CHARS or len(text.split(None, MIN_PROMPT_WORDS)) < MIN_PROMPT_WORDS:
        return None
    return text[:MAX_QUERY_CHARS]


def prompt_score(c) -> float:
    """The score a memory must reach (``Settings.prompt_min_score``) for a prompt to get
    it: the cosine of the prompt's and the memory's sentence vectors. Unlike the final
    score (z-scored over the pool, so every search has a "best" memory), it says how
    close the memory is in absolute terms (bench/results/hook-prompt)."""
    return float(c.dense_score) if c.dense_score is not None else float("-inf")


def recall(root: Path, query: str, settings, *, top_k: int | None = None):
    """The search of the prompt hook: read-only (never the write lock), learns nothing,
    the late-interaction judge (the cross-encoder costs about 350 ms), waiting at most
    ``PROMPT_LOCK_WAIT`` for a writer. Returns the search's results (``pipeline.Outcome``)."""
    from ..store import MemoryStore

    k = max(top_k or PROMPT_TOP_K, 1)
    s = settings.with_(top_k=k, depth=max(PROMPT_POOL, k), k_shallow=max(PROMPT_POOL, k), k_deep=max(PROMPT_POOL, k))
    kept = KEPT_STORE(root, lock_wait=PROMPT_LOCK_WAIT) if KEPT_STORE is not None else None
    if kept is not None:  # the service keeps this project open: read through it
        return kept.search_outcome(query, judge=PROMPT_JUDGE, learn=False, settings=s)
    store = MemoryStore(root, read_only=True, create=False, settings=s)
    try:
        store._lock.acquire(exclusive=False, timeout=PROMPT_LOCK_WAIT)
        outcome = store.search_outcome(query, judge=PROMPT_JUDGE, learn=False)
    except BaseException:
        store.close()
        raise
    (AFTER_REPLY or _now)(store.close)  # in the service, closed once the agent has its answer
    return outcome


def _now(fn) -> None:
    fn()


def relevant(outcome, settings, stale: set[str]) -> list:
    """The results a prompt may get: current (nothing supersedes them), at or above the
    abstain threshold, best first."""
    return [c for c in outcome.results
            if c.superseded is None and c.id not in stale and prompt_score(c) >= settings.prompt_min_score]


def prompt_context(hits: list, seen: set[str], budget_tokens: int) -> tuple[str, list[str]]:
    """The prompt hook's context: ``hits`` (best first) not in ``seen``, as many as fit in
    ``budget_tokens``; (context, ids given), or ("", [])."""
    room = max(0, budget_tokens) * CHARS_PER_TOKEN
    used = len(PROMPT_HEADER)
    lines, ids = [], []
    for c in hits:
        if c.id in seen or c.id in ids:
            continue
        line = _line(c.created_at, c.text, c.id, room - used, cap=600)
        if line is None:
            break
        lines.append(line)
        ids.append(c.id)
        used += len(line) + 1
    return (PROMPT_HEADER + "\n".join(lines), ids) if lines else ("", [])


def prompt(payload: dict) -> str:
    """Claude Code UserPromptSubmit: the memories relevant to the prompt as additional
    context (JSON), or '' (nothing relevant, nothing new, budget spent, no index)."""
    from ..errors import DatabaseLocked, NotAProject
    from .hookstate import session_state, tokens
    from ..revisions import read_sidecar

    if os.environ.get(NESTED_ENV):
        return ""
    query = prompt_query(str(payload.get("prompt") or ""))
    if query is None:
        return ""
    root = project_root(payload.get("cwd"))
    if root is None or not (root / ".lethe" / "index" / "lethe.duckdb").exists():
        return ""
    settings = _settings(root)
    total, _, per_prompt = context_budget(settings)
    session = payload.get("session_id")
    with session_state(root, session) as st:
        if min(per_prompt, total - st.tokens) * CHARS_PER_TOKEN < len(PROMPT_HEADER) + 60:
            return ""  # the session's budget is spent: no search at all
    try:
        out = recall(root, query, settings)
    except DatabaseLocked:
        _warn("the index is busy (being written): no memories for this prompt")
        return ""
    except NotAProject:
        return ""
    hits = relevant(out, settings, read_sidecar(root / ".lethe" / "index"))
    if not hits:
        return ""
    with session_state(root, session) as st:
        ctx, ids = prompt_context(hits, st.injected, min(per_prompt, total - st.tokens))
        if not ctx:
            return ""
        st.add(ids, tokens(ctx))
    return json.dumps(
        {"hookSpecificOutput": {"hookEventName": "UserPromptSubmit", "additionalContext": ctx}}, ensure_ascii=False
    )


# -- stop ------------------------------------------------------------------------------


def extractive_summary(ex: Exchange, max_chars: int = 700) -> str:
    """Asked (first sentence or two) and done (the sentences holding facts)."""
    ask = " ".join(ex.user.split())
    ask = ask if len(ask) <= 240 else ask[:239].rstrip() + "…"
    sents = [s.strip(" -*#>") for s in _SENTENCE.split(ex.assistant) if s.strip(" -*#>")]
    picked = [s for s in sents if _FACTY.search(s)] or sents[:2]
    done, n = [], 0
    for s in picked:
        s = " ".join(s.split())
        if n + len(s) > max_chars - len(ask):
            break
        done.append(s)
        n += len(s) + 1
    return f"Asked: {ask}\nDone: {' '.join(done) if done else '(no text answer)'}"


def _summary_command() -> list[str] | None:
    cmd = os.environ.get("LETHE_SUMMARY_CMD")
    if cmd is not None:
        return None if cmd.strip().lower() in ("", "none", "0", "off") else cmd.split()
    exe = shutil.which("claude")
    return [exe, "-p", "--model", "haiku"] if exe else None


def llm_summary(ex: Exchange) -> str | None:
    cmd = _summary_command()
    if cmd is None:
        return None
    # the model is another process (and maybe another machine): it never sees a private span or a secret
    user, assistant = scrub(ex.user).text, scrub(ex.assistant).text
    prompt = (
        f"{SUMMARY_MARKER} Summarise this exchange between a user and a coding agent as a terse memory note "
        "(at most 5 short lines): what was asked and done, decisions, and durable facts such as file paths, "
        "commands, numbers and names. Plain text, no preamble.\n\n"
        f"USER:\n{user[:4000]}\n\nASSISTANT:\n{assistant[:8000]}\n"
    )
    env = dict(os.environ, **{NESTED_ENV: "1"})
    try:
        timeout = float(os.environ.get("LETHE_SUMMARY_TIMEOUT", SUMMARY_TIMEOUT))
    except ValueError:
        _warn(f"LETHE_SUMMARY_TIMEOUT is not a number; using {SUMMARY_TIMEOUT:g} s")
        timeout = SUMMARY_TIMEOUT
    try:
        p = subprocess.run(cmd, input=prompt, capture_output=True, text=True, timeout=timeout, env=env)
    except (OSError, subprocess.TimeoutExpired) as exc:
        _warn(f"summary command failed ({exc}); using an extractive summary")
        return None
    out = p.stdout.strip()
    if p.returncode != 0 or not out:
        _warn(f"summary command exited {p.returncode}; using an extractive summary")
        return None
    return out[:2000]


def stop_section(session: str, turn: int, summary: str, when: datetime, agent: str = "claude") -> str:
    from .mine import _SAFE, _safe_body

    body = _safe_body(scrub(summary).text.strip())
    return (
        f"## {when:%Y-%m-%d %H:%M:%S} {agent} session summary\n"
        f"<!-- lethe session={_SAFE.sub('-', session)} turn={turn} source=hook -->\n\n{body}\n"
    )


def record_exchange(root: Path, session: str, turn: int, ex: Exchange, agent: str = "claude") -> Path | None:
    """Append the summary of ``ex`` to today's file once; returns the file or None when already there."""
    from .mine import _SAFE
    from ..store import append_section

    now = datetime.now()
    path = today_file(root, now)
    anchor = f"<!-- lethe session={_SAFE.sub('-', session)} turn={turn} "
    if anchor in path.read_text(encoding="utf-8", errors="replace"):
        return None
    summary = llm_summary(ex) or extractive_summary(ex)
    section = stop_section(session, turn, summary, now, agent)
    return path if append_section(root / ".lethe" / "memory", path, section, unless=anchor) else None


NO_EXCHANGE = "no exchange in the transcript yet: nothing recorded"


def _transcript_target(payload: dict) -> tuple[Path, Path] | str:
    """(project root, transcript file) of a Claude Code hook that records from the
    transcript (stop, pre-compact), or the status line saying why it records nothing."""
    if os.environ.get(NESTED_ENV):
        return "nested session: nothing recorded"
    root = project_root(payload.get("cwd"))
    if root is None:
        return "no .lethe folder here: nothing recorded (run `lethe init`)"
    tp = payload.get("transcript_path")
    if not tp or not Path(tp).expanduser().is_file():
        return "no transcript: nothing recorded"
    return root, Path(tp).expanduser()


def stop(payload: dict, *, wait: bool = False) -> str:
    """Summarise the last exchange of the payload's transcript; returns a status line."""
    target = _transcript_target(payload)
    if isinstance(target, str):
        return target
    root, tp = target
    if not wait and _summary_command() is not None:
        # an LLM summary takes seconds: the agent does not wait for it
        _detached(["hook", "stop", "--wait"], root, json.dumps(payload))
        return "summarising the last exchange in the background"
    t = read_transcript(tp)
    if t is None or not t.exchanges:
        return NO_EXCHANGE
    ex = t.exchanges[-1]
    session = str(payload.get("session_id") or t.session)
    written = record_exchange(root, session, ex.turn, ex)
    if written is None:
        return f"turn {ex.turn} of {session} was already recorded"
    reindex(root, wait=wait)
    return f"recorded turn {ex.turn} of {session} in {written.relative_to(root).as_posix()}"


def compaction_section(session: str, turn: int, exchanges: list[Exchange], when: datetime, trigger: str,
                       instructions: str = "", agent: str = "claude") -> str:
    """What the session was doing before its context was compacted: the extractive summary
    of each of its last exchanges, scrubbed, under an anchor written once per session and
    compaction (``compact-turn``: the last exchange before it)."""
    from .mine import _SAFE, _safe_body

    parts = [f"Before the context was compacted ({_SAFE.sub('-', trigger or 'auto')}), the last "
             f"{len(exchanges)} exchange(s):"]
    per = max(200, 1400 // max(1, len(exchanges)))
    for ex in exchanges:
        parts.append(f"- turn {ex.turn}. " + extractive_summary(ex, max_chars=per).replace("\n", "\n  "))
    note = " ".join((instructions or "").split())
    if note:
        parts.append(f"Compaction asked to keep: {note[:300]}")
    body = _safe_body(scrub("\n".join(parts)).text.strip())
    return (
        f"## {when:%Y-%m-%d %H:%M:%S} {agent} before compaction\n"
        f"<!-- lethe session={_SAFE.sub('-', session)} compact-turn={turn} source=hook -->\n\n{body}\n"
    )


#: how many of the last exchanges the pre-compact hook summarises
COMPACT_EXCHANGES = 3


def pre_compact(payload: dict, *, wait: bool = False) -> str:
    """Claude Code PreCompact: record what the session was doing (its last exchanges,
    extractive: the agent waits for compaction) in today's file once per session and
    compaction, then reindex in the background; returns a status line."""
    from .mine import _SAFE
    from ..store import append_section

    target = _transcript_target(payload)
    if isinstance(target, str):
        return target
    root, tp = target
    t = read_transcript(tp)
    if t is None or not t.exchanges:
        return NO_EXCHANGE
    last = t.exchanges[-COMPACT_EXCHANGES:]
    turn = last[-1].turn
    session = str(payload.get("session_id") or t.session)
    now = datetime.now()
    path = today_file(root, now)
    anchor = f"<!-- lethe session={_SAFE.sub('-', session)} compact-turn={turn} "
    section = compaction_section(session, turn, last, now, str(payload.get("trigger") or "auto"),
                                 str(payload.get("custom_instructions") or ""))
    if not append_section(root / ".lethe" / "memory", path, section, unless=anchor):
        return f"the compaction after turn {turn} of {session} was already recorded"
    reindex(root, wait=wait)
    return f"recorded the work before compaction (turn {turn} of {session}) in {path.relative_to(root).as_posix()}"


def codex_notify(payload: dict, *, wait: bool = False) -> str:
    """Codex ``notify``: ``agent-turn-complete`` carries the input messages and the last answer."""
    if os.environ.get(NESTED_ENV) or payload.get("type") != "agent-turn-complete":
        return "not a completed turn: nothing recorded"
    root = project_root(payload.get("cwd"))
    if root is None:
        return "no .lethe folder here: nothing recorded (run `lethe init`)"
    msgs = payload.get("input-messages") or payload.get("input_messages") or []
    user = "\n".join(m for m in msgs if isinstance(m, str)).strip()
    answer = str(payload.get("last-assistant-message") or payload.get("last_assistant_message") or "").strip()
    if not user or not answer:
        return "empty turn: nothing recorded"
    session = str(payload.get("thread-id") or payload.get("thread_id") or "codex")
    turn_id = str(payload.get("turn-id") or payload.get("turn_id") or datetime.now().strftime("%H%M%S%f"))
    written = record_exchange(root, session, turn_id, Exchange(0, user, answer), agent="codex")  # type: ignore[arg-type]
    if written is None:
        return "already recorded"
    reindex(root, wait=wait)
    return f"recorded a codex turn in {written.relative_to(root).as_posix()}"


# -- single-flight background reindex ---------------------------------------------------


#: set by ``lethe serve``: the service queues the reindex itself instead of starting a process
BACKGROUND = None


def reindex(root: Path, *, wait: bool = False):
    """Reindex now (``wait``), queued in the service when this runs inside it, or in a
    detached ``lethe hook reindex`` process (returned)."""
    if wait:
        single_flight_index(root)
        return None
    if BACKGROUND is not None:
        BACKGROUND(root)
        return None
    return _detached(["--root", str(root), "hook", "reindex"], root)


def _detached(args: list[str], cwd: Path, stdin: str | None = None):
    """``lethe ARGS`` in a detached process (its own session: it outlives the hook)."""
    # the CLI's entry point in this Python, whatever `lethe` on PATH is
    cmd = [sys.executable, "-c", "from lethe_sql.cli import main; main()", *args]
    try:
        p = subprocess.Popen(
            cmd, cwd=cwd, stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True,
            text=True,
        )
        if stdin is not None:
            p.stdin.write(stdin)
            p.stdin.close()
        return p
    except OSError as exc:
        _warn(f"could not start `lethe {' '.join(args)}` in the background: {exc}")
        return None


def single_flight_index(root: Path, *, attempts: int = 5) -> bool:
    """Index ``root`` unless another process is already at it. A request arriving
    while one runs leaves a ``pending`` mark, and the running one indexes once more,
    so no write is left unindexed and hooks never pile up. The mark is taken away only
    by an index that started after it was made and succeeded: an index that fails (the
    index busy past LETHE_LOCK_TIMEOUT, say) is tried again, ``attempts`` times with
    growing pauses, and then the mark stays for the next hook or `lethe` command.
    Returns whether this process did the work."""
    import time

    from ..errors import LetheError
    from ..store import MemoryStore

    idx = root / ".lethe" / "index"
    idx.mkdir(parents=True, exist_ok=True)
    pending = idx / ".reindex.pending"
    pending.touch()
    did = False
    with open(idx / ".reindex.lock", "a") as lock:
        while pending.exists():
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return did  # the holder will see the pending mark
            try:
                failures = 0
                while pending.exists():
                    try:
                        seen = pending.stat().st_mtime_ns
                    except FileNotFoundError:
                        break
                    try:
                        with MemoryStore(root) as store:
                            store.index()
                    except LetheError as exc:
                        failures += 1
                        if failures >= attempts:
                            _warn(f"reindex failed {failures} times ({exc}); the next hook or `lethe index` retries")
                            return did
                        time.sleep(min(2 ** failures, 30))
                        continue
                    did = True
                    try:
                        if pending.stat().st_mtime_ns == seen:
                            pending.unlink()  # nothing asked for since this index began
                    except FileNotFoundError:
                        pass
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)
    return did
