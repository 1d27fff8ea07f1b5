"""`--json` everywhere: every command that prints data takes it (one option, one help text),
its output parses, and under `--json` an error is one JSON document on stdout,
``{"error": {"message": ..., "kind": ...}}``, with the usual non-zero exit status."""

import json
import subprocess

import pytest
import typer.main
from typer.testing import CliRunner

from conftest import BIN, write
from lethe_sql.cli import app
from lethe_sql.cli.common import JSON_HELP

#: commands that print no data of their own: an MCP server (JSON-RPC on stdio), the hooks
#: (they print what the agent reads, never fail), the terminal UI
NO_JSON = {"mcp", "tui", "hook session-start", "hook stop", "hook codex-notify", "hook reindex", "hook prompt", "hook pre-compact"}  # hooks print what the agent reads


def _commands(cmd, prefix=""):
    for name, sub in sorted(getattr(cmd, "commands", {}).items()):
        path = f"{prefix}{name}"
        if getattr(sub, "commands", None):
            yield path, sub  # a group that runs by itself (lethe models) can take options too
            yield from _commands(sub, path + " ")
        else:
            yield path, sub


def _json_option(cmd):
    return next((p for p in cmd.params if "--json" in getattr(p, "opts", ())), None)


def test_every_data_command_takes_json_with_one_help_text():
    top = typer.main.get_command(app)
    seen = {}
    for path, cmd in _commands(top):
        opt = _json_option(cmd)
        if opt is not None:
            seen[path] = opt.help
        elif path not in NO_JSON and not getattr(cmd, "commands", None):
            pytest.fail(f"lethe {path} prints data but takes no --json")
    assert {"restore", "demo", "sql", "projects remove", "config set", "config unset", "search", "bench",
            "doctor", "models", "models pull", "serve"} <= set(seen)
    assert set(seen.values()) == {JSON_HELP}, {p: h for p, h in seen.items() if h != JSON_HELP}


@pytest.fixture()
def env(tmp_path, monkeypatch):
    for name, sub in (("HOME", "home"), ("LETHE_HOME", "lethe-home"), ("LETHE_CACHE", "cache"),
                      ("CODEX_HOME", "codex"), ("CLAUDE_CONFIG_DIR", "claude")):
        monkeypatch.setenv(name, str(tmp_path / sub))
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    return tmp_path


def lethe(*args, code=0):
    """``lethe ARGS`` in this process: (stdout parsed as JSON, stderr)."""
    r = CliRunner().invoke(app, [str(a) for a in args])
    assert r.exit_code == code, (args, r.exit_code, r.stdout, r.stderr, r.exception)
    return json.loads(r.stdout), r.stderr


def test_every_data_command_prints_json(env):
    root = env / "proj"
    root.mkdir()
    r = ("--root", root)
    assert lethe(*r, "init", "--json")[0]["root"] == str(root)
    write(root / ".lethe" / "memory" / "2026-11-08.md", "## 10:00 ci\nThe nightly build runs on the arm64 runner.\n")
    assert lethe(*r, "index", "--json")[0]["entries_total"] == 1
    added = lethe(*r, "add", "Staging Postgres listens on port 5433.", "--json")[0]
    assert added["status"] == "added"
    mid = added["id"]

    hits = lethe(*r, "search", "staging postgres port", "--json", "-k", "1")[0]
    assert [h["id"] for h in hits] == [mid]
    assert lethe(*r, "explain", "staging postgres port", "--json")[0]["results"][0]["id"] == mid
    assert [m["id"] for m in lethe(*r, "list", "--json")[0]][0] == mid
    assert lethe(*r, "expand", mid[:8], "--json")[0][0]["id"] == mid
    assert [v["id"] for v in lethe(*r, "revisions", mid, "--json")[0]["versions"]] == [mid]
    assert lethe(*r, "status", "--json")[0]["entries"] == 2
    assert set(lethe(*r, "rif", "status", "--json")[0]) >= {"search_step", "clusters"}
    assert lethe(*r, "restore", mid, "--json")[0] == {"restored": [], "requested": [mid]}  # not apoptotic
    assert lethe(*r, "dedupe", "--dry-run", "--json")[0]["pairs"] == []
    assert lethe(*r, "dedupe", "--list", "--json")[0] == []
    assert lethe(*r, "forget", mid, "--dry-run", "--json")[0]["ids"] == [mid]
    assert lethe(*r, "forget", mid, "--json")[0]["ids"] == [mid]
    assert lethe(*r, "forget", "--undo", "--json")[0]["ids"] == [mid]
    assert "cleared" in lethe(*r, "rif", "reset", "--json")[0]

    registered = lethe("projects", "add", root, "--json")[0]
    assert registered["root"] == str(root) and registered["added"] is False  # `lethe index` registered it
    assert [p["root"] for p in lethe("projects", "list", "--json")[0]] == [str(root)]
    assert lethe("projects", "prune", "--json")[0] == []
    printed = lethe(*r, "sql", "--print", "--json")[0]
    assert printed["projects"] == [registered["slug"]] and printed["statements"][0].startswith("ATTACH ")
    assert lethe("projects", "remove", registered["slug"], "--json")[0]["removed"] is True
    assert lethe("projects", "list", "--json")[0] == []

    assert lethe(*r, "config", "set", "top_k", "7", "--json")[0] == {
        "key": "top_k", "value": 7, "removed": False, "path": str(root / ".lethe" / "config.toml"),
        "overridden_by": None}
    assert lethe(*r, "config", "get", "top_k", "--json")[0]["value"] == 7
    assert lethe(*r, "config", "unset", "top_k", "--json")[0]["removed"] is True
    assert {row["key"] for row in lethe(*r, "config", "list", "--json")[0]} >= {"top_k", "judge"}

    assert [m["role"] for m in lethe("models", "--json")[0]] == ["embedder", "reranker"]
    assert lethe(*r, "enrich", "--dry-run", "--json")[0]["pending"] == 2
    (env / "no-transcripts").mkdir()
    assert lethe(*r, "mine", env / "no-transcripts", "--json")[0]["files"] == 0
    assert lethe("install", "codex", "--no-skills", "--json")[0]["changed"] is True
    assert lethe("serve", "--status", "--json")[0]["running"] is False
    checks = CliRunner().invoke(app, ["--root", str(root), "doctor", "--json"])
    assert {c["title"] for c in json.loads(checks.stdout)["checks"]} >= {"embedder"}


