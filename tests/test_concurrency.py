"""Many agents, one store: the project lock, deferred learning, retries, crashes, corrupt indexes."""

import json
import os
import signal
import subprocess
import threading
import time
from datetime import datetime
from pathlib import Path

import duckdb
import pytest

from conftest import BIN, write

LETHE = str(BIN / "lethe")


def run(args, env=None, check=True, **kw):
    p = subprocess.run([LETHE, *args], env=env, capture_output=True, text=True, timeout=300, **kw)
    if check and p.returncode != 0:
        raise AssertionError(f"lethe {args} exited {p.returncode}: {p.stderr}")
    return p


# -- the lock ------------------------------------------------------------------------


def test_readers_share_a_writer_excludes_and_a_waiting_writer_goes_before_new_readers(tmp_path):
    from lethe_sql.errors import DatabaseLocked
    from lethe_sql.locks import ProjectLock

    r1, r2, w = ProjectLock(tmp_path), ProjectLock(tmp_path), ProjectLock(tmp_path)
    r1.acquire(exclusive=False)
    r2.acquire(exclusive=False, timeout=0)           # readers share
    r2.release()
    with pytest.raises(DatabaseLocked, match="in use by another lethe process"):
        w.acquire(exclusive=True, timeout=0)         # a writer waits for the reader
    got = threading.Event()

    def writer():
        w.acquire(exclusive=True, timeout=30)
        got.set()

    t = threading.Thread(target=writer)
    t.start()
    # once the writer waits (it holds the gate), a new reader queues behind it
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            ProjectLock(tmp_path).acquire(exclusive=False, timeout=0)
        except DatabaseLocked:
            break
        time.sleep(0.01)  # the writer thread has not reached the gate yet
    else:
        pytest.fail("a reader got in while a writer waited")
    assert not got.is_set()
    r1.release()
    t.join(timeout=30)
    assert got.is_set() and w.exclusive
    late = ProjectLock(tmp_path)
    with pytest.raises(DatabaseLocked):
        late.acquire(exclusive=False, timeout=0)
    w.release()
    late.acquire(exclusive=False, timeout=0)
    late.release()


def test_a_bad_lock_timeout_is_one_line(tmp_path, monkeypatch):
    from lethe_sql.errors import UsageError
    from lethe_sql.locks import lock_timeout

    monkeypatch.setenv("LETHE_LOCK_TIMEOUT", "soon")
    with pytest.raises(UsageError, match="LETHE_LOCK_TIMEOUT takes a number"):
        lock_timeout()


