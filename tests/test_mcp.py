"""`lethe mcp`: a real MCP client session against the server, in-process."""

import json
import subprocess

import anyio
import pytest

from conftest import BIN, write

mcp = pytest.importorskip("mcp")


def _data(result):
    """The structured result of a tool call (every tool has an output schema); its text
    content is the same object as JSON."""
    assert not result.is_error, result
    assert json.loads(result.content[0].text) == result.structured_content
    return result.structured_content


def test_mcp_tools_over_a_client_session(project, embedder, tmp_path, monkeypatch):
    from mcp import Client

    from lethe_sql.agents.mcp_server import build_server

    monkeypatch.setenv("LETHE_HOME", str(tmp_path / "lethe-home"))
    write(project.memory_dir / "2026-11-08.md", "## 10:00 ci\nThe nightly build runs on the arm64 runner.\n")
    project.index()
    project.close()
    server = build_server(project.root, embedder=embedder)

    async def session():
        async with Client(server) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert set(tools) == {"add_memory", "search_memories", "get_memory", "list_projects", "list_memories",
                                  "forget_memory", "undo_forget"}
            hints = {n: t.annotations.model_dump(by_alias=True) for n, t in tools.items()}  # wire names
            for name in ("search_memories", "get_memory", "list_projects", "list_memories"):
                assert hints[name]["readOnlyHint"] is True and hints[name]["destructiveHint"] is False
            assert hints["add_memory"]["readOnlyHint"] is False and hints["add_memory"]["destructiveHint"] is False
            assert hints["forget_memory"]["destructiveHint"] is True

            added = _data(await client.call_tool(
                "add_memory", {"text": "Release tags are signed with key sk-ant-api03-AAAABBBBCCCCDDDDEEEEFFFF0000"}))
            assert added["redacted"] == 1
            hits = _data(await client.call_tool("search_memories", {"query": "which runner builds nightly"}))["results"]
            assert "arm64" in hits[0]["content"]
            full = _data(await client.call_tool("get_memory", {"ids": [added["id"][:8]]}))["memories"]
            assert full[0]["id"] == added["id"] and "[REDACTED:anthropic-key]" in full[0]["content"]
            bad = await client.call_tool("get_memory", {"ids": ["ffffffffffff"]})
            assert (getattr(bad, "is_error", None) or getattr(bad, "isError", None)) is True
            assert bad.content[0].text == "no memory with id ffffffffffff"
            assert _data(await client.call_tool("list_projects", {})) == {"projects": []}

            # memory that stays true: revisions, list, forget and undo
            old = _data(await client.call_tool("add_memory", {"text": "Staging Postgres listens on port 5433."}))
            dup = _data(await client.call_tool("add_memory", {"text": "staging postgres listens on port 5433"}))
            assert old["status"] == "added" and dup == {**dup, "status": "duplicate", "id": old["id"]}
            new = _data(await client.call_tool(
                "add_memory", {"text": "Staging Postgres moved to port 5434.", "supersedes": [old["id"][:8]]}))
            assert new["status"] == "revises" and new["revises"] == [old["id"]]
            hits = _data(await client.call_tool(
                "search_memories", {"query": "which port does staging postgres use"}))["results"]
            assert hits[0]["id"] == new["id"] and hits[1]["superseded_by"] == [new["id"]]
            listed = _data(await client.call_tool("list_memories", {"limit": 2}))["memories"]
            assert [m["id"] for m in listed] == [new["id"], old["id"]]
            dry = _data(await client.call_tool("forget_memory", {"ids": [new["id"]], "dry_run": True}))
            assert dry["dry_run"] is True and dry["ids"] == [new["id"]]
            gone = _data(await client.call_tool("forget_memory", {"ids": [new["id"]]}))
            assert gone["ids"] == [new["id"]]
            hits = _data(await client.call_tool(
                "search_memories", {"query": "which port does staging postgres use"}))["results"]
            assert new["id"] not in [h["id"] for h in hits]
            back = _data(await client.call_tool("undo_forget", {}))
            assert back["ids"] == [new["id"]]
            bad = await client.call_tool("forget_memory", {"ids": ["ffffffffffff"]})
            assert (getattr(bad, "is_error", None) or getattr(bad, "isError", None)) is True

    anyio.run(session)


def test_mcp_command_is_registered(cli_env):
    p = subprocess.run([str(BIN / "lethe"), "mcp", "--help"], env=cli_env, capture_output=True, text=True)
    assert p.returncode == 0 and "stdio" in p.stdout
