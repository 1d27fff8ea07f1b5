"""Agent integration: transcript mining, `lethe expand`, the hooks, `lethe install codex`, the plugin."""

import fcntl
import json
import os
import subprocess
import tomllib
from pathlib import Path

import pytest

from conftest import BIN, REPO, write

LETHE = str(BIN / "lethe")
SECRET = "ghp_R2d2C3p0L8k9J7h6G5f4D3s2A1q0W9e8R7t6"


def run(args, env, input=None, check=True):
    p = subprocess.run([LETHE, *args], env=env, input=input, capture_output=True, text=True, timeout=300)
    if check and p.returncode != 0:
        raise AssertionError(f"lethe {args} exited {p.returncode}: {p.stderr}")
    return p


def jl(rows) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def claude_rows(session: str, cwd: str, exchanges: list[tuple[str, str]]) -> list[dict]:
    """Claude Code JSONL as it writes it: prompts, tool traffic, thinking, reminders."""
    rows: list[dict] = [{"type": "summary", "summary": "a session", "leafUuid": "x"}]
    n = 0

    def base(kind, content, **kw):
        nonlocal n
        n += 1
        role = "user" if kind == "user" else "assistant"
        r = {"type": kind, "sessionId": session, "uuid": f"u{n}", "parentUuid": f"u{n - 1}" if n > 1 else None,
             "timestamp": f"2026-11-20T14:{n:02d}:00.000Z", "cwd": cwd, "isSidechain": False,
             "message": {"role": role, "content": content}, **kw}
        return r

    for i, (user, answer) in enumerate(exchanges):
        rows.append(base("user", user if i % 2 == 0 else [{"type": "text", "text": user}]))
        rows.append(base("assistant", [{"type": "thinking", "thinking": "THOUGHTS-NOT-MEMORY", "signature": "s"}]))
        rows.append(base("assistant", [{"type": "tool_use", "id": f"t{i}", "name": "Bash",
                                        "input": {"command": "cat TOOL-INPUT-NOISE"}}]))
        rows.append(base("user", [{"type": "tool_result", "tool_use_id": f"t{i}", "content": "TOOL-OUTPUT-NOISE"}]))
        rows.append(base("user", "<system-reminder>REMINDER-NOISE</system-reminder>", isMeta=True))
        rows.append(base("assistant", [{"type": "text", "text": answer}]))
    return rows


EXCHANGES = [
    ("Why does the reconcile job fail on Mondays?\n<system-reminder>REMINDER-NOISE</system-reminder>",
     "The reconcile job in jobs/reconcile.py fails because the timezone is UTC; I switched it to Europe/Berlin."),
    (f"Use my token {SECRET} to push the release branch.",
     "Pushed release/2.4 to origin; the CI pipeline took 14 minutes."),
]


@pytest.fixture()
def home(tmp_path, cli_env):
    root = tmp_path / "proj"
    root.mkdir()
    run(["--root", str(root), "init"], cli_env)
    return root, cli_env


def _db_bytes(root: Path) -> bytes:
    idx = root / ".lethe" / "index"
    return b"".join(f.read_bytes() for f in idx.iterdir() if f.name.startswith("lethe.duckdb"))