def test_a_search_waits_for_a_writer_instead_of_failing(tmp_path, cli_env):
    from lethe_sql.locks import ProjectLock

    root = tmp_path / "p"
    r = ["--root", str(root)]
    run([*r, "init"], cli_env)
    run([*r, "add", "The nightly export runs at 02:00 UTC."], cli_env)
    lock = ProjectLock(root / ".lethe" / "index")
    lock.acquire(exclusive=True)
    p = subprocess.Popen([LETHE, *r, "search", "when does the export run", "--json"], env=cli_env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            p.wait(timeout=2)                   # it waits its turn: no "is locked" failure
    finally:
        lock.release()
    out, err = p.communicate(timeout=300)
    assert p.returncode == 0, err
    assert "02:00" in json.loads(out)[0]["content"]


# -- searches read; learning waits for the next writer ----------------------------------


def test_a_read_only_search_defers_its_learning_to_the_next_writer(project):
    from lethe_sql import MemoryStore
    from lethe_sql.learn import PENDING

    project.add("The deploy pipeline runs on the arm64 runner.")
    project.add("Secrets live in Vault under kv/ledger.")
    project.close()
    ro = MemoryStore(project.root, read_only=True, embedder=project.embedder)
    secret = "ghp_R2d2C3p0L8k9J7h6G5f4D3s2A1q0W9e8R7t6"
    ro.search(f"which runner builds the pipeline {secret}")
    ro.close()
    pending = project.lethe_dir / "index" / PENDING
    line = pending.read_text()
    assert secret not in line and "[REDACTED:github-token]" in line
    assert oct(pending.stat().st_mode & 0o777) == "0o600"
    con = project.con  # a writer opens: the update is applied, the file gone
    assert con.execute("SELECT value FROM meta WHERE key = 'search_step'").fetchone()[0] == "1"
    (q,) = con.execute("SELECT query FROM query_log").fetchone()
    assert secret not in q and "arm64" not in q and q.startswith("which runner builds the pipeline")
    assert not pending.exists()


# -- retries and crashes -------------------------------------------------------------


def test_a_retried_add_whose_first_attempt_was_written_but_not_indexed_is_one_memory(project, monkeypatch):
    from lethe_sql.errors import DatabaseLocked
    from lethe_sql.store import MemoryStore

    real = MemoryStore.index
    calls = {"n": 0}

    def failing_once(self, **kw):
        calls["n"] += 1
        if calls["n"] == 1:
            raise DatabaseLocked("simulated: the index was busy")
        return real(self, **kw)

    monkeypatch.setattr(MemoryStore, "index", failing_once)
    when = datetime(2026, 3, 2, 9, 0)
    with pytest.raises(DatabaseLocked):
        project.add("Retried memories must not be written twice.", when=when)
    again = project.add_memory("Retried memories must not be written twice.", when=when)
    assert again.status == "added"
    text = (project.memory_dir / "2026-03-02.md").read_text()
    assert text.count("Retried memories must not be written twice.") == 1
    assert project.con.execute("SELECT count(*) FROM entry_sources").fetchone()[0] == 1


def test_the_stop_hooks_reindex_keeps_its_mark_when_the_index_fails(project, monkeypatch):
    from lethe_sql.errors import DatabaseLocked
    from lethe_sql.agents.hooks import single_flight_index
    from lethe_sql.store import MemoryStore

    project.close()
    write(project.memory_dir / "2026-11-04.md", "## a\nwritten while the index was busy\n")

    def busy(self, **kw):
        raise DatabaseLocked("simulated: busy")

    monkeypatch.setattr(MemoryStore, "index", busy)
    assert single_flight_index(project.root, attempts=1) is False
    mark = project.lethe_dir / "index" / ".reindex.pending"
    assert mark.exists()                       # the next hook or command still knows
    monkeypatch.undo()
    assert single_flight_index(project.root) is True
    assert not mark.exists()
    assert project.con.execute("SELECT count(*) FROM entries").fetchone()[0] == 1


def invariants(root: Path) -> dict:
    """What must hold after any crash: every section of the files is indexed exactly once."""
    from lethe_sql.markdown import parse

    ids = []
    for f in sorted((root / ".lethe" / "memory").rglob("*.md")):
        ids += [c.id for c in parse(f.read_text(), f.name)]
    con = duckdb.connect(str(root / ".lethe" / "index" / "lethe.duckdb"), read_only=True)
    try:
        entries = [r[0] for r in con.execute("SELECT id FROM entries").fetchall()]
        fts = con.execute("SELECT count(*) FROM fts_main_entries.docs").fetchone()[0]
    finally:
        con.close()
    assert sorted(set(ids)) == sorted(entries), "files and index disagree"
    assert fts == len(entries)
    return {"sections": len(ids), "entries": len(entries)}


@pytest.mark.parametrize("delay", [0.4, 0.9, 1.6])
def test_kill_9_during_index_and_add_loses_and_duplicates_nothing(tmp_path, cli_env, delay):
    root = tmp_path / "p"
    mem = root / ".lethe" / "memory"
    for d in range(1, 13):
        write(mem / f"2026-01-{d:02d}.md", "".join(
            f"## 09:{m:02d} note {d}-{m}\nService s{d} step {m}: restart the worker pool {d * 100 + m}.\n"
            for m in range(25)))
    r = ["--root", str(root)]
    p = subprocess.Popen([LETHE, *r, "index"], env=cli_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(delay)            # where the kill lands is what the parameter varies
    p.send_signal(signal.SIGKILL)
    p.wait()
    run([*r, "index"], cli_env)
    assert invariants(root)["entries"] == 300
    q = subprocess.Popen([LETHE, *r, "add", "Added while a kill was coming."], env=cli_env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(delay)
    q.send_signal(signal.SIGKILL)
    q.wait()
    run([*r, "add", "Added while a kill was coming."], cli_env)   # the retry
    counts = invariants(root)
    assert counts["entries"] == 301
    text = "".join(f.read_text() for f in mem.glob("*.md"))
    assert text.count("Added while a kill was coming.") == 1


# -- corrupt or missing indexes --------------------------------------------------------


@pytest.mark.parametrize("damage", ["garbage", "truncated", "directory"])
def test_a_corrupt_index_is_moved_aside_and_rebuilt_from_the_markdown(tmp_path, cli_env, damage):
    root = tmp_path / "p"
    write(root / ".lethe" / "memory" / "2026-03-01.md", "## 09:00 a\nThe staging bucket is stg-assets.\n"
          "## 10:00 b\nThe prod bucket is prod-assets.\n")
    r = ["--root", str(root)]
    run([*r, "index"], cli_env)
    run([*r, "search", "which bucket holds staging assets"], cli_env)
    db = root / ".lethe" / "index" / "lethe.duckdb"
    run([*r, "index"], cli_env)  # applies what the search learned, checkpoints nothing in particular
    for f in db.parent.glob("lethe.duckdb*"):
        f.unlink()
    if damage == "garbage":
        db.write_bytes(b"not a database " * 1000)
    elif damage == "truncated":
        run([*r, "index"], cli_env)
        con = duckdb.connect(str(db))
        con.execute("CHECKPOINT")
        con.close()
        data = db.read_bytes()
        db.write_bytes(data[: len(data) // 3])
    else:
        db.mkdir()
    p = run([*r, "search", "which bucket holds staging assets", "--json"], cli_env)
    assert json.loads(p.stdout)[0]["content"].endswith("stg-assets.")
    warn = [line for line in p.stderr.splitlines() if "moved to" in line]
    assert len(warn) == 1 and "rebuilt from the markdown" in warn[0] and "learned" in warn[0]
    assert len(list(db.parent.glob("lethe.duckdb.corrupt-*"))) >= 1
    again = run([*r, "search", "which bucket holds staging assets"], cli_env)
    assert "moved to" not in again.stderr    # said once


# -- growth -----------------------------------------------------------------------------


def test_index_keeps_the_file_within_twice_a_fresh_build_under_churn(project, monkeypatch):
    """Deleted rows leave free blocks DuckDB seldom reuses; `index` compacts the file (here
    from any size: the real threshold is 16 MiB) and keeps everything it learned."""
    from lethe_sql.store import MemoryStore

    monkeypatch.setattr(MemoryStore, "COMPACT_MIN_BYTES", 0)
    words = "postgres redis deploy staging port timeout retry webhook invoice ledger cache queue".split()

    def files(gen: dict) -> None:
        for f in range(4):
            write(project.memory_dir / f"2026-01-0{f + 1}.md", "".join(
                f"## {i}\n{' '.join(words[(i + k) % len(words)] for k in range(12))} item{i} version{gen[i]}\n"
                for i in range(f * 40, f * 40 + 40)))

    gen = {i: 0 for i in range(160)}
    files(gen)
    project.index()
    project.con.execute("CHECKPOINT")  # as the 8 MB WAL threshold does in a store of real size
    db = Path(project.db_path)
    fresh = db.stat().st_size
    project.search("staging port timeout")          # learned state that must survive
    sizes, compactions = [], 0
    for r in range(6):
        for i in range(r * 40 % 160, r * 40 % 160 + 40):
            gen[i] += 1
        files(gen)
        for f in project.memory_dir.glob("*.md"):
            os.utime(f, (r + 10, r + 10))
        rep = project.index()
        project.con.execute("CHECKPOINT")
        compactions += rep.compacted
        sizes.append(sum(p.stat().st_size for p in db.parent.glob("lethe.duckdb*")))
    assert compactions >= 1
    assert max(sizes) <= 2 * fresh, (fresh, sizes)
    con = project.con
    assert con.execute("SELECT count(*) FROM entries").fetchone()[0] == 160
    assert con.execute("SELECT value FROM meta WHERE key = 'search_step'").fetchone()[0] == "1"
    assert project.search("staging port timeout", mode="bm25", top_k=1)
