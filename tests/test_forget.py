"""Forgetting that sticks: `lethe forget` (and --undo), through rebuilds and `lethe mine`; `lethe list`."""

import json
import os
import subprocess
from datetime import date, datetime
from pathlib import Path

import pytest

from conftest import BIN, write
from test_agent import EXCHANGES, claude_rows, jl

LETHE = str(BIN / "lethe")
PERSON = "# 2026-03-01\n\n## 09:00 postgres port\nThe local Postgres runs on 5433.\n\n## 10:00 lunch\nTeam lunch is on Fridays.\n"


def id_of(text):
    from lethe_sql.markdown import content_id

    return content_id(text)


def ids(store):
    return {r[0] for r in store.con.execute("SELECT id FROM entries").fetchall()}


def fresh_index(store):
    """Throw the derived index away and build it again from the markdown."""
    store.close()
    for f in Path(store.db_path).parent.glob("lethe.duckdb*"):
        f.unlink()
    store.index()


def test_forget_a_section_lethe_wrote_removes_it_and_it_stays_gone(project):
    keep = project.add("The CI runners have 2 cores.", when=datetime(2026, 3, 2, 9, 0))
    gone = project.add("The deploy key is rotated every 90 days.", when=datetime(2026, 3, 2, 10, 0))
    report = project.forget([gone[:6]])
    assert report.ids == [gone] and [f.action for f in report.forgotten] == ["removed"]
    text = (project.memory_dir / "2026-03-02.md").read_text()
    assert "deploy key" not in text and "CI runners" in text
    assert ids(project) == {keep}
    assert project.search("how often is the deploy key rotated", learn=False)[0].id == keep
    project.index(rebuild=True)
    assert ids(project) == {keep}
    fresh_index(project)
    assert ids(project) == {keep}


def test_forget_a_section_a_person_wrote_tombstones_it_without_touching_the_prose(project):
    f = write(project.memory_dir / "2026-03-01.md", PERSON)
    project.index()
    port = id_of("The local Postgres runs on 5433.")
    project.forget([port])
    text = f.read_text()
    assert text == PERSON.replace("## 09:00 postgres port\n", "## 09:00 postgres port\n<!-- lethe forgotten -->\n")
    assert port not in ids(project) and len(ids(project)) == 1
    for run_again in (lambda: project.index(rebuild=True), lambda: fresh_index(project)):
        run_again()
        assert port not in ids(project)
    from lethe_sql.errors import UsageError

    with pytest.raises(UsageError, match="already forgotten"):
        project.forget([port])


def test_undo_puts_back_what_the_last_forget_took(project):
    f = write(project.memory_dir / "2026-03-01.md", PERSON)
    added = project.add("Staging uses port 5434.", when=datetime(2026, 3, 3, 8, 0))
    project.index()
    before = {p.name: p.read_bytes() for p in project.memory_dir.glob("*.md")}
    project.forget([added, id_of("Team lunch is on Fridays.")])
    assert len(ids(project)) == 1
    report = project.undo_forget()
    assert sorted(report.ids) == sorted([added, id_of("Team lunch is on Fridays.")])
    assert {p.name: p.read_bytes() for p in project.memory_dir.glob("*.md")} == before
    assert len(ids(project)) == 3
    from lethe_sql.errors import UsageError

    with pytest.raises(UsageError, match="nothing to undo"):
        project.undo_forget()
    # a file edited since the forget: the tombstone goes, the removed section comes back at the end
    project.forget([id_of("Team lunch is on Fridays.")])
    write(f, f.read_text() + "\n## 11:00 more\nA note written after the forget.\n")
    project.undo_forget()
    assert "forgotten" not in f.read_text() and id_of("Team lunch is on Fridays.") in ids(project)


def test_forget_takes_the_duplicates_of_a_memory_with_it(project):
    write(project.memory_dir / "2026-03-01.md", "## 09:00 a\nReleases are tagged on main.\n")
    write(project.memory_dir / "2026-03-05.md", "## 09:00 b\nreleases are tagged on `main`\n")
    project.index()
    assert len(ids(project)) == 1 and project.absorbed_map()
    report = project.forget([id_of("Releases are tagged on main.")])
    assert len(report.ids) == 2
    assert ids(project) == set() and project.absorbed_map() == {}
    for p in project.memory_dir.glob("*.md"):
        assert "<!-- lethe forgotten -->" in p.read_text()


def test_forget_by_query_and_its_dry_run(project):
    write(project.memory_dir / "2026-03-01.md", "## 09:00 a\nThe old AWS account 1234 is closed.\n"
          "## 10:00 b\nBilling alerts go to the old AWS account owner.\n## 11:00 c\nThe AWS region is eu-west-1.\n")
    project.index()
    files = {p: p.read_bytes() for p in project.memory_dir.glob("*.md")}
    dry = project.forget(query="old aws account", dry_run=True)
    assert dry.dry_run and len(dry.ids) == 2 and all(f.text for f in dry.forgotten)
    assert {p: p.read_bytes() for p in project.memory_dir.glob("*.md")} == files and len(ids(project)) == 3
    done = project.forget(query="old aws account")
    assert done.ids == dry.ids and ids(project) == {id_of("The AWS region is eu-west-1.")}
    from lethe_sql.errors import UsageError

    with pytest.raises(UsageError, match="no memory holds every word"):
        project.forget(query="kubernetes helm chart")


