"""`lethe serve`: the warm service the `lethe` executable hands frequent commands to."""

import contextlib
import fcntl
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

from conftest import BIN, write
from test_agent import EXCHANGES, claude_rows, jl

LETHE = str(BIN / "lethe")


def wait_for(cond, seconds=120.0, what="condition"):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.05)
    pytest.fail(f"timed out waiting for {what}")


@contextlib.contextmanager
def running_service(tmp_path, cli_env, **extra):
    env = dict(cli_env, LETHE_SERVE="1", LETHE_HOME=str(tmp_path / "lethe-home"), LETHE_SERVE_IDLE="300", **extra)
    proc = subprocess.Popen([LETHE, "serve"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sock = Path(env["LETHE_HOME"]) / "run" / "serve.sock"
    try:
        wait_for(sock.exists, what="the service's socket")
        log = sock.with_name("serve.log")
        wait_for(lambda: log.exists() and "listening" in log.read_text(), what="the service to listen")
        yield env, proc, log
    finally:
        subprocess.run([LETHE, "serve", "--stop"], env=env, capture_output=True, timeout=60)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.fixture()
def service(tmp_path, cli_env):
    with running_service(tmp_path, cli_env) as s:
        yield s


def run(args, env, check=True, input=None):
    p = subprocess.run([LETHE, *args], env=env, capture_output=True, text=True, timeout=300, input=input)
    if check and p.returncode != 0:
        raise AssertionError(f"lethe {args} exited {p.returncode}: {p.stderr}")
    return p


def served(log: Path, command: str) -> int:
    return sum(1 for line in log.read_text().splitlines() if f"lethe {command} ->" in line)


def test_commands_run_in_the_service_as_in_their_own_process(service, tmp_path):
    env, proc, log = service
    root = tmp_path / "p"
    r = ["--root", str(root)]
    run([*r, "init"], env)
    added = run([*r, "add", "The nightly export runs at 02:00 UTC."], env)
    assert added.stdout.startswith("added ") and served(log, "add") == 1
    hits = json.loads(run([*r, "search", "when does the export run", "--json"], env).stdout)
    assert served(log, "search") == 1
    cold = json.loads(run([*r, "search", "when does the export run", "--json"], dict(env, LETHE_SERVE="0")).stdout)
    assert [h["id"] for h in hits] == [h["id"] for h in cold] and "02:00" in hits[0]["content"]
    # errors and exit statuses come back as they are
    bad = run([*r, "search", "   "], env, check=False)
    assert bad.returncode == 2 and bad.stderr.startswith("lethe: error: the query is empty")
    assert served(log, "search") == 2
    bad = run([*r, "search", "   ", "--json"], env, check=False)  # under --json: the JSON error on stdout
    assert (bad.returncode, bad.stderr) == (2, "") and served(log, "search") == 3
    assert json.loads(bad.stdout) == {"error": {"message": "the query is empty (or only whitespace)", "kind": "usage"}}
    # between commands the service keeps only a read-only reader: a plain client can read the file
    con = duckdb.connect(str(root / ".lethe" / "index" / "lethe.duckdb"), read_only=True)
    assert con.execute("SELECT count(*) FROM entries").fetchone()[0] == 1
    con.close()
    assert proc.poll() is None


def test_the_stop_hook_through_the_service_reindexes_in_it(service, tmp_path):
    env, _, log = service
    root = tmp_path / "p"
    run(["--root", str(root), "init"], env)
    t = write(tmp_path / "t" / "s.jsonl", jl(claude_rows("s-1", str(root), EXCHANGES[:1])))
    payload = json.dumps({"session_id": "s-1", "transcript_path": str(t), "cwd": str(root),
                          "hook_event_name": "Stop"})
    p = run(["hook", "stop"], dict(env, LETHE_SUMMARY_CMD="none"), input=payload)
    assert p.returncode == 0 and "recorded turn 1" in p.stderr and served(log, "hook") == 1

    def found():
        out = run(["--root", str(root), "search", "reconcile timezone", "--json", "--mode", "bm25"],
                  dict(env, LETHE_SERVE="0"), check=False)
        return out.returncode == 0 and "Europe/Berlin" in out.stdout

    wait_for(found, what="the hook's memory to be indexed by the service")


def test_a_service_running_other_code_steps_aside(service):
    from lethe_sql import client

    env, proc, log = service
    os.environ["LETHE_HOME"] = env["LETHE_HOME"]
    try:
        import socket

        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.connect(str(client.socket_path()))
            client._send(s, {"version": "other-code", "argv": ["list"], "cwd": "/", "env": {}, "stdin": None})
            assert client._recv(s) == {"stale": True}
    finally:
        os.environ.pop("LETHE_HOME")
    proc.wait(timeout=60)
    assert "runs other code" in log.read_text()


def test_a_command_that_finds_no_service_runs_here_and_starts_one(tmp_path, cli_env):
    env = dict(cli_env, LETHE_SERVE="1", LETHE_HOME=str(tmp_path / "lethe-home"), LETHE_SERVE_IDLE="300")
    root = tmp_path / "p"
    run(["--root", str(root), "init"], env)
    try:
        out = run(["--root", str(root), "add", "Started on demand."], env)
        assert out.stdout.startswith("added ")
        sock = Path(env["LETHE_HOME"]) / "run" / "serve.sock"
        wait_for(sock.exists, what="a service started on demand")
        status = json.loads(run(["serve", "--status", "--json"], env).stdout)
        assert status == {"running": True, "socket": str(sock)}
    finally:
        stop = json.loads(run(["serve", "--stop", "--json"], env).stdout)
    assert stop["stopped"] is True


def test_the_prompt_hook_runs_in_the_service_as_cold(service, tmp_path):
    env, _, log = service
    root = tmp_path / "p"
    run(["--root", str(root), "init"], env)
    run(["--root", str(root), "add", "The staging Postgres is pg-stg-2 on pgbouncer port 6543."], env)
    run(["--root", str(root), "add", "Releases are cut every second Tuesday."], env)

    def hook(session, e):
        payload = json.dumps({"session_id": session, "transcript_path": "", "cwd": str(root),
                              "hook_event_name": "UserPromptSubmit",
                              "prompt": "Which host and port does the staging Postgres database use?"})
        p = subprocess.run([LETHE, "hook", "prompt"], env=e, cwd=root, input=payload, capture_output=True,
                           text=True, timeout=300)
        assert p.returncode == 0 and p.stderr == ""
        return json.loads(p.stdout)["hookSpecificOutput"]["additionalContext"]

    warm = hook("w", env)
    assert served(log, "hook") == 1 and "pg-stg-2" in warm and "Tuesday" not in warm
    assert hook("c", dict(env, LETHE_SERVE="0")) == warm
    # the same session again, through the service: nothing new to give
    p = subprocess.run([LETHE, "hook", "prompt"], env=env, cwd=root, capture_output=True, text=True, timeout=300,
                       input=json.dumps({"session_id": "w", "cwd": str(root), "hook_event_name": "UserPromptSubmit",
                                         "prompt": "Which host and port does the staging Postgres database use?"}))
    assert p.returncode == 0 and p.stdout == "" and served(log, "hook") == 2


# -- the kept read-only reader -----------------------------------------------------------------

PG = "The staging Postgres is pg-stg-2 on pgbouncer port 6543."
PG_PROMPT = "Which host and port does the staging Postgres database use?"
EXPORT = "The nightly export job runs at 02:00 UTC from cron on batch-host-3."
EXPORT_PROMPT = "When and where does the nightly export job run?"


def prompt_hook(root, env, session, prompt):
    payload = json.dumps({"session_id": session, "transcript_path": "", "cwd": str(root),
                          "hook_event_name": "UserPromptSubmit", "prompt": prompt})
    p = subprocess.run([LETHE, "hook", "prompt"], env=env, cwd=root, input=payload, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0 and p.stderr == ""
    return json.loads(p.stdout)["hookSpecificOutput"]["additionalContext"] if p.stdout else ""


def log_count(log: Path, text: str) -> int:
    return log.read_text().count(text)


def reader_held(root: Path) -> bool:
    """Whether some process holds the project lock shared (as the service's reader does)."""
    fd = os.open(root / ".lethe" / "index" / ".rw.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def test_a_write_warms_a_reader_that_other_processes_can_read_beside(service, tmp_path):
    env, _, log = service
    root = tmp_path / "p"
    run(["--root", str(root), "init"], env)
    run(["--root", str(root), "add", PG], env)
    # once the add's reply is out, the service opens the project read-only and plans the prompt's search
    wait_for(lambda: log_count(log, f"warmed the reader of {root}") == 1, what="the reader to be warmed")
    assert reader_held(root)
    # a plain DuckDB client, in another process, reads the file meanwhile
    code = ("import duckdb, sys; con = duckdb.connect(sys.argv[1], read_only=True); "
            "print(con.execute('SELECT count(*) FROM entries').fetchone()[0])")
    out = subprocess.run([sys.executable, "-c", code, str(root / ".lethe" / "index" / "lethe.duckdb")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "1", out.stderr
    # the prompt reads through the kept reader: no reopening
    assert "pg-stg-2" in prompt_hook(root, env, "s1", PG_PROMPT)
    assert log_count(log, "closed the reader") == 0 and reader_held(root)


def test_a_writer_in_another_process_gets_through_the_kept_reader(service, tmp_path):
    from lethe_sql.locks import ProjectLock

    env, _, log = service
    root = tmp_path / "p"
    run(["--root", str(root), "init"], env)
    run(["--root", str(root), "add", PG], env)
    wait_for(lambda: log_count(log, "warmed the reader") == 1, what="the reader to be warmed")
    # a lethe writer waits on the gate: the watcher closes the reader, the writer gets the lock
    lock = ProjectLock(root / ".lethe" / "index")
    lock.acquire(exclusive=True, timeout=30)
    lock.release()
    # the reader is closed (which lets the writer in), then logged: wait for the line
    wait_for(lambda: log_count(log, f"closed the reader of {root}: a writer waits") == 1, seconds=10,
             what="the reader's close to be logged")
    assert "pg-stg-2" in prompt_hook(root, env, "s1", PG_PROMPT)  # reopened on the next read
    wait_for(lambda: reader_held(root), seconds=5, what="the reader to be open again")
    # a whole `lethe add` in its own process, then the next prompt sees what it wrote
    cold = dict(env, LETHE_SERVE="0", LETHE_LOCK_TIMEOUT="30")
    assert run(["--root", str(root), "add", EXPORT], cold).stdout.startswith("added ")
    wait_for(lambda: log_count(log, "a writer waits") == 2, seconds=10, what="the second close to be logged")
    assert "batch-host-3" in prompt_hook(root, env, "s2", EXPORT_PROMPT)


def test_the_service_closes_its_reader_before_it_writes_and_reads_what_it_wrote(service, tmp_path):
    env, _, log = service
    root = tmp_path / "p"
    run(["--root", str(root), "init"], env)
    run(["--root", str(root), "add", PG], env)
    assert "pg-stg-2" in prompt_hook(root, env, "s1", PG_PROMPT)
    assert reader_held(root)
    run(["--root", str(root), "add", EXPORT], env)
    assert log_count(log, f"closed the reader of {root}: the service writes") >= 1
    assert "batch-host-3" in prompt_hook(root, env, "s1", EXPORT_PROMPT)  # no stale reader
    # and a search (read-only) through the service finds it too
    hits = json.loads(run(["--root", str(root), "search", "nightly export", "--json"], env).stdout)
    assert "batch-host-3" in hits[0]["content"]


def test_an_unused_reader_is_closed_and_none_is_kept_when_turned_off(tmp_path, cli_env):
    root = tmp_path / "p"
    with running_service(tmp_path, cli_env, LETHE_SERVE_READER_IDLE="0.5") as (env, _, log):
        run(["--root", str(root), "init"], env)
        run(["--root", str(root), "add", PG], env)
        wait_for(lambda: log_count(log, f"closed the reader of {root}: idle") == 1, what="the idle reader to close")
        assert not reader_held(root)
    assert log_count(log, "asked to stop") == 1
    with running_service(tmp_path, cli_env, LETHE_SERVE_READER_IDLE="0") as (env, _, log):
        run(["--root", str(root), "add", EXPORT], env)
        assert "batch-host-3" in prompt_hook(root, env, "s1", EXPORT_PROMPT)
        # the add's write store may still be open when the prompt's answer arrives (it is
        # closed once the queue is empty); after that nothing is held, and no reader was kept
        wait_for(lambda: not reader_held(root), what="the service to let go of the project")
        assert "the reader of" not in log.read_text().split("asked to stop")[-1]
        # with no reader kept, a plain client can write between commands
        con = duckdb.connect(str(root / ".lethe" / "index" / "lethe.duckdb"))
        assert con.execute("SELECT count(*) FROM entries").fetchone()[0] == 2
        con.close()


def test_a_command_that_opens_the_index_its_own_way_closes_the_reader_first(service, tmp_path):
    """`lethe status` opens its own store and a cross-project search ATTACHes the files: in
    the service's process DuckDB would refuse either beside the kept reader."""
    env, _, log = service
    p, q = tmp_path / "p", tmp_path / "q"
    for root, text in ((p, PG), (q, EXPORT)):
        run(["--root", str(root), "init"], env)
        run(["--root", str(root), "add", text], env)
        run(["projects", "add", str(root)], env)
    wait_for(lambda: log_count(log, "warmed the reader") == 2, what="both readers to be warmed")
    assert json.loads(run(["--root", str(p), "status", "--json"], env).stdout)["entries"] == 1
    assert log_count(log, f"closed the reader of {p}: this process opens it another way") == 1
    run(["--root", str(p), "search", "staging postgres"], env)  # the reader again
    hits = json.loads(run(["search", "postgres port", "--all", "--json"], env).stdout)
    assert {h["project"] for h in hits} == {"p", "q"}
