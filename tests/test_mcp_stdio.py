"""`lethe mcp` as an agent meets it: the real `mcp` client over stdio, a `lethe` subprocess.

What an agent reads (every parameter described, scope an enum, counts bounded, an output
schema on every tool), what it gets back (pinned ids, statuses, order), what an argument
error looks like (one sentence, not the validator's report), and Ctrl-C."""

import json
import os
import signal
import subprocess
import sys
import threading

import anyio
import pytest

from conftest import BIN, write

mcp = pytest.importorskip("mcp")

LETHE = str(BIN / "lethe")
TOOLS = {"add_memory", "search_memories", "get_memory", "list_memories", "forget_memory", "undo_forget",
         "list_projects"}


@pytest.fixture()
def served(project, tmp_path, cli_env):
    """A project with two memories (a person's file), and the environment `lethe mcp` runs in."""
    write(project.memory_dir / "2026-11-08.md",
          "## 10:00 ci\nThe nightly build runs on the arm64 runner.\n\n"
          "## 11:00 db\nStaging Postgres listens on port 5433.\n")
    project.index()
    ids = {r["heading"]: r["id"] for r in project.list_memories()}
    project.close()
    env = dict(cli_env, LETHE_HOME=str(tmp_path / "lethe-home"))
    return project.root, env, ids


def _session(root, env, body):
    """Run ``body(session)`` against `lethe --root ROOT mcp`, started by the mcp stdio client."""
    from mcp import ClientSession, StdioServerParameters, stdio_client

    params = StdioServerParameters(command=LETHE, args=["--root", str(root), "mcp"], env=env, cwd=str(root))

    async def main():
        with anyio.fail_after(240):
            async with stdio_client(params) as (read, write_), ClientSession(read, write_) as session:
                await session.initialize()
                return await body(session)

    return anyio.run(main)


def _ok(result) -> dict:
    assert not result.is_error, result.content
    assert json.loads(result.content[0].text) == result.structured_content  # one JSON text, the same object
    return result.structured_content


def _error(result) -> str:
    assert result.is_error and result.structured_content is None
    (content,) = result.content
    return content.text


def test_every_tool_describes_bounds_and_types_its_parameters_and_result(served):
    root, env, _ = served

    async def body(session):
        return (await session.list_tools()).tools

    tools = {t.name: t for t in _session(root, env, body)}
    assert set(tools) == TOOLS
    for name, tool in tools.items():
        assert tool.description, name
        for param, schema in tool.input_schema.get("properties", {}).items():
            assert schema.get("description"), f"{name}.{param} has no description"
        out = tool.output_schema
        assert out is not None and out["type"] == "object" and out["properties"], name

    search = tools["search_memories"].input_schema
    assert search["required"] == ["query"]
    assert search["properties"]["scope"]["enum"] == ["project", "all"]
    assert search["properties"]["scope"]["default"] == "project"
    top_k = search["properties"]["top_k"]
    assert (top_k["type"], top_k["minimum"], top_k["maximum"], top_k["default"]) == ("integer", 1, 50, 8)
    assert search["properties"]["query"]["minLength"] == 1
    limit = tools["list_memories"].input_schema["properties"]["limit"]
    assert (limit["minimum"], limit["maximum"], limit["default"]) == (1, 500, 20)
    ids = tools["get_memory"].input_schema["properties"]["ids"]
    assert (ids["type"], ids["minItems"], ids["maxItems"], ids["items"]["minLength"]) == ("array", 1, 100, 1)
    assert tools["forget_memory"].annotations.model_dump(by_alias=True)["destructiveHint"] is True
    assert tools["search_memories"].annotations.model_dump(by_alias=True)["readOnlyHint"] is True

    assert set(tools["search_memories"].output_schema["required"]) == {"results", "judge"}
    assert tools["add_memory"].output_schema["properties"]["status"]["enum"] == ["added", "revises", "duplicate"]
    assert set(tools["list_memories"].output_schema["properties"]) == {"memories"}
    assert set(tools["list_projects"].output_schema["properties"]) == {"projects"}


