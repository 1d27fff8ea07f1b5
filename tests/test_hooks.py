"""The prompt hook, the pre-compact hook, and session start over mined transcripts, with
the per-session record they share (real DuckDB files, the real embedder)."""

import json
import subprocess
import threading
from pathlib import Path

import pytest

from conftest import BIN, write
from test_agent import SECRET, claude_rows, jl

LETHE = str(BIN / "lethe")

DAY1 = """# 2026-03-02

## 09:10 Staging database

Staging Postgres runs on pg-stg-2.int.example.net, pgbouncer port 6543, database app_stg.

## 10:00 Release train

Releases are cut every second Tuesday from the release branch; the changelog lives in CHANGELOG.md.

## 11:00 Nightly export

The nightly export job runs at 02:00 UTC and writes its files to the bucket s3://exports-old.
"""

DAY2 = """# 2026-03-09

## 08:30 Frontend dev server

The web client is built with Vite; `npm run dev` serves it on port 5173 with hot reload.

## 16:00 Nightly export moved
<!-- lethe supersedes={old} -->

The nightly export job now runs at 04:30 UTC and writes its files to the bucket s3://exports-v2.
"""

DB_PROMPT = "What host and port should I use to connect to the staging Postgres database?"
EXPORT_PROMPT = "When does the nightly export job run, and which bucket does it write to?"
UNRELATED = "Write a Haskell function that merges two sorted lists into one sorted list."


@pytest.fixture()
def proj(tmp_path, embedder, monkeypatch):
    from lethe_sql import MemoryStore
    from lethe_sql.markdown import parse

    monkeypatch.delenv("LETHE_CONTEXT_TOKENS", raising=False)
    root = tmp_path / "proj"
    mem = root / ".lethe" / "memory"
    write(mem / "2026-03-02.md", DAY1)
    old = next(c.id for c in parse(DAY1, "2026-03-02.md") if "exports-old" in c.text)
    write(mem / "2026-03-09.md", DAY2.format(old=old))
    with MemoryStore(root, embedder=embedder) as store:
        store.index()
    return root


def ask(root: Path, text: str, session: str = "s1") -> str:
    from lethe_sql.agents.hooks import prompt

    return prompt({"session_id": session, "transcript_path": "", "cwd": str(root),
                   "hook_event_name": "UserPromptSubmit", "prompt": text})


def context(out: str) -> str:
    return json.loads(out)["hookSpecificOutput"]["additionalContext"] if out else ""


def record(root: Path, session: str) -> dict:
    from lethe_sql.agents.hookstate import session_key, sessions_dir

    return json.loads((sessions_dir(root) / f"{session_key(session)}.json").read_text())


