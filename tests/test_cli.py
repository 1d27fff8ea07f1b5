"""The `lethe` command as a user runs it: real processes, a temporary project root."""

import json
import subprocess
import sys
import textwrap

import pytest

from conftest import BIN, write

LETHE = str(BIN / "lethe")


def run(args, env, cwd=None, input=None, check=True):
    p = subprocess.run([LETHE, *args], env=env, cwd=cwd, input=input, capture_output=True, text=True, timeout=300)
    if check and p.returncode != 0:
        raise AssertionError(f"lethe {args} exited {p.returncode}: {p.stderr}")
    return p


def test_init_add_index_search_status(tmp_path, cli_env):
    root = tmp_path / "proj"
    root.mkdir()
    r = ["--root", str(root)]
    run([*r, "init"], cli_env)
    assert (root / ".lethe" / "memory").is_dir() and (root / ".lethe" / ".gitignore").read_text().strip().endswith("index/")
    added = json.loads(run([*r, "add", "--json", "Local postgres runs on port 5433; 5432 is the system one."], cli_env).stdout)
    run([*r, "add", "-"], cli_env, input="Webhook retries: five attempts, exponential backoff from 2 s.\n")
    write(root / ".lethe" / "memory" / "2026-10-30.md", "# day\n## 10:00 ci\nThe reconcile test is flaky because of timezones.\n")
    idx = json.loads(run([*r, "index", "--json"], cli_env).stdout)
    assert idx["entries_added"] == 1 and idx["entries_total"] == 3

    hits = json.loads(run([*r, "search", "which port for local postgres", "--json", "--top-k", "2"], cli_env).stdout)
    assert len(hits) == 2
    assert {"id", "content", "score", "source"} <= hits[0].keys()
    assert hits[0]["id"] == added["id"] and "5433" in hits[0]["content"]
    assert hits[0]["source"].startswith(".lethe/memory/")
    assert hits[0]["reranked"] is True and hits[0]["judge"] == "late-interaction"  # no cross-encoder here

    text = run([*r, "search", "flaky timezone test", "-k", "1"], cli_env).stdout
    assert "2026-10-30.md" in text and "no cross-encoder installed" in text
    plain = run([*r, "search", "flaky timezone test", "-k", "1", "--judge", "none"], cli_env).stdout
    assert "not reranked" in plain

    st = json.loads(run([*r, "status", "--json"], cli_env).stdout)
    assert st["entries"] == 3 and st["indexed_files"] == 2 and st["embedder"]["name"] == "all-MiniLM-L6-v2"

    # explain names the judge and how many candidates it scored (all 3: fewer than k_shallow)
    head = run([*r, "explain", "flaky timezone test", "-k", "2"], cli_env).stdout.splitlines()[0]
    assert head.startswith("judge: late-interaction   judged: 3 (deep pass: no)"), head
    head = run([*r, "explain", "flaky timezone test", "--judge", "none"], cli_env).stdout.splitlines()[0]
    assert head.startswith("judge: none   cluster: 0"), head


def test_root_defaults_to_the_enclosing_project(tmp_path, cli_env):
    root = tmp_path / "proj"
    (root / "src" / "deep").mkdir(parents=True)
    run(["--root", str(root), "init"], cli_env)
    run(["add", "found from a subfolder"], cli_env, cwd=root / "src" / "deep")
    hits = json.loads(run(["search", "subfolder", "--json"], cli_env, cwd=root / "src").stdout)
    assert hits[0]["content"].endswith("found from a subfolder")


@pytest.mark.parametrize("query", ["", "   "])
def test_empty_query_exits_2_with_one_line(tmp_path, cli_env, query):
    run(["--root", str(tmp_path), "init"], cli_env)
    p = run(["--root", str(tmp_path), "search", query], cli_env, check=False)
    assert p.returncode == 2
    assert p.stderr.strip().splitlines() == ["lethe: error: the query is empty (or only whitespace)"]


def test_search_outside_a_project_is_a_clear_error(tmp_path, cli_env):
    p = run(["--root", str(tmp_path / "none"), "search", "x"], cli_env, check=False)
    assert p.returncode == 1 and "run `lethe init`" in p.stderr and "Traceback" not in p.stderr


def test_long_query_is_truncated_with_a_warning(tmp_path, cli_env):
    run(["--root", str(tmp_path), "add", "needle"], cli_env)
    p = run(["--root", str(tmp_path), "search", "needle " * 600, "--json"], cli_env)
    assert "truncated" in p.stderr and json.loads(p.stdout)


