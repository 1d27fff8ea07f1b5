"""Agent hooks: what ``lethe hook session-start`` / ``stop`` / ``codex-notify`` do.

Claude Code runs a hook command with a JSON payload on stdin (``session_id``,
``transcript_path``, ``cwd``, ``hook_event_name``); Codex runs its ``notify``
program with a JSON payload as the last argument. The hooks act only in a project
that has a ``.lethe`` folder (run ``lethe init`` once; ``LETHE_HOOK_AUTO_INIT=1``
creates it on first use instead), and never fail the agent: problems go to stderr
and the exit status stays 0.

* session start: creates today's memory file (``.lethe/memory/YYYY-MM-DD.md``) and
  prints the most recent memories as additional context, at most
  ``LETHE_CONTEXT_TOKENS`` tokens (default 600, about 4 characters a token);
  nothing at all when the project has no memories yet. It reads the markdown
  files, not the index, so it never waits for a database lock.
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

from .mine import SUMMARY_MARKER, Exchange, read_transcript
from .privacy import scrub

NESTED_ENV = "LETHE_HOOK_NESTED"  # set for the `claude -p` child: its own hooks do nothing
DEFAULT_CONTEXT_TOKENS = 600
CHARS_PER_TOKEN = 4
SUMMARY_TIMEOUT = 60.0  # seconds; LETHE_SUMMARY_TIMEOUT overrides it (read when a summary is asked for)

_DAILY = re.compile(r"^\d{4}-\d{2}-\d{2}\.md$")
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
_FACTY = re.compile(r"\d|/|`|\b(?:decid|chose|use[sd]?|fix|because|instead|port|path|must|never|always)\w*", re.I)


def _warn(msg: str) -> None:
    print(f"lethe hook: {msg}", file=sys.stderr)


def project_root(cwd: str | None) -> Path | None:
    """The project a hook acts in: the nearest folder holding ``.lethe``, or None."""
    from .store import LETHE_DIR, find_root

    start = Path(cwd or os.getcwd())
    root = find_root(start)
    if (root / LETHE_DIR).is_dir():
        return root
    if os.environ.get("LETHE_HOOK_AUTO_INIT") == "1":
        from .store import MemoryStore

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


def recent_context(root: Path, budget_tokens: int) -> str:
    """The newest memories (daily files, newest section first) within the budget; never a
    superseded one (the index's list, ``revisions.read_sidecar``, and every
    ``supersedes=`` marker in the files read) nor a forgotten one."""
    from .markdown import parse
    from .revisions import read_sidecar

    mem = root / ".lethe" / "memory"
    files = sorted((p for p in mem.glob("*.md") if _DAILY.match(p.name)), reverse=True)
    budget = max(0, budget_tokens) * CHARS_PER_TOKEN
    header = f'Recent project memory (lethe; more: `lethe search "..." --json`, full entry: `lethe expand ID`):\n'
    lines: list[str] = []
    used = len(header)
    stale = read_sidecar(root / ".lethe" / "index")
    for f in files:  # newest first: a marker stands in a file as new as, or newer than, what it supersedes
        try:
            chunks = parse(f.read_text(encoding="utf-8", errors="replace"), f.name)
        except OSError:
            continue
        stale.update(t for c in chunks for t in c.marks.supersedes)
        for c in reversed(chunks):
            if c.id in stale or any(c.id.startswith(t) for t in stale if len(t) < 16):
                continue
            when = f"{c.created_at:%Y-%m-%d %H:%M}" if c.created_at else f.stem
            body = " ".join(c.text.split())
            room = budget - used - len(when) - 30
            if room < 40:
                return header + "\n".join(lines) if lines else ""
            if len(body) > min(room, 400):
                body = body[: min(room, 400) - 1].rstrip() + "…"
            line = f"- [{when}] {body} (id {c.id})"
            lines.append(line)
            used += len(line) + 1
    return header + "\n".join(lines) if lines else ""


def session_start(payload: dict) -> str:
    """Hook output (JSON for Claude Code) or '' when there is nothing to say."""
    if os.environ.get(NESTED_ENV):
        return ""
    root = project_root(payload.get("cwd"))
    if root is None:
        return ""
    today_file(root)
    try:
        budget = int(os.environ.get("LETHE_CONTEXT_TOKENS", DEFAULT_CONTEXT_TOKENS))
    except ValueError:
        _warn("LETHE_CONTEXT_TOKENS is not a number; using the default")
        budget = DEFAULT_CONTEXT_TOKENS
    ctx = recent_context(root, budget)
    if not ctx:
        return ""
    return json.dumps(
        {"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": ctx}}, ensure_ascii=False
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
    from .store import append_section

    now = datetime.now()
    path = today_file(root, now)
    anchor = f"<!-- lethe session={_SAFE.sub('-', session)} turn={turn} "
    if anchor in path.read_text(encoding="utf-8", errors="replace"):
        return None
    summary = llm_summary(ex) or extractive_summary(ex)
    section = stop_section(session, turn, summary, now, agent)
    return path if append_section(root / ".lethe" / "memory", path, section, unless=anchor) else None


def stop(payload: dict, *, wait: bool = False) -> str:
    """Summarise the last exchange of the payload's transcript; returns a status line."""
    if os.environ.get(NESTED_ENV):
        return "nested session: nothing recorded"
    root = project_root(payload.get("cwd"))
    if root is None:
        return "no .lethe folder here: nothing recorded (run `lethe init`)"
    tp = payload.get("transcript_path")
    if not tp or not Path(tp).expanduser().is_file():
        return "no transcript: nothing recorded"
    if not wait and _summary_command() is not None:
        # an LLM summary takes seconds: the agent does not wait for it
        _detached(["hook", "stop", "--wait"], root, json.dumps(payload))
        return "summarising the last exchange in the background"
    t = read_transcript(Path(tp).expanduser())
    if t is None or not t.exchanges:
        return "no exchange in the transcript yet: nothing recorded"
    ex = t.exchanges[-1]
    session = str(payload.get("session_id") or t.session)
    written = record_exchange(root, session, ex.turn, ex)
    if written is None:
        return f"turn {ex.turn} of {session} was already recorded"
    reindex(root, wait=wait)
    return f"recorded turn {ex.turn} of {session} in {written.relative_to(root).as_posix()}"


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
    # Not `python -m lethe_sql.cli`: that runs the CLI as __main__, a second copy of the
    # module whose --root the subcommands (which import lethe_sql.cli) would not see.
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

    from .errors import LetheError
    from .store import MemoryStore

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
