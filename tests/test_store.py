"""MemoryStore: add, search, typed results, and the query guards."""

import warnings
from datetime import datetime

import pytest

from lethe_sql import MemoryStore, SearchResult
from lethe_sql.errors import NotAProject, UsageError
from lethe_sql.markdown import Document


def test_add_appends_a_timestamped_section_and_indexes_it(project):
    when = datetime(2026, 11, 3, 14, 2, 5)
    i1 = project.add("The staging Postgres listens on 5433.", when=when)
    i2 = project.add("Use ruff, not flake8.", when=when.replace(hour=15), heading="lint decision")
    text = (project.memory_dir / "2026-11-03.md").read_text()
    assert text == (
        "## 2026-11-03 14:02:05\n<!-- lethe source=add -->\n\nThe staging Postgres listens on 5433.\n\n"
        "## 2026-11-03 15:02:05 lint decision\n<!-- lethe source=add -->\n\nUse ruff, not flake8.\n"
    )
    rows = project.con.execute("SELECT id, created_at, heading FROM entries ORDER BY created_at").fetchall()
    assert rows == [(i1, when, "2026-11-03 14:02:05"), (i2, when.replace(hour=15), "2026-11-03 15:02:05 lint decision")]
    assert not list(project.memory_dir.glob(".*.tmp"))


def test_added_headings_are_demoted_so_the_memory_stays_one_section(project):
    i = project.add("## Not a new section\nbody\n### nor this", when=datetime(2026, 11, 3, 9, 0))
    assert project.con.execute("SELECT count(*) FROM entries").fetchone()[0] == 1
    (text,) = project.con.execute("SELECT text FROM entries WHERE id = ?", [i]).fetchone()
    assert text == "Not a new section\nbody\nnor this"


def test_empty_add_is_a_usage_error(project):
    with pytest.raises(UsageError):
        project.add("   \n ")
    assert not list(project.memory_dir.glob("*.md"))


def test_search_returns_typed_ranked_results(project):
    project.add("The staging Postgres listens on port 5433 because 5432 is taken.")
    project.add("Redis cache TTL is 300 seconds for invoice lookups.")
    project.add("We retry the payment webhook five times with exponential backoff.")
    hits = project.search("which port does staging postgres use", top_k=2)
    assert len(hits) == 2 and all(isinstance(h, SearchResult) for h in hits)
    assert hits[0].text.startswith("The staging Postgres")
    assert [h.rank for h in hits] == [1, 2] and hits[0].score >= hits[1].score
    assert hits[0].bm25_rank == 1 and hits[0].dense_rank == 1
    assert hits[0].source.endswith(".md") and hits[0].as_dict()["created_at"]
    dense = project.search("how many times is the payment callback retried", mode="dense", top_k=1)
    assert "webhook" in dense[0].text and dense[0].bm25_rank is None


def test_hybrid_is_rrf_of_bm25_and_dense(project):
    for t in ["alpha beta", "beta gamma", "gamma delta", "delta alpha", "unrelated words"]:
        project.add(t)
    q = "alpha gamma"
    b = {h.id: h.rank for h in project.search(q, mode="bm25", top_k=30)}
    d = {h.id: h.rank for h in project.search(q, mode="dense", top_k=30)}
    expected = {i: (1 / (60 + b[i]) if i in b else 0) + (1 / (60 + d[i]) if i in d else 0) for i in set(b) | set(d)}
    got = {h.id: h.score for h in project.search(q, top_k=30, mode="hybrid")}
    assert got.keys() == expected.keys()
    for i in got:
        assert got[i] == pytest.approx(expected[i])


def test_query_guards(project):
    project.add("something to find")
    for bad in ["", "   ", "\n\t"]:
        with pytest.raises(UsageError, match="empty"):
            project.search(bad)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        hits = project.search("something " * 1000)
    assert hits and any("truncated" in str(w.message) for w in caught)
    assert project.search("!!! ??? ...", mode="bm25") == []
    with pytest.raises(UsageError):
        project.search("x", mode="nope")


def test_put_documents_replaces_a_virtual_source(project):
    docs = [Document("Caroline: I went to the support group.", heading="D1:1"), Document("Melanie: nice!", heading="D1:2")]
    assert project.put_documents("bench/conv-1", docs) == (2, 0)
    assert project.put_documents("bench/conv-1", docs[:1]) == (0, 1)
    assert project.con.execute("SELECT count(*) FROM source_files").fetchone()[0] == 0
    assert [h.heading for h in project.search("support group", mode="bm25")] == ["D1:1"]


def test_context_manager_closes_and_reopens(tmp_path, embedder):
    with MemoryStore(tmp_path, embedder=embedder) as s:
        s.add("persisted across processes")
    with MemoryStore(tmp_path, embedder=embedder, read_only=True) as s:
        assert s.search("persisted", mode="bm25")[0].text == "persisted across processes"
        with pytest.raises(UsageError):
            s.add("no")


def test_read_only_store_needs_a_project(tmp_path):
    with pytest.raises(NotAProject):
        MemoryStore(tmp_path / "nothing", read_only=True)


@pytest.mark.parametrize("mode", ["default", "hybrid", "bm25", "dense"])
def test_top_k_and_depth_must_be_between_1_and_1000(project, mode):
    """Out of range, a count is one clear UsageError in every mode (not a DuckDB conversion
    error for 2**63, not 99 results for -1, not the default for 0)."""
    from lethe_sql.settings import MAX_COUNT

    for i in range(3):
        project.add(f"memory number {i} about the staging port", when=datetime(2026, 11, 3, 9, i))
    for name in ("top_k", "depth"):
        for bad, why in ((0, "at least 1"), (-1, "at least 1"), (MAX_COUNT + 1, "at most 1000"),
                         (2**63, "at most 1000")):
            with pytest.raises(UsageError, match=f"^{name} must be {why}, got {bad}$"):
                project.search("staging port", mode=mode, **{name: bad})
        with pytest.raises(UsageError, match=f"^{name} takes an integer, got '3'$"):
            project.search("staging port", mode=mode, **{name: "3"})
    assert len(project.search("staging port", mode=mode, top_k=MAX_COUNT, depth=MAX_COUNT)) == 3
    assert len(project.search("staging port", mode=mode, top_k=2)) == 2
    if mode == "default":
        with pytest.raises(UsageError, match="^top_k must be at least 1, got -1$"):
            project.search_outcome("staging port", top_k=-1)