def test_projects_remove_json_is_the_project_removed(env):
    root = env / "p"
    lethe("--root", root, "init", "--json")
    p = lethe("projects", "add", root, "--json")[0]
    out = lethe("projects", "remove", p["slug"], "--json")[0]
    assert out == {"slug": p["slug"], "root": str(root), "registered_at": p["registered_at"], "removed": True}


def test_demo_json(env):
    out = lethe("demo", "--top-k", "1", "--json")[0]
    assert out["files"] >= 1 and out["entries"] >= out["files"]
    assert [s["query"] for s in out["searches"]][0] == "why did the staging deploy fail"
    assert all(len(s["results"]) == 1 for s in out["searches"])
    # the answers a newcomer sees first: the current versions (the moved Postgres port, the
    # decision that replaced the first retry policy), not a follow-up note linked by mistake
    assert [s["results"][0]["heading"] for s in out["searches"]] == [
        "09:41 staging deploy failed",
        "09:20 pgbouncer in the dev compose, postgres moved",
        "Decision: jitter, a 60 s cap, and no second chance for bad events",
        "09:41 why the partial refund test kept breaking",
    ]
    assert out["root"] is None  # a temporary folder, gone


def _error(stdout: str) -> dict:
    data = json.loads(stdout)
    assert set(data) == {"error"} and set(data["error"]) == {"message", "kind"}
    return data["error"]


@pytest.mark.parametrize(("args", "code", "kind", "message"), [
    (["search", "x"], 1, "not_a_project", "{root} has no .lethe folder; run `lethe init` there first"),
    (["forget", "ffffffffffff"], 1, "not_a_project", "{root} has no .lethe folder; run `lethe init` there first"),
    (["config", "set", "no_such_key", "1"], 2, "usage",
     "unknown config key 'no_such_key'; `lethe config list` shows the keys"),
    (["projects", "remove", "nope"], 2, "usage", "no registered project 'nope' (see `lethe projects list`)"),
    (["search", "x", "--top-k", "0"], 2, "usage",
     "Invalid value for '--top-k' / '-k': Input should be greater than or equal to 1"),
    (["search"], 2, "usage", "Missing argument 'query'."),
])
def test_errors_under_json_are_the_json_error_shape(env, args, code, kind, message):
    root = env / "not-a-project"
    root.mkdir()
    r = CliRunner().invoke(app, ["--root", str(root), *args, "--json"])
    assert r.exit_code == code, r.stdout + r.stderr
    assert _error(r.stdout) == {"message": message.format(root=root), "kind": kind}
    assert r.stderr == ""


def test_an_unknown_id_under_json_in_a_project(env):
    root = env / "proj"
    lethe("--root", root, "add", "Staging Postgres listens on port 5433.", "--json")
    r = CliRunner().invoke(app, ["--root", str(root), "forget", "ffffffffffff", "--json"])
    assert r.exit_code == 2
    assert _error(r.stdout) == {"message": "no memory with id ffffffffffff (`lethe list` shows ids)", "kind": "usage"}
    r = CliRunner().invoke(app, ["--root", str(root), "expand", "ffffffffffff"])  # without --json: the line
    assert r.exit_code == 2 and r.stdout == ""
    assert r.stderr == "lethe: error: no memory with id ffffffffffff\n"


def test_json_error_from_the_lethe_executable(tmp_path, cli_env):
    """The real entry point (service off in tests): the error JSON on stdout, nothing on stderr."""
    p = subprocess.run([str(BIN / "lethe"), "--root", str(tmp_path / "none"), "search", "x", "--json"],
                       env=cli_env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 1 and p.stderr == ""
    assert _error(p.stdout) == {"message": f"{tmp_path / 'none'} has no .lethe folder; run `lethe init` there first",
                                "kind": "not_a_project"}
    # `--json` after `--` is an argument, not the option: the error stays a line
    p = subprocess.run([str(BIN / "lethe"), "--root", str(tmp_path / "none"), "search", "--", "--json"],
                       env=cli_env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 1 and p.stdout == "" and p.stderr.startswith("lethe: error: ")