def test_tool_calls_over_stdio_pin_ids_statuses_and_order(served):
    root, env, ids = served
    ci, db = ids["10:00 ci"], ids["11:00 db"]
    question = {"query": "which port does staging postgres use", "top_k": 2}

    async def body(session):
        call = session.call_tool
        out = {"listed": _ok(await call("list_memories", {}))}
        out["new"] = _ok(await call("add_memory", {"text": "Staging Postgres moved to port 5434.",
                                                   "heading": "db move", "supersedes": [db[:8]]}))
        out["again"] = _ok(await call("add_memory", {"text": "The nightly build runs on the arm64 runner."}))
        out["search"] = _ok(await call("search_memories", question))
        out["listed2"] = _ok(await call("list_memories", {"limit": 2}))
        out["got"] = _ok(await call("get_memory", {"ids": [ci[:6]]}))
        out["dry"] = _ok(await call("forget_memory", {"ids": [out["new"]["id"]], "dry_run": True}))
        out["gone"] = _ok(await call("forget_memory", {"ids": [out["new"]["id"]]}))
        out["search_gone"] = _ok(await call("search_memories", question))
        out["back"] = _ok(await call("undo_forget", {}))
        out["search_back"] = _ok(await call("search_memories", question))
        out["projects"] = _ok(await call("list_projects", {}))
        out["unknown"] = _error(await call("forget_memory", {"ids": ["ffffffffffff"]}))
        out["missing"] = _error(await call("get_memory", {"ids": ["ffffffffffff"]}))
        return out

    r = _session(root, env, body)

    assert [m["id"] for m in r["listed"]["memories"]] == [db, ci]  # newest first
    assert [m["superseded_by"] for m in r["listed"]["memories"]] == [None, None]

    new = r["new"]["id"]
    assert r["new"] == {"id": new, "status": "revises", "revises": [db], "duplicate_of": None, "redacted": 0,
                        "written": True}
    assert r["again"] == {"id": ci, "status": "duplicate", "revises": [], "duplicate_of": ci, "redacted": 0,
                          "written": False}

    hits = r["search"]["results"]
    assert [h["id"] for h in hits] == [new, db] and [h["rank"] for h in hits] == [1, 2]
    assert hits[0]["superseded_by"] == [] and hits[1]["superseded_by"] == [new]
    assert hits[0]["heading"].endswith("db move") and "5434" in hits[0]["content"]
    assert r["search"]["judge"] == "late-interaction"  # no cross-encoder installed here

    assert [(m["id"], m["superseded_by"]) for m in r["listed2"]["memories"]] == [(new, None), (db, new)]
    (got,) = r["got"]["memories"]
    assert (got["id"], got["heading"], got["source"]) == (ci, "10:00 ci", ".lethe/memory/2026-11-08.md")

    assert (r["dry"]["dry_run"], r["dry"]["ids"], r["dry"]["undo"]) == (True, [new], None)
    assert r["gone"]["dry_run"] is False and r["gone"]["ids"] == [new]
    assert [f["action"] for f in r["gone"]["forgotten"]] == ["removed"]  # lethe wrote it: out of the file
    assert r["gone"]["undo"]
    assert new not in [h["id"] for h in r["search_gone"]["results"]]
    assert r["search_gone"]["results"][0]["id"] == db and r["search_gone"]["results"][0]["superseded_by"] == []
    assert r["back"]["ids"] == [new] and [f["action"] for f in r["back"]["forgotten"]] == ["restored"]
    assert [h["id"] for h in r["search_back"]["results"]] == [new, db]
    assert r["projects"] == {"projects": []}

    assert r["unknown"] == "no memory with id ffffffffffff (`lethe list` shows ids)"  # lethe's line, no SDK prefix
    assert r["missing"] == "no memory with id ffffffffffff"