def test_mine_claude_transcripts_once_with_noise_dropped_and_secrets_redacted(home):
    root, env = home
    claude = Path(env["HOME"]) / ".claude" / "projects" / "-proj"
    t = write(claude / "sess-1.jsonl", jl(claude_rows("sess-1", str(root), EXCHANGES)))
    write(claude / "other.jsonl", jl(claude_rows("other", "/somewhere/else", [("q elsewhere", "a elsewhere")])))
    r = ["--root", str(root)]
    first = json.loads(run([*r, "mine", "--json"], env).stdout)
    assert (first["added"], first["skipped"], first["redacted"], first["files"]) == (2, 0, 1, 1)
    assert first["entries_added"] == 2
    md = (root / ".lethe" / "memory" / "transcripts" / "claude-sess-1.md").read_text()
    assert "<!-- lethe session=sess-1 turn=2 source=transcript" in md and "Europe/Berlin" in md
    for noise in ("THOUGHTS-NOT-MEMORY", "TOOL-INPUT-NOISE", "TOOL-OUTPUT-NOISE", "REMINDER-NOISE", SECRET, "elsewhere"):
        assert noise not in md
    second = json.loads(run([*r, "mine", "--json"], env).stdout)
    assert (second["added"], second["skipped"], second["entries_added"]) == (0, 2, 0)

    # the transcript grows: only the new exchange is mined
    with open(t, "a") as fh:
        fh.write(jl(claude_rows("sess-1", str(root), [("And the flaky test?", "Pinned pytest-randomly seed 1234.")])[1:]))
    third = json.loads(run([*r, "mine", "--json"], env).stdout)
    assert (third["added"], third["skipped"]) == (1, 2)

    hits = run([*r, "search", "which timezone for reconcile", "--json"], env).stdout
    top = json.loads(hits)[0]
    assert "Europe/Berlin" in top["content"] and top["source"] == ".lethe/memory/transcripts/claude-sess-1.md"
    out = run([*r, "search", "push release branch token", "--json"], env).stdout
    assert "release/2.4" in out and SECRET not in out
    exp = json.loads(run([*r, "expand", top["id"][:8], "--json"], env).stdout)[0]
    assert exp["session_id"] == "sess-1" and exp["heading"].endswith("exchange 1")
    assert SECRET.encode() not in _db_bytes(root)


def test_mine_codex_sessions_from_codex_home(home, tmp_path):
    root, env = home
    env = dict(env, CODEX_HOME=str(tmp_path / "cx"))
    rows = [
        {"timestamp": "2026-11-21T09:00:00Z", "type": "session_meta",
         "payload": {"id": "0199-abc", "cwd": str(root), "originator": "codex_cli_rs", "cli_version": "0.50.0"}},
        {"timestamp": "2026-11-21T09:00:01Z", "type": "response_item", "payload": {
            "type": "message", "role": "user",
            "content": [{"type": "input_text", "text": "<environment_context>CWD-NOISE</environment_context>"}]}},
        {"timestamp": "2026-11-21T09:00:02Z", "type": "response_item", "payload": {
            "type": "message", "role": "user", "content": [{"type": "input_text", "text": "Where do the fixtures live?"}]}},
        {"timestamp": "2026-11-21T09:00:03Z", "type": "response_item", "payload": {
            "type": "reasoning", "summary": [{"type": "summary_text", "text": "REASONING-NOISE"}]}},
        {"timestamp": "2026-11-21T09:00:04Z", "type": "response_item", "payload": {
            "type": "function_call", "name": "shell", "arguments": "{\"command\":[\"ls\"]}", "call_id": "c1"}},
        {"timestamp": "2026-11-21T09:00:05Z", "type": "response_item", "payload": {
            "type": "function_call_output", "call_id": "c1", "output": "CALL-OUTPUT-NOISE"}},
        {"timestamp": "2026-11-21T09:00:06Z", "type": "response_item", "payload": {
            "type": "message", "role": "assistant",
            "content": [{"type": "output_text", "text": "They live in tests/fixtures/golden, one folder per bug."}]}},
        {"timestamp": "2026-11-21T09:00:07Z", "type": "event_msg", "payload": {"type": "token_count"}},
    ]
    write(tmp_path / "cx" / "sessions" / "2026" / "11" / "21" / "rollout-2026-11-21T09-00-00-0199-abc.jsonl", jl(rows))
    rep = json.loads(run(["--root", str(root), "mine", "--json"], env).stdout)
    assert (rep["added"], rep["skipped"], rep["redacted"]) == (1, 0, 0)
    md = (root / ".lethe" / "memory" / "transcripts" / "codex-0199-abc.md").read_text()
    assert "tests/fixtures/golden" in md and "Where do the fixtures live?" in md
    assert not any(n in md for n in ("CWD-NOISE", "REASONING-NOISE", "CALL-OUTPUT-NOISE"))


def test_mine_bad_inputs_are_one_line_errors(home, tmp_path):
    root, env = home
    p = run(["--root", str(root), "mine", str(tmp_path / "nope.jsonl")], env, check=False)
    assert p.returncode == 2 and "no such transcript" in p.stderr and "Traceback" not in p.stderr
    junk = write(tmp_path / "junk.jsonl", "not json\n{\"a\": 1}\n")
    p = run(["--root", str(root), "mine", "--json", str(junk)], env)
    assert json.loads(p.stdout)["added"] == 0 and "not a Claude Code or Codex transcript" in p.stderr


