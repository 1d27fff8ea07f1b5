"""`lethe serve`: the warm service the `lethe` executable hands frequent commands to."""

import json
import os
import subprocess
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


@pytest.fixture()
def service(tmp_path, cli_env):
    env = dict(cli_env, LETHE_SERVE="1", LETHE_HOME=str(tmp_path / "lethe-home"), LETHE_SERVE_IDLE="300")
    proc = subprocess.Popen([LETHE, "serve"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sock = Path(env["LETHE_HOME"]) / "run" / "serve.sock"
    wait_for(sock.exists, what="the service's socket")
    log = sock.with_name("serve.log")
    wait_for(lambda: log.exists() and "listening" in log.read_text(), what="the service to listen")
    yield env, proc, log
    subprocess.run([LETHE, "serve", "--stop"], env=env, capture_output=True, timeout=60)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()


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
    # between commands the service holds no database: a plain client can write it
    con = duckdb.connect(str(root / ".lethe" / "index" / "lethe.duckdb"))
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