ARGUMENT_ERRORS = [
    ("search_memories", {"query": "port", "top_k": -5}, "top_k must be a whole number between 1 and 50"),
    ("search_memories", {"query": "port", "top_k": 51}, "top_k must be a whole number between 1 and 50"),
    ("search_memories", {"query": "port", "top_k": "many"}, "top_k must be a whole number between 1 and 50"),
    ("search_memories", {"query": "port", "scope": "everything"}, "scope must be 'project' or 'all'"),
    ("search_memories", {"query": ""}, "query must not be empty"),
    ("search_memories", {}, "query is required"),
    ("get_memory", {"ids": []}, "ids must list between 1 and 100 items"),
    ("get_memory", {"ids": [""]}, "every item of ids must be a non-empty string"),
    ("get_memory", {"ids": "abc"}, "ids must be a list of strings"),
    ("list_memories", {"since": "last week", "limit": 0},
     "since must be a date as YYYY-MM-DD; limit must be a whole number between 1 and 500"),
    ("forget_memory", {"ids": ["abcd"], "dry_run": "perhaps"}, "dry_run must be true or false"),
]


def test_argument_errors_are_one_sentence_not_the_validators_report(served):
    root, env, _ = served

    async def body(session):
        return [_error(await session.call_tool(tool, arguments)) for tool, arguments, _ in ARGUMENT_ERRORS]

    texts = _session(root, env, body)
    assert texts == [message for _, _, message in ARGUMENT_ERRORS]
    for text in texts:
        assert "pydantic" not in text.lower() and "http" not in text and "\n" not in text


def _readline(stream, timeout: float) -> str:
    """One line from ``stream``, or fail after ``timeout`` seconds (the read runs in a thread)."""
    box: list[str] = []
    done = threading.Event()

    def read():
        box.append(stream.readline())
        done.set()

    threading.Thread(target=read, daemon=True).start()
    assert done.wait(timeout), f"no line within {timeout} s"
    return box[0]


def _initialized(proc) -> dict:
    hello = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
             "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
    proc.stdin.write(json.dumps(hello) + "\n")
    proc.stdin.flush()
    return json.loads(_readline(proc.stdout, 120))


def _interrupted(served, interrupt) -> tuple[int, str]:
    """Start `lethe mcp`, wait until it serves (and waits on stdin), call ``interrupt(proc)``,
    and give its exit status and standard error."""
    root, env, _ = served
    proc = subprocess.Popen([LETHE, "--root", str(root), "mcp"], env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert _initialized(proc)["result"]["serverInfo"]["name"] == "lethe"  # serving, waiting on stdin
        interrupt(proc)
        code = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    return code, proc.stderr.read()


def test_sigint_while_waiting_on_stdin_exits_130_without_a_traceback(served):
    code, err = _interrupted(served, lambda proc: proc.send_signal(signal.SIGINT))
    assert code == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="tgkill: a signal sent to one thread (Linux)")
def test_sigint_taken_by_another_thread_than_the_main_one_still_ends_the_server(served):
    """The kernel may hand a process's SIGINT to any of its threads (onnxruntime's, the one
    reading standard input); a Python handler runs only in the main thread, which waits in
    the event loop. The server must end anyway. The signal goes to one thread other than
    the main one (tgkill)."""
    import ctypes

    tgkill = {"x86_64": 234, "aarch64": 131}.get(os.uname().machine)   # the syscall's number
    if tgkill is None:
        pytest.skip(f"no tgkill number known for {os.uname().machine}")

    def to_another_thread(proc):
        others = sorted(int(t) for t in os.listdir(f"/proc/{proc.pid}/task") if int(t) != proc.pid)
        assert others, "the server runs more than one thread"
        assert ctypes.CDLL(None, use_errno=True).syscall(tgkill, proc.pid, others[-1], signal.SIGINT) == 0

    code, err = _interrupted(served, to_another_thread)
    assert code == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err


def test_closing_stdin_ends_the_server_with_status_0(served):
    root, env, _ = served
    proc = subprocess.Popen([LETHE, "--root", str(root), "mcp"], env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert _initialized(proc)["id"] == 1
        proc.stdin.close()
        code = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    err = proc.stderr.read()
    assert code == 0 and "Traceback" not in err, err
