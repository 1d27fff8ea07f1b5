"""Incremental indexing of .lethe/memory and the bad input it must survive."""

import os

import pytest

from conftest import write


def ids_by_text(store):
    return {t: i for i, t in store.con.execute("SELECT id, text FROM entries").fetchall()}


def test_first_index_then_unchanged_files_are_skipped(project):
    write(project.memory_dir / "2026-11-01.md", "## a\nalpha memory\n## b\nbeta memory\n")
    write(project.memory_dir / "2026-11-02.md", "## c\ngamma memory\n")
    r1 = project.index()
    assert (r1.files_indexed, r1.entries_added, r1.entries_total) == (2, 3, 3)
    r2 = project.index()
    assert (r2.files_indexed, r2.files_unchanged, r2.entries_added, r2.entries_removed) == (0, 2, 0, 0)


def test_changed_file_keeps_unchanged_entries_and_their_learned_state(project):
    f = write(project.memory_dir / "2026-11-01.md", "## a\nalpha memory\n## b\nbeta memory\n## c\ngamma\n")
    project.index()
    before = ids_by_text(project)
    project.con.execute(
        "UPDATE entries SET retrieval_count = 7, affinity = 0.9, tier = 'gc' WHERE text = 'alpha memory'"
    )
    write(f, "## a renamed\nalpha memory\n## new\ndelta memory\n## c\ngamma\n")
    os.utime(f, (1, 1))  # a different mtime, whatever the clock resolution
    r = project.index()
    assert (r.files_indexed, r.entries_added, r.entries_removed) == (1, 1, 1)
    after = ids_by_text(project)
    assert after["alpha memory"] == before["alpha memory"]
    assert "beta memory" not in after and "delta memory" in after
    row = project.con.execute(
        "SELECT retrieval_count, affinity, tier, heading FROM entries WHERE text = 'alpha memory'"
    ).fetchone()
    assert row == (7, 0.9, "gc", "a renamed")
    # BM25 follows: the deleted entry is gone from the FTS tables too.
    assert project.search("beta", mode="bm25") == []
    assert [h.text for h in project.search("delta", mode="bm25")] == ["delta memory"]


def test_same_mtime_different_size_and_touched_same_content(project):
    f = write(project.memory_dir / "m.md", "## a\nalpha\n")
    project.index()
    os.utime(f, (10_000, 10_000))
    r = project.index()
    assert (r.files_indexed, r.files_unchanged) == (0, 1)  # hash equal: only mtime recorded
    assert project.index().files_unchanged == 1


def test_removed_file_removes_its_entries_but_not_shared_ones(project):
    write(project.memory_dir / "a.md", "## x\nshared text\n## y\nonly in a\n")
    b = write(project.memory_dir / "b.md", "## z\nshared text\n")
    project.index()
    assert project.con.execute("SELECT count(*) FROM entries").fetchone()[0] == 2
    (project.memory_dir / "a.md").unlink()
    r = project.index()
    assert (r.files_removed, r.entries_removed) == (1, 1)
    rows = project.con.execute("SELECT text, source FROM entries").fetchall()
    assert rows == [("shared text", ".lethe/memory/b.md")]
    b.unlink()
    project.index()
    assert project.con.execute("SELECT count(*) FROM entries").fetchone()[0] == 0
    assert project.con.execute("SELECT num_docs FROM fts_main_entries.stats").fetchone()[0] == 0


def test_invalid_utf8_is_decoded_with_replacement_and_reported(project):
    write(project.memory_dir / "bad.md", b"## x\ncaf\xe9 au lait on port 8080\n")
    r = project.index()
    assert any("bad.md" in w and "invalid UTF-8" in w for w in r.warnings)
    (text,) = project.con.execute("SELECT text FROM entries").fetchone()
    assert text == "caf\ufffd au lait on port 8080"


def test_binary_and_huge_files_are_skipped_with_warnings(project, monkeypatch):
    import lethe_sql.ingest as ingest

    write(project.memory_dir / "blob.md", b"\x89PNG\r\n\x1a\n\x00\x00\x00binary")
    write(project.memory_dir / "huge.md", "## h\n" + "word " * 400)
    write(project.memory_dir / "ok.md", "## ok\nfine\n")
    monkeypatch.setattr(ingest, "MAX_FILE_BYTES", 1000)
    r = project.index()
    assert r.files_skipped == 2 and r.entries_total == 1
    assert any("blob.md" in w and "binary" in w for w in r.warnings)
    assert any("huge.md" in w and "limit" in w for w in r.warnings)


def test_sql_metacharacters_are_data(project):
    nasty = "Robert'); DROP TABLE entries;-- uses $1 and ? and \\' quotes"
    write(project.memory_dir / "n.md", f"## x\n{nasty}\n")
    project.index()
    hits = project.search("'); DROP TABLE entries;--")
    assert hits and hits[0].text == nasty
    assert project.con.execute("SELECT count(*) FROM entries").fetchone()[0] == 1