def test_prompt_hook_process_injects_the_relevant_memory(proj, cli_env):
    payload = json.dumps({"session_id": "s-9", "transcript_path": "/nowhere.jsonl", "cwd": str(proj),
                          "permission_mode": "default", "hook_event_name": "UserPromptSubmit", "prompt": DB_PROMPT})
    p = subprocess.run([LETHE, "hook", "prompt"], input=payload, env=cli_env, cwd=proj,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and p.stderr == ""
    out = json.loads(p.stdout)
    assert list(out) == ["hookSpecificOutput"]
    assert out["hookSpecificOutput"]["hookEventName"] == "UserPromptSubmit"
    ctx = out["hookSpecificOutput"]["additionalContext"]
    first = ctx.splitlines()[1]
    assert "pg-stg-2.int.example.net" in first and "6543" in first and "lethe expand ID" in ctx
    assert record(proj, "s-9")["tokens"] > 0


def test_prompt_hook_abstains_when_nothing_is_relevant(proj):
    from lethe_sql.agents import hooks
    from lethe_sql.settings import load_settings

    s = load_settings(proj)
    assert ask(proj, UNRELATED) == ""
    # pinned: the search does find something, and the threshold is what keeps it out
    best = max(hooks.prompt_score(c) for c in hooks.recall(proj, UNRELATED, s).results)
    assert best < s.prompt_min_score
    # and the relevant prompt clears it
    assert max(hooks.prompt_score(c) for c in hooks.recall(proj, DB_PROMPT, s).results) >= s.prompt_min_score


def test_short_prompts_and_slash_commands_get_nothing(proj):
    from lethe_sql.agents.hooks import prompt_query

    assert prompt_query("yes go on") is None and prompt_query("/compact keep the db notes") is None
    assert prompt_query("  ") is None
    assert ask(proj, "/review staging Postgres host and port") == ""
    assert prompt_query(DB_PROMPT) == DB_PROMPT


def test_no_memory_twice_in_a_session_but_again_in_a_new_one(proj):
    first = context(ask(proj, DB_PROMPT, "a"))
    assert "pg-stg-2" in first
    again = context(ask(proj, "Remind me of the staging Postgres host and pgbouncer port again", "a"))
    assert "pg-stg-2" not in again
    other = context(ask(proj, DB_PROMPT, "b"))
    assert "pg-stg-2" in other
    rec = record(proj, "a")
    ids = [line.rsplit("(id ", 1)[1].rstrip(")") for line in first.splitlines()[1:]]
    assert set(ids) <= set(rec["injected"])


def test_superseded_memory_is_never_injected(proj, monkeypatch):
    from lethe_sql.agents import hooks
    from lethe_sql.settings import load_settings

    monkeypatch.setattr(hooks, "PROMPT_TOP_K", 5)  # every memory of the project is a result
    out = hooks.recall(proj, EXPORT_PROMPT, load_settings(proj), top_k=5)
    stale = [c for c in out.results if "exports-old" in c.text]
    assert stale and stale[0].superseded is not None  # found, and known to be superseded
    assert hooks.prompt_score(stale[0]) >= load_settings(proj).prompt_min_score  # relevant enough otherwise
    ctx = context(ask(proj, EXPORT_PROMPT))
    assert "exports-v2" in ctx and "exports-old" not in ctx and "02:00" not in ctx


def test_forgotten_memory_is_never_injected(proj, embedder):
    from lethe_sql import MemoryStore
    from lethe_sql.curate import forget

    assert "Vite" in context(ask(proj, "Which port does the Vite dev server for the web client use?", "f1"))
    with MemoryStore(proj, embedder=embedder) as store:
        forget(store, query="npm run dev serves")
    assert "Vite" not in context(ask(proj, "Which port does the Vite dev server for the web client use?", "f2"))
    from lethe_sql.agents.hooks import session_start

    assert "Vite" not in context(session_start({"cwd": str(proj), "session_id": "f3"}))


def test_one_budget_per_session_shared_with_session_start(proj, monkeypatch):
    from lethe_sql.agents.hooks import session_start

    # session start may use the whole session's budget: the prompts then get nothing
    monkeypatch.setenv("LETHE_CONTEXT_TOKENS", "120")
    monkeypatch.setenv("LETHE_START_TOKENS", "600")
    start = context(session_start({"cwd": str(proj), "session_id": "b1", "source": "startup"}))
    assert start and len(start) <= 120 * 4
    used = record(proj, "b1")["tokens"]
    assert 0 < used <= 120
    ask(proj, DB_PROMPT, "b1")
    assert record(proj, "b1")["tokens"] <= 120
    # a prompt's share: at most prompt_tokens, and the session's total never passes context_tokens
    monkeypatch.setenv("LETHE_CONTEXT_TOKENS", "150")
    monkeypatch.setenv("LETHE_PROMPT_TOKENS", "60")
    ctx = context(ask(proj, DB_PROMPT, "b2"))
    assert ctx and len(ctx) <= 60 * 4
    for q in (EXPORT_PROMPT, "Which port does the Vite dev server for the web client use?",
              "How often do we cut releases and where is the changelog?"):
        c = context(ask(proj, q, "b2"))
        assert len(c) <= 60 * 4
    used = record(proj, "b2")["tokens"]
    assert used <= 150
    # a resumed session's start gets only what is left
    start = context(session_start({"cwd": str(proj), "session_id": "b2", "source": "resume"}))
    assert len(start) <= (150 - used) * 4 and record(proj, "b2")["tokens"] <= 150
    # a bad value is one line, never a traceback
    monkeypatch.setenv("LETHE_PROMPT_TOKENS", "lots")
    from lethe_sql.errors import UsageError

    with pytest.raises(UsageError, match="LETHE_PROMPT_TOKENS takes an integer"):
        ask(proj, DB_PROMPT, "b3")


def test_session_start_includes_mined_memories_newest_first_and_the_prompt_does_not_repeat_them(proj, tmp_path):
    from lethe_sql import MemoryStore
    from lethe_sql.agents.hooks import session_start
    from lethe_sql.agents.mine import mine

    t = write(tmp_path / "t" / "m1.jsonl", jl(claude_rows("m1", str(proj), [
        ("Where do the feature flags live?", "Feature flags live in config/flags.yaml and are read by flagd on port 8013.")])))
    with MemoryStore(proj) as store:
        mine(store, [t])
    mined = next((proj / ".lethe" / "memory" / "transcripts").glob("*.md"))
    assert "flagd" in mined.read_text()
    out = json.loads(session_start({"cwd": str(proj), "session_id": "m", "source": "startup",
                                    "hook_event_name": "SessionStart"}))
    lines = out["hookSpecificOutput"]["additionalContext"].splitlines()[1:]
    # the mined exchange (2026-11-20) is newer than every daily memory (March 2026): first
    assert "flagd" in lines[0] and lines[0].startswith("- [2026-11-20 ")
    assert any("pg-stg-2" in line for line in lines) and not any("exports-old" in line for line in lines)
    flag_id = lines[0].rsplit("(id ", 1)[1].rstrip(")")
    assert flag_id in record(proj, "m")["injected"]
    # the prompt hook gives something else, never the mined memory again, in this session
    assert "flagd" not in context(ask(proj, "Where are the feature flags configured, and which port does flagd use?", "m"))
    assert "flagd" in context(ask(proj, "Where are the feature flags configured, and which port does flagd use?", "m2"))
    # a compacted session starts over: its context no longer holds what was injected
    again = context(session_start({"cwd": str(proj), "session_id": "m", "source": "compact"}))
    assert "flagd" in again and record(proj, "m")["injected"][0] == flag_id


def test_session_records_are_safe_under_concurrent_hooks(tmp_path):
    from lethe_sql.agents.hookstate import session_state

    root = tmp_path / "p"
    (root / ".lethe" / "index").mkdir(parents=True)

    def add(k):
        for j in range(20):
            with session_state(root, "shared id/with:odd chars") as st:
                st.add([f"{k}-{j}"], 1)

    threads = [threading.Thread(target=add, args=(k,)) for k in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    rec = record(root, "shared id/with:odd chars")
    assert rec["tokens"] == 80 and len(set(rec["injected"])) == 80
    files = [p.name for p in (root / ".lethe" / "index" / "sessions").iterdir()]
    assert all("/" not in f and ":" not in f for f in files) and not any(f.endswith(".tmp") for f in files)


def test_session_records_are_bounded(tmp_path, monkeypatch):
    import os
    import time

    from lethe_sql.agents import hookstate

    root = tmp_path / "p"
    monkeypatch.setattr(hookstate, "MAX_SESSIONS", 5)
    for i in range(8):
        with hookstate.session_state(root, f"s{i}") as st:
            st.add([f"id{k}" for k in range(hookstate.MAX_IDS + 10)], 1)
    folder = hookstate.sessions_dir(root)
    assert len(list(folder.glob("*.json"))) == 5
    assert len(record(root, "s7")["injected"]) == hookstate.MAX_IDS
    old = folder / "s7.json"
    os.utime(old, (time.time() - hookstate.MAX_AGE_S - 10,) * 2)
    with hookstate.session_state(root, "new") as st:
        pass
    assert not old.exists()


def _compact(root: Path, transcript: Path, session: str = "c-1", wait: bool = True, trigger: str = "auto") -> str:
    from lethe_sql.agents.hooks import pre_compact

    return pre_compact({"session_id": session, "transcript_path": str(transcript), "cwd": str(root),
                        "hook_event_name": "PreCompact", "trigger": trigger, "custom_instructions": ""}, wait=wait)


def test_pre_compact_records_once_per_session_and_compaction(proj, tmp_path):
    ex = [("Why does the reconcile job fail on Mondays?",
           "The reconcile job in jobs/reconcile.py fails because the timezone is UTC; I switched it to Europe/Berlin."),
          (f"Use my token {SECRET} to push the release branch.", "Pushed release/2.4 to origin; CI took 14 minutes.")]
    t = write(tmp_path / "t" / "c-1.jsonl", jl(claude_rows("c-1", str(proj), ex)))
    first = _compact(proj, t)
    assert "recorded the work before compaction (turn 2 of c-1)" in first
    today = sorted((proj / ".lethe" / "memory").glob("20*.md"))[-1]
    text = today.read_text()
    assert text.count("<!-- lethe session=c-1 compact-turn=2 source=hook -->") == 1
    assert "before compaction" in text and "jobs/reconcile.py" in text and "release/2.4" in text
    assert SECRET not in text and "[REDACTED" in text
    # the same compaction again (a retried hook): nothing more
    assert "already recorded" in _compact(proj, t)
    assert today.read_text() == text
    # another session's compaction, and this session's next one, are recorded
    _compact(proj, t, session="c-2")
    with open(t, "a") as fh:
        fh.write(jl(claude_rows("c-1", str(proj), [("Anything else?", "Bumped the Vite port to 5174.")])[1:]))
    assert "turn 3 of c-1" in _compact(proj, t, trigger="manual")
    text = today.read_text()
    assert text.count("compact-turn=") == 3 and text.count("session=c-1 compact-turn=3") == 1
    # and it was indexed (wait=True): a search finds it
    from lethe_sql import MemoryStore

    with MemoryStore(proj, read_only=True, create=False) as store:
        hits = store.search("reconcile job timezone Europe/Berlin", top_k=3, learn=False)
    assert any("before compaction" in (h.heading or "") for h in hits)


def test_pre_compact_cli_never_fails_the_agent(tmp_path, cli_env, proj):
    p = subprocess.run([LETHE, "hook", "pre-compact"], input="{not json", env=cli_env, cwd=proj,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and p.stdout == "" and "not JSON" in p.stderr and len(p.stderr.splitlines()) == 1
    payload = json.dumps({"session_id": "x", "transcript_path": str(tmp_path / "none.jsonl"), "cwd": str(proj),
                          "hook_event_name": "PreCompact", "trigger": "manual", "custom_instructions": ""})
    p = subprocess.run([LETHE, "hook", "pre-compact"], input=payload, env=cli_env, cwd=proj,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and p.stdout == "" and "no transcript" in p.stderr


def test_prompt_hook_waits_briefly_for_a_busy_index_then_gives_nothing(proj):
    from lethe_sql.locks import ProjectLock

    lock = ProjectLock(proj / ".lethe" / "index")
    lock.acquire(exclusive=True)
    try:
        import time

        t0 = time.monotonic()
        assert ask(proj, DB_PROMPT, "busy") == ""
        assert time.monotonic() - t0 < 5
    finally:
        lock.release()
    assert "pg-stg-2" in context(ask(proj, DB_PROMPT, "busy"))


def test_prompt_hook_reads_through_an_index_its_process_holds(proj, embedder, monkeypatch):
    """In `lethe serve`, a project the service holds open (for writing) is read through
    that store: a second connection there would wait for the service's own lock."""
    from lethe_sql import MemoryStore
    from lethe_sql.agents import hooks

    store = MemoryStore(proj, embedder=embedder)
    store.con  # open for writing: the exclusive lock is held
    try:
        monkeypatch.setattr(hooks, "KEPT_STORE", lambda root, lock_wait=None: store if Path(root) == store.root else None)
        assert "pg-stg-2" in context(ask(proj, DB_PROMPT, "k"))
        assert store.con.execute("SELECT count(*) FROM query_log").fetchone()[0] == 0  # learned nothing
    finally:
        store.close()
