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