def test_hidden_and_non_markdown_files_are_ignored(project):
    write(project.memory_dir / ".draft.md", "## x\nhidden\n")
    write(project.memory_dir / "notes.txt", "## x\nnot markdown\n")
    write(project.memory_dir / "sub" / "deep.md", "## x\nnested memory\n")
    r = project.index()
    assert r.entries_total == 1
    assert project.con.execute("SELECT source FROM entries").fetchone()[0] == ".lethe/memory/sub/deep.md"


def test_model_mismatch_requires_rebuild(project):
    write(project.memory_dir / "a.md", "## x\nalpha\n")
    project.index()
    project.con.execute("UPDATE meta SET value = 'other-model:1' WHERE key = 'embed_model'")
    write(project.memory_dir / "b.md", "## y\nbeta\n")
    from lethe_sql.errors import LetheError

    with pytest.raises(LetheError, match="--rebuild"):
        project.index()
    r = project.index(rebuild=True)
    assert r.entries_total == 2
    assert project.con.execute("SELECT count(embedding) FROM entries").fetchone()[0] == 2


def test_links_never_lead_out_of_the_memory_folder(project, tmp_path):
    """A link to a file or a folder outside .lethe/memory is skipped with a warning (the
    /etc/passwd case); a link to a file inside is followed (ingest.memory_files)."""
    outside = tmp_path / "outside"
    write(outside / "leak.md", "## stolen\nOUTSIDEFOLDERWORD from a linked folder\n")
    passwd = write(tmp_path / "passwd", "root:x:0:0:OUTSIDEFILEWORD:/root:/bin/bash\n")
    mem = project.memory_dir
    write(mem / "real.md", "## real\nthe staging port is 5433\n")
    (mem / "passwd.md").symlink_to(passwd)
    (mem / "etc").symlink_to(outside, target_is_directory=True)
    write(mem / "sub" / "inner.md", "## inner\nINSIDELINKWORD in a subfolder\n")
    (mem / "alias.md").symlink_to(mem / "sub" / "inner.md")
    (mem / "loop.md").symlink_to(mem / "loop.md")  # a link loop: skipped, never a traceback
    r = project.index()
    texts = " ".join(t for (t,) in project.con.execute("SELECT text FROM entries").fetchall())
    assert "OUTSIDEFILEWORD" not in texts and "OUTSIDEFOLDERWORD" not in texts
    assert "5433" in texts and "INSIDELINKWORD" in texts
    assert "skipped .lethe/memory/passwd.md: a link that leads outside the memory folder" in r.warnings
    assert "skipped .lethe/memory/etc: a link that leads outside the memory folder" in r.warnings
    assert "skipped .lethe/memory/loop.md: a link that cannot be followed" in r.warnings
    sources = {s for (s,) in project.con.execute("SELECT source FROM entry_sources").fetchall()}
    assert sources == {".lethe/memory/real.md", ".lethe/memory/sub/inner.md", ".lethe/memory/alias.md"}
    assert project.status()["memory_files"] == 3


def test_a_file_name_that_is_not_utf8_is_skipped_and_index_and_add_keep_working(tmp_path, cli_env):
    import json
    import subprocess

    from conftest import BIN

    lethe = str(BIN / "lethe")
    root = tmp_path / "p"
    mem = root / ".lethe" / "memory"
    write(mem / "ok.md", "## ok\nthe staging port is 5433\n")
    fd = os.open(os.fsencode(str(mem)) + b"/caf\xe9-notes.md", os.O_WRONLY | os.O_CREAT, 0o644)
    os.write(fd, b"## latin-1 name\na note that cannot be a source name\n")
    os.close(fd)
    for _ in range(2):  # and again: nothing stuck half-way
        p = subprocess.run([lethe, "--root", str(root), "index", "--json"], env=cli_env, capture_output=True,
                           text=True, timeout=300)
        assert p.returncode == 0, p.stderr
        assert p.stderr.splitlines() == [
            "lethe: warning: skipped .lethe/memory/caf\ufffd-notes.md: its name is not valid UTF-8; rename the file to index it"]
        assert json.loads(p.stdout)["files_skipped"] == 1
    p = subprocess.run([lethe, "--root", str(root), "add", "the prod port is 6543"], env=cli_env, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0 and p.stdout.startswith("added "), p.stderr
    hits = json.loads(subprocess.run([lethe, "--root", str(root), "search", "prod port", "--json"], env=cli_env,
                                     capture_output=True, text=True, timeout=300).stdout)
    assert any("6543" in h["content"] for h in hits) and any("5433" in h["content"] for h in hits)