def test_expand_prefixes_and_errors(project, tmp_path):
    from lethe_sql.expand import expand_entries
    from lethe_sql.errors import UsageError

    write(project.memory_dir / "2026-11-03.md", "# d\n## 09:00 cache\nThe cache TTL is 300 s.\n## 09:05 db\nPool size 20.\n")
    project.index()
    ids = [r[0] for r in project.con.execute("SELECT id FROM entries ORDER BY id").fetchall()]
    rows = expand_entries(project.con, [ids[0][:6], ids[1]])
    assert [r["id"] for r in rows] == ids
    assert {r["heading"] for r in rows} == {"09:00 cache", "09:05 db"}
    assert all(r["source"] == ".lethe/memory/2026-11-03.md" for r in rows)
    with pytest.raises(UsageError, match="no memory with id zzzz"):
        expand_entries(project.con, ["zzzz"])
    with pytest.raises(UsageError, match="an empty id"):
        expand_entries(project.con, [" "])
    # 17 more entries: two ids share a first hex digit, so that digit is ambiguous
    write(project.memory_dir / "2026-11-05.md", "".join(f"## n{i}\nnote number {i}\n" for i in range(17)))
    project.index()
    firsts = [r[0][0] for r in project.con.execute("SELECT id FROM entries").fetchall()]
    shared = next(c for c in firsts if firsts.count(c) > 1)
    with pytest.raises(UsageError, match=f"{shared} is ambiguous"):
        expand_entries(project.con, [shared])


def test_expand_cli_unknown_id(home):
    root, env = home
    run(["--root", str(root), "add", "a memory to expand"], env)
    p = run(["--root", str(root), "expand", "ffffffffffff"], env, check=False)
    assert p.returncode == 2 and p.stderr.strip() == "lethe: error: no memory with id ffffffffffff"


def test_stop_hook_appends_a_section_once_and_it_becomes_searchable(home, tmp_path):
    root, env = home
    t = write(tmp_path / "t.jsonl", jl(claude_rows("s-42", str(root), EXCHANGES)))
    payload = json.dumps({"session_id": "s-42", "transcript_path": str(t), "cwd": str(root),
                          "hook_event_name": "Stop", "stop_hook_active": False})
    env = dict(env, PATH=f"{BIN}:/usr/bin:/bin")  # no `claude` here: extractive summary
    p = run(["hook", "stop", "--wait"], env, input=payload)
    assert p.stdout == "" and "recorded turn 2 of s-42" in p.stderr
    today = next((root / ".lethe" / "memory").glob("20*.md"))
    text = today.read_text()
    assert "<!-- lethe session=s-42 turn=2 source=hook -->" in text and "release/2.4" in text
    assert SECRET not in text
    again = run(["hook", "stop", "--wait"], env, input=payload)
    assert "already recorded" in again.stderr and today.read_text() == text
    hits = json.loads(run(["--root", str(root), "search", "release branch pushed CI minutes", "--json"], env).stdout)
    assert hits[0]["heading"].endswith("claude session summary") and "14 minutes" in hits[0]["content"]

    # with a `claude` command on PATH its summary is used (a stand-in script here)
    fake = write(tmp_path / "bin" / "claude", "#!/bin/sh\ncat >/dev/null\necho \"Summary: CI takes 14 min; used $*\"\n")
    fake.chmod(0o755)
    with open(t, "a") as fh:
        fh.write(jl(claude_rows("s-42", str(root), [("Anything else?", "No, done.")])[1:]))
    run(["hook", "stop", "--wait"], dict(env, PATH=f"{fake.parent}:{env['PATH']}"), input=payload)
    assert "Summary: CI takes 14 min; used -p --model haiku" in today.read_text()


def test_hooks_do_nothing_outside_a_project_and_never_fail(tmp_path, cli_env):
    payload = json.dumps({"session_id": "s", "transcript_path": "/nope", "cwd": str(tmp_path), "hook_event_name": "Stop"})
    p = run(["hook", "stop"], cli_env, input=payload)
    assert p.returncode == 0 and "no .lethe folder" in p.stderr
    p = run(["hook", "session-start"], cli_env, input="{not json")
    assert p.returncode == 0 and p.stdout == "" and "not JSON" in p.stderr
    assert not (tmp_path / ".lethe").exists()