def test_concurrent_adds_lose_nothing(tmp_path, cli_env):
    run(["--root", str(tmp_path), "init"], cli_env)
    procs = [
        subprocess.Popen([LETHE, "--root", str(tmp_path), "add", f"parallel memory number {i}"], env=cli_env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for i in range(4)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0, 0], outs
    text = "".join(f.read_text() for f in (tmp_path / ".lethe" / "memory").glob("*.md"))
    assert all(f"parallel memory number {i}" in text for i in range(4))
    st = json.loads(run(["--root", str(tmp_path), "status", "--json"], cli_env).stdout)
    # these four short texts are near-duplicates (cosine >= 0.95 between some of them):
    # each is a live entry or absorbed into one, never lost
    assert st["entries"] + st["absorbed"] == 4


def test_locked_database_fails_with_the_holder_named(tmp_path, cli_env):
    run(["--root", str(tmp_path), "add", "x"], cli_env)
    db = tmp_path / ".lethe" / "index" / "lethe.duckdb"
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import duckdb, sys
            con = duckdb.connect({str(db)!r})
            print('locked', flush=True)
            sys.stdin.read()
        """)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        env = dict(cli_env, LETHE_LOCK_TIMEOUT="0.5")
        p = run(["--root", str(tmp_path), "search", "x"], env, check=False)
        assert p.returncode == 1
        assert f"(PID {holder.pid})" in p.stderr and "Traceback" not in p.stderr
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)


def test_missing_model_names_what_to_install(tmp_path, cli_env):
    env = dict(cli_env, LETHE_EMBED_MODEL=str(tmp_path / "no-model-here"))
    p = run(["--root", str(tmp_path), "add", "x"], env, check=False)
    assert p.returncode == 1 and "model.onnx" in p.stderr and "Traceback" not in p.stderr
    # Nothing lost: the memory was written to the file before indexing failed.
    assert "x" in "".join(f.read_text() for f in (tmp_path / ".lethe" / "memory").glob("*.md"))


def test_help_lists_every_command():
    p = subprocess.run([LETHE, "--help"], capture_output=True, text=True)
    for cmd in ["init", "add", "index", "search", "status", "demo"]:
        assert cmd in p.stdout
    assert "LETHE_EMBED_MODEL" in p.stdout


def test_starting_the_cli_imports_no_heavy_optional_module():
    """Every `lethe add` and hook is a fresh process: the modules only some commands need
    (the SQL builder, the ONNX runtime, the tokenizer, Arrow, the Anthropic client, the
    terminal UI's Textual) load
    when those commands run, not when the CLI starts."""
    heavy = ["sqlglot", "onnxruntime", "tokenizers", "pyarrow", "anthropic", "textual"]
    out = subprocess.run(
        [sys.executable, "-c", f"import sys, lethe_sql.cli; print([m for m in {heavy!r} if m in sys.modules])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()
    assert out == "[]"


def test_a_bullet_point_is_text_not_an_option(tmp_path, cli_env):
    """`lethe add "- use pnpm"`: a word of a dash and a space is text wherever it stands;
    an option's value stays the option's; a line with its own `--` is read as typed."""
    from lethe_sql.cli.app import text_args

    assert text_args(["add", "- a", "--json"]) == ["add", "--json", "--", "- a"]
    assert text_args(["add", "--heading", "- h", "- a"]) == ["add", "--heading", "- h", "--", "- a"]
    assert text_args(["add", "--", "- a"]) == ["add", "--", "- a"]
    assert text_args(["add", "-k", "--json"]) == ["add", "-k", "--json"]
    root = tmp_path / "proj"
    root.mkdir()
    r = ["--root", str(root)]
    out = json.loads(run([*r, "add", "- use pnpm, not npm", "--json"], cli_env).stdout)
    run([*r, "add", "--heading", "- tooling", "- node 22 in CI"], cli_env)
    day = next((root / ".lethe" / "memory").glob("*.md")).read_text()
    assert "\n- use pnpm, not npm" in day and "- tooling\n" in day and "\n- node 22 in CI" in day
    hits = json.loads(run([*r, "search", "- pnpm", "--json", "-k", "1"], cli_env).stdout)
    assert hits[0]["id"] == out["id"]