@pytest.mark.parametrize("refs,message", [
    (["ffffffffffff"], "no memory with id ffffffffffff"),
    (["zz"], "is not a memory id"),
    ([], "give memory ids or --query"),
])
def test_bad_forgets_are_one_line_and_change_nothing(project, refs, message):
    project.add("Something to keep.")
    files = {p: p.read_bytes() for p in project.memory_dir.glob("*.md")}
    from lethe_sql.errors import UsageError

    with pytest.raises(UsageError, match=message) as err:
        project.forget(refs)
    assert "\n" not in str(err.value)
    assert {p: p.read_bytes() for p in project.memory_dir.glob("*.md")} == files


def test_list_newest_first_with_since(project):
    a = project.add("Alpha note.", when=datetime(2026, 3, 1, 9, 0))
    b = project.add("Beta note.", when=datetime(2026, 3, 5, 9, 0))
    c = project.add("Gamma note.", when=datetime(2026, 3, 9, 9, 0))
    assert [r["id"] for r in project.list_memories()] == [c, b, a]
    assert [r["id"] for r in project.list_memories(since=date(2026, 3, 5))] == [c, b]
    assert [r["id"] for r in project.list_memories(limit=1)] == [c]


# -- through the CLI, with `lethe mine` -----------------------------------------------


def run(args, env, check=True):
    p = subprocess.run([LETHE, *args], env=env, capture_output=True, text=True, timeout=300)
    if check and p.returncode != 0:
        raise AssertionError(f"lethe {args} exited {p.returncode}: {p.stderr}")
    return p


def test_a_forgotten_mined_exchange_never_comes_back(tmp_path, cli_env):
    root = tmp_path / "proj"
    root.mkdir()
    r = ["--root", str(root)]
    run([*r, "init"], cli_env)
    claude = Path(cli_env["HOME"]) / ".claude" / "projects" / "-proj"
    t = write(claude / "sess-1.jsonl", jl(claude_rows("sess-1", str(root), EXCHANGES)))
    run([*r, "mine"], cli_env)
    hits = json.loads(run([*r, "search", "which timezone does reconcile use", "--json"], cli_env).stdout)
    first = hits[0]["id"]
    assert "Europe/Berlin" in hits[0]["content"]
    out = json.loads(run([*r, "forget", first, "--json"], cli_env).stdout)
    assert out["ids"] == [first] and out["forgotten"][0]["action"] == "removed"
    md = root / ".lethe" / "memory" / "transcripts" / "claude-sess-1.md"
    assert "Europe/Berlin" not in md.read_text()
    # the transcript grows, the index is thrown away: mine adds only the new exchange
    with open(t, "a") as fh:
        fh.write(jl(claude_rows("sess-1", str(root), [("And the flaky test?", "Pinned pytest-randomly seed 1234.")])[1:]))
    for f in (root / ".lethe" / "index").glob("*"):
        f.unlink()
    mined = json.loads(run([*r, "mine", "--json"], cli_env).stdout)
    assert mined["added"] == 1
    run([*r, "index", "--rebuild"], cli_env)
    text = md.read_text()
    assert "Europe/Berlin" not in text and "seed 1234" in text and "release/2.4" in text
    out = run([*r, "search", "which timezone does reconcile use", "--json"], cli_env).stdout
    assert "Europe/Berlin" not in out
    # and the CLI's one-line errors
    again = run([*r, "forget", "ffffffff"], cli_env, check=False)
    assert again.returncode == 2 and again.stderr.count("\n") == 1 and "no memory with id" in again.stderr
    q = run([*r, "forget", "--query", "flaky test seed"], cli_env, check=False)
    assert q.returncode == 2 and "--dry-run" in q.stderr                     # no tty: --yes needed
    undo = run([*r, "forget", "--undo"], cli_env, check=False)
    assert undo.returncode == 0 and "restored 1" in undo.stdout


def test_cli_list(tmp_path, cli_env):
    root = tmp_path / "p"
    r = ["--root", str(root)]
    write(root / ".lethe" / "memory" / "2026-03-01.md", "## 09:00 a\nStaging Postgres listens on port 5433.\n")
    write(root / ".lethe" / "memory" / "2026-03-09.md", "## 09:00 b\nStaging Postgres listens on port 5434.\n")
    run([*r, "index"], cli_env)
    rows = json.loads(run([*r, "list", "--json"], cli_env).stdout)
    assert [x["text"][-5:] for x in rows] == ["5434.", "5433."]
    assert rows[1]["superseded_by"] == rows[0]["id"] and rows[0]["superseded_by"] is None
    text = run([*r, "list", "--since", "2026-03-05"], cli_env).stdout
    assert "5434" in text and "5433" not in text
    bad = run([*r, "list", "--since", "March"], cli_env, check=False)
    assert bad.returncode == 2 and "YYYY-MM-DD" in bad.stderr


def test_forgetting_a_forgotten_memory_says_so_and_changes_nothing(project):
    r = project.add_memory("The nightly job runs at 02:00.")
    project.forget([r.id])
    files = {p: p.read_bytes() for p in project.memory_dir.glob("*.md")}
    from lethe_sql.errors import UsageError

    with pytest.raises(UsageError, match=f"{r.id[:8]} is already forgotten"):
        project.forget([r.id[:8]])
    assert {p: p.read_bytes() for p in project.memory_dir.glob("*.md")} == files