def test_session_start_context_is_budgeted(tmp_path, monkeypatch):
    from lethe_sql.agents.hooks import session_start

    root = tmp_path / "p"
    (root / ".lethe" / "memory").mkdir(parents=True)
    assert session_start({"cwd": str(root)}) == ""  # no memory yet: nothing injected
    assert list((root / ".lethe" / "memory").glob("*.md"))  # today's file exists
    write(root / ".lethe" / "memory" / "2026-11-01.md",
          "# d\n" + "".join(f"## 09:{i:02d}\nMemory number {i} about the build cache {'x' * 80}.\n" for i in range(40)))
    monkeypatch.setenv("LETHE_CONTEXT_TOKENS", "200")
    out = json.loads(session_start({"cwd": str(root), "hook_event_name": "SessionStart"}))
    ctx = out["hookSpecificOutput"]["additionalContext"]
    assert out["hookSpecificOutput"]["hookEventName"] == "SessionStart"
    assert len(ctx) <= 200 * 4 and "Memory number 39" in ctx and "Memory number 0 " not in ctx
    assert "lethe expand ID" in ctx


def test_single_flight_reindex(project):
    from lethe_sql.agents.hooks import single_flight_index

    project.close()
    idx = project.lethe_dir / "index"
    write(project.memory_dir / "2026-11-04.md", "## a\nsingle flight memory\n")
    with open(idx / ".reindex.lock", "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        assert single_flight_index(project.root) is False  # someone else is at it: leave a mark, return
        assert (idx / ".reindex.pending").exists()
        fcntl.flock(held, fcntl.LOCK_UN)
    assert single_flight_index(project.root) is True
    assert not (idx / ".reindex.pending").exists()
    assert project.con.execute("SELECT count(*) FROM entries").fetchone()[0] == 1
    project.close()

    # the hooks' way: a detached `lethe hook reindex` process
    from lethe_sql.agents.hooks import reindex

    write(project.memory_dir / "2026-11-04.md", "## a\nsingle flight memory\n## b\nindexed in the background\n")
    assert reindex(project.root).wait(timeout=120) == 0
    assert project.con.execute("SELECT count(*) FROM entries").fetchone()[0] == 2


def test_install_codex_is_idempotent_and_touches_nothing_else(tmp_path, cli_env):
    cx = tmp_path / "cx"
    original = 'model = "o4-mini"\n# my comment\n\n[mcp_servers.other]\ncommand = "other"\n\n[profiles.fast]\nmodel = "x"\n'
    write(cx / "config.toml", original)
    env = dict(cli_env, CODEX_HOME=str(cx))
    first = json.loads(run(["install", "codex", "--json"], env).stdout)
    text = (cx / "config.toml").read_text()
    cfg = tomllib.loads(text)
    assert first["changed"] and first["notify"]
    assert cfg["notify"] == ["lethe", "hook", "codex-notify"] and cfg["model"] == "o4-mini"
    assert cfg["mcp_servers"]["other"]["command"] == "other" and "notify" not in cfg["profiles"]["fast"]
    assert cfg["mcp_servers"]["lethe"] == {"command": "lethe", "args": ["mcp"]}
    assert text.count("# >>> lethe") == 2
    assert original in text
    skill = cx / "skills" / "lethe-recall" / "SKILL.md"
    assert "name: lethe-recall" in skill.read_text() and 'lethe search "' in skill.read_text()
    second = json.loads(run(["install", "codex", "--json"], env).stdout)
    assert not second["changed"] and (cx / "config.toml").read_text() == text
    run(["install", "codex", "--uninstall"], env)
    assert (cx / "config.toml").read_text() == original and not skill.exists()

    write(cx / "config.toml", 'notify = ["my-notifier"]\n[mcp_servers.lethe]\ncommand = "mine"')
    rep = json.loads(run(["install", "codex", "--json"], env).stdout)
    assert not rep["notify"] and "already sets `notify`" in rep["notes"][0] and "mcp_servers.lethe" in rep["notes"][1]
    assert (cx / "config.toml").read_text() == 'notify = ["my-notifier"]\n[mcp_servers.lethe]\ncommand = "mine"'
    write(cx / "config.toml", 'model = "m"')  # no final newline: still restored byte for byte
    run(["install", "codex"], env)
    run(["install", "codex", "--uninstall"], env)
    assert (cx / "config.toml").read_text() == 'model = "m"'
    write(cx / "config.toml", "this is = = not toml\n")
    p = run(["install", "codex"], env, check=False)
    assert p.returncode == 2 and "not valid TOML" in p.stderr
    assert (cx / "config.toml").read_text() == "this is = = not toml\n"


def test_codex_notify_records_a_turn(home):
    root, env = home
    payload = {"type": "agent-turn-complete", "thread-id": "th-1", "turn-id": "7", "cwd": str(root),
               "input-messages": ["Rename the config loader"], "last-assistant-message": "Renamed load_cfg to load_config in app/config.py."}
    p = run(["hook", "codex-notify", json.dumps(payload), "--wait"], dict(env, LETHE_SUMMARY_CMD="none"))
    assert "recorded a codex turn" in p.stderr
    text = next((root / ".lethe" / "memory").glob("20*.md")).read_text()
    assert "session=th-1 turn=7" in text and "app/config.py" in text


def test_plugin_layout_and_skills():
    market = json.loads((REPO / ".claude-plugin" / "marketplace.json").read_text())
    entry = market["plugins"][0]
    plugin = REPO / entry["source"]
    manifest = json.loads((plugin / ".claude-plugin" / "plugin.json").read_text())
    assert manifest["name"] == entry["name"] == "lethe"
    hooks = json.loads((plugin / "hooks" / "hooks.json").read_text())["hooks"]
    assert hooks["SessionStart"][0]["hooks"][0]["command"] == "lethe hook session-start"
    assert hooks["Stop"][0]["hooks"][0]["command"] == "lethe hook stop"
    recall = (plugin / "skills" / "recall" / "SKILL.md").read_text()
    glob = (plugin / "skills" / "recall-global" / "SKILL.md").read_text()
    assert recall.startswith("---\nname: recall\n") and glob.startswith("---\nname: recall-global\n")
    assert 'lethe search "<question in plain words>" --json' in recall and "lethe expand <ID>" in recall
    assert "nothing relevant" in recall
    assert "--all --json" in glob and "project" in glob
    for name in ("recall", "recall-global"):  # the packaged copy (used by `lethe install codex`) is the same
        assert (REPO / "lethe_sql" / "skills" / name / "SKILL.md").read_text() == \
            (plugin / "skills" / name / "SKILL.md").read_text()


def test_auto_init_makes_a_project_like_lethe_init(tmp_path, monkeypatch):
    from lethe_sql.agents.hooks import project_root

    assert project_root(str(tmp_path)) is None
    monkeypatch.setenv("LETHE_HOOK_AUTO_INIT", "1")
    assert project_root(str(tmp_path)) == tmp_path.resolve()
    assert (tmp_path / ".lethe" / ".gitignore").read_text().strip().endswith("index/")


def test_the_summariser_is_sent_no_private_span_and_no_secret(tmp_path, monkeypatch):
    """`claude -p` (here a stand-in that keeps its stdin) gets the exchange scrubbed."""
    import sys

    from lethe_sql.agents.hooks import llm_summary
    from lethe_sql.agents.mine import Exchange

    seen = tmp_path / "prompt.txt"
    script = write(tmp_path / "summarise.py",
                   "import pathlib, sys\npathlib.Path(sys.argv[1]).write_text(sys.stdin.read())\nprint('Summary: pushed')\n")
    monkeypatch.setenv("LETHE_SUMMARY_CMD", f"{sys.executable} {script} {seen}")
    password = "Xk9fQ2mLp7vR3tZ8w"
    ex = Exchange(3, f"Push with my token {SECRET}. <private>my home is 42 Elm Street</private> Thanks.",
                  f"Pushed release/2.4; I set DATABASE_PASSWORD={password} in .env as you asked.")
    assert llm_summary(ex) == "Summary: pushed"
    prompt = seen.read_text()
    assert "Push with my token [REDACTED:github-token]" in prompt and "Pushed release/2.4" in prompt
    assert SECRET not in prompt and password not in prompt and "Elm Street" not in prompt
