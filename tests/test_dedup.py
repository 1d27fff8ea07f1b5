"""Dedup: the same words are one memory; anything else is two.

Exact duplicates are one entry (content hash); duplicates in wording (the same words in
the same order, ignoring case, punctuation and a/an/the) merge on write and with
`lethe dedupe`, the existing entry kept, and come back when their keeper goes. Texts
that differ in a number, a name, a path, a negation or any word are never merged, however
close their embeddings."""

import json
import os
import subprocess

import duckdb
import numpy as np
import pytest

from conftest import BIN, write

LETHE = str(BIN / "lethe")

BASE = "The reconcile job runs nightly at 02:00 UTC and writes its report to the ops bucket"
VARIANT = "reconcile job: runs NIGHTLY at `02:00` utc, and writes its report to the ops-bucket."   # same words
LONGER = BASE + " daily"                      # one word more: a different memory
UNRELATED = [
    "Lunch order: two pizzas for the team on Friday",
    "The staging database listens on port 5433 instead of the default 5432",
    "Webhook retries use five attempts with exponential backoff starting at two seconds",
    "Alice owns the billing service; ask her before touching invoices",
    "Use ruff for linting and black for formatting in the payments repo",
    "The CI runners have 2 cores and 8 GiB of memory",
]


def cos(embedder, a, b):
    v = embedder.encode([a, b])
    return float(np.dot(v[0], v[1]))


def entry_ids(store):
    return {r[0] for r in store.con.execute("SELECT id FROM entries").fetchall()}


def id_of(text):
    from lethe_sql.markdown import content_id

    return content_id(text)


def check_invariants(store):
    """Absorbed ids are nowhere in the index, and every keeper is live."""
    con = store.con
    assert con.execute("SELECT count(*) FROM absorbed WHERE into_id NOT IN (SELECT id FROM entries)").fetchone()[0] == 0
    assert con.execute("SELECT count(*) FROM absorbed WHERE id IN (SELECT id FROM entries)").fetchone()[0] == 0
    fts = {r[0] for r in con.execute("SELECT name FROM fts_main_entries.docs").fetchall()}
    assert fts == entry_ids(store)
    tok = {r[0] for r in con.execute("SELECT DISTINCT id FROM token_vectors").fetchall()}
    assert tok == entry_ids(store)
    assert con.execute("SELECT num_docs FROM fts_main_entries.stats").fetchone()[0] == len(fts)


# -- the rule -------------------------------------------------------------------------


@pytest.mark.parametrize("a,b", [
    (BASE, VARIANT),
    ("Staging Postgres listens on port 5433.", "staging postgres listens on port 5433"),
    ("Use **ruff** for linting", "use ruff for linting"),
    ("The API key lives in Vault", "API key lives in the Vault"),
])
def test_the_same_words_are_duplicates(a, b):
    from lethe_sql.markdown import dedup_key

    assert dedup_key(a) == dedup_key(b) is not None


@pytest.mark.parametrize("a,b", [
    ("Staging Postgres listens on port 5433.", "Staging Postgres listens on port 5434."),      # a number
    ("We pin Django 5.1.7", "We pin Django 5.1.8"),                                             # a version
    ("Deploys need Alice's approval", "Deploys need Bob's approval"),                           # a name
    ("Config lives in /etc/app/a.toml", "Config lives in /etc/app/b.toml"),                     # a path
    ("The cache is shared between workers", "The cache is not shared between workers"),         # a negation
    ("Release on 2026-03-02", "Release on 2026-03-09"),                                         # a date
    ("service A depends on service B", "service B depends on service A"),                       # word order
    (BASE, LONGER),                                                                             # one more word
])
def test_any_other_difference_makes_two_memories(a, b, embedder):
    from lethe_sql.markdown import dedup_key

    assert dedup_key(a) != dedup_key(b)


def test_a_text_without_words_is_never_a_duplicate():
    from lethe_sql.markdown import dedup_key

    assert dedup_key("--- *** ---") is None
    assert dedup_key("日本語のメモ") != dedup_key("別のメモ")   # words are any script's, not only ASCII


def test_port_change_is_kept_although_the_cosine_is_high(project, embedder):
    a, b = "Staging Postgres listens on port 5433.", "Staging Postgres listens on port 5434."
    assert cos(embedder, a, b) > 0.95     # what the old rule merged
    write(project.memory_dir / "2026-11-01.md", f"## 09:00 db\n{a}\n")
    write(project.memory_dir / "2026-11-02.md", f"## 09:00 db\n{b}\n")
    r = project.index()
    assert (r.entries_added, r.entries_absorbed) == (2, 0)
    assert entry_ids(project) == {id_of(a), id_of(b)}


def test_ten_thousand_style_facts_are_each_findable_by_number(project):
    """Sections that differ only in a number are distinct facts (the issue's 10,000-section
    file, at 400 sections): each one is found by its number, in every mode."""
    n = 400
    write(project.memory_dir / "facts.md", "".join(f"## fact {i}\nfact number {i} about service s{i % 17}\n"
                                                   for i in range(1, n + 1)))
    r = project.index()
    assert (r.entries_total, r.entries_absorbed) == (n, 0)
    for i in (1, 7, 123, 288, 399, 400):
        want = id_of(f"fact number {i} about service s{i % 17}")
        for mode in ("default", "bm25", "hybrid"):
            top = [h.id for h in project.search(f"fact number {i}", mode=mode, top_k=5, learn=False)]
            assert want in top, (i, mode)


# -- writes -----------------------------------------------------------------------------


def test_a_new_duplicate_is_absorbed_and_stays_absorbed_until_its_keeper_goes(project):
    a = write(project.memory_dir / "a.md", f"## keep\n{BASE}\n## lunch\n{UNRELATED[0]}\n")
    project.index()
    b = write(project.memory_dir / "b.md", f"## variant\n{VARIANT}\n")
    r = project.index()
    assert (r.entries_added, r.entries_absorbed) == (0, 1)
    var, base = id_of(VARIANT), id_of(BASE)
    assert entry_ids(project) == {base, id_of(UNRELATED[0])}
    row = project.con.execute("SELECT id, into_id, similarity, text, source FROM absorbed").fetchall()
    assert row == [(var, base, 1.0, VARIANT, ".lethe/memory/b.md")]
    assert project.absorbed_map() == {var: base}
    assert [h.id for h in project.search("reconcile nightly ops bucket", mode="bm25")] == [base]
    # both occurrences stay recorded; the file itself is untouched
    assert project.con.execute("SELECT count(*) FROM entry_sources WHERE id = ?", [var]).fetchone()[0] == 1
    assert b.read_text() == f"## variant\n{VARIANT}\n"
    check_invariants(project)

    # A reindex of the absorbed one's file does not resurrect it.
    write(b, f"## variant\n{VARIANT}\n## more\n{UNRELATED[1]}\n")
    os.utime(b, (1, 1))
    r = project.index()
    assert (r.files_indexed, r.entries_added, r.entries_absorbed) == (1, 1, 0)
    assert var not in entry_ids(project)
    check_invariants(project)

    # The keeper's section goes: the absorbed text comes back, searchable, in the same pass.
    write(a, f"## lunch\n{UNRELATED[0]}\n")
    os.utime(a, (2, 2))
    r = project.index()
    assert (r.entries_added, r.entries_removed) == (1, 1)
    assert var in entry_ids(project) and base not in entry_ids(project)
    assert project.con.execute("SELECT count(*) FROM absorbed").fetchone()[0] == 0
    assert [h.id for h in project.search("reconcile nightly ops bucket", mode="bm25")] == [var]
    row = project.con.execute("SELECT source, heading, content FROM entries WHERE id = ?", [var]).fetchone()
    assert row == (".lethe/memory/b.md", "variant", f"## variant\n{VARIANT}")
    check_invariants(project)


def test_within_one_batch_the_first_written_is_kept(project):
    write(project.memory_dir / "a.md", f"## a\n{BASE}\n## b\n{VARIANT}\n## c\n{LONGER}\n")
    r = project.index()
    assert (r.entries_added, r.entries_absorbed) == (2, 1)
    assert entry_ids(project) == {id_of(BASE), id_of(LONGER)}
    assert project.absorbed_map() == {id_of(VARIANT): id_of(BASE)}
    check_invariants(project)


@pytest.mark.parametrize("before,after", [(BASE, LONGER), (LONGER, BASE), (BASE, VARIANT)])
def test_editing_a_section_replaces_it_without_absorbing_the_old_version(project, before, after):
    f = write(project.memory_dir / "a.md", f"## x\n{before}\n")
    project.index()
    write(f, f"## x\n{after}\n")
    os.utime(f, (1, 1))
    r = project.index()
    assert (r.entries_added, r.entries_removed, r.entries_absorbed) == (1, 1, 0)
    assert entry_ids(project) == {id_of(after)}
    assert project.con.execute("SELECT count(*) FROM absorbed").fetchone()[0] == 0


def test_unrelated_and_near_texts_are_never_merged(project):
    texts = UNRELATED + [BASE, LONGER]
    write(project.memory_dir / "a.md", "".join(f"## s{i}\n{t}\n" for i, t in enumerate(texts[:4])))
    project.index()
    write(project.memory_dir / "b.md", "".join(f"## s{i}\n{t}\n" for i, t in enumerate(texts[4:])))
    r = project.index()
    assert r.entries_absorbed == 0
    assert entry_ids(project) == {id_of(t) for t in texts}
    assert project.con.execute("SELECT count(*) FROM absorbed").fetchone()[0] == 0


def test_dedup_can_be_switched_off(project):
    project.settings = project.settings.with_(dedup=False)
    write(project.memory_dir / "a.md", f"## a\n{BASE}\n## b\n{VARIANT}\n")
    r = project.index()
    assert (r.entries_added, r.entries_absorbed) == (2, 0)


def test_put_documents_dedups_too_and_absorbed_map_maps_items(project):
    from lethe_sql.ingest import IndexReport
    from lethe_sql.markdown import Document

    report = IndexReport()
    project.put_documents("bench/x", [Document(BASE), Document(UNRELATED[1]), Document(VARIANT)], report=report)
    assert report.entries_absorbed == 1
    amap = project.absorbed_map()
    assert amap == {id_of(VARIANT): id_of(BASE)}
    live = entry_ids(project)
    assert all(amap.get(id_of(t), id_of(t)) in live for t in (BASE, UNRELATED[1], VARIANT))


def test_an_index_that_an_older_rule_merged_gets_its_distinct_memories_back(project):
    """Stores written with the cosine rule absorbed distinct texts; the first index with
    this version brings back each one whose words differ from its keeper's, once."""
    from lethe_sql import dedup

    a, b = "Staging Postgres listens on port 5433.", "Staging Postgres listens on port 5434."
    write(project.memory_dir / "2026-11-01.md", f"## 09:00 db\n{a}\n## 10:00 job\n{BASE}\n## 11:00 job\n{VARIANT}\n")
    project.settings = project.settings.with_(dedup=False)
    project.index()
    con = project.con
    # as the old rule left it: the port change and the wording variant absorbed
    con.execute("BEGIN")
    dedup.absorb_existing(con, [(id_of(a), id_of(BASE), 0.97), (id_of(VARIANT), id_of(BASE), 0.99)])
    con.execute("COMMIT")
    con.execute("DELETE FROM meta WHERE key = 'dedup_rule'")
    assert entry_ids(project) == {id_of(BASE)}
    r = project.index()
    assert r.entries_restored == 1
    assert entry_ids(project) == {id_of(a), id_of(BASE)}
    assert project.absorbed_map() == {id_of(VARIANT): id_of(BASE)}   # the same words stay merged
    assert [h.id for h in project.search("postgres port 5433", mode="bm25", top_k=1)] == [id_of(a)]
    assert project.index().entries_restored == 0     # once
    check_invariants(project)


# -- through the CLI -----------------------------------------------------------------


def run(args, env, check=True):
    p = subprocess.run([LETHE, *args], env=env, capture_output=True, text=True, timeout=300)
    if check and p.returncode != 0:
        raise AssertionError(f"lethe {args} exited {p.returncode}: {p.stderr}")
    return p


def db_rows(root, sql, params=()):
    con = duckdb.connect(str(root / ".lethe" / "index" / "lethe.duckdb"), read_only=True)
    try:
        return con.execute(sql, list(params)).fetchall()
    finally:
        con.close()


def test_lethe_add_says_added_duplicate_or_revises(tmp_path, cli_env):
    root = tmp_path / "p"
    root.mkdir()
    r = ["--root", str(root)]
    run([*r, "init"], cli_env)
    first = run([*r, "add", "Staging Postgres listens on port 5433."], cli_env).stdout.strip()
    old = id_of("Staging Postgres listens on port 5433.")
    assert first == f"added {old}"
    again = json.loads(run([*r, "add", "--json", "Staging Postgres listens on port 5433."], cli_env).stdout)
    assert again == {"id": old, "status": "duplicate", "revises": [], "duplicate_of": old, "redacted": 0,
                     "written": False}
    # a retried add writes nothing: one section, one entry
    files = list((root / ".lethe" / "memory").glob("*.md"))
    assert sum(f.read_text().count("port 5433") for f in files) == 1
    variant = run([*r, "add", "staging postgres listens on PORT 5433"], cli_env).stdout.strip()
    assert variant == f"duplicate of {old}"
    new = id_of("Staging Postgres listens on port 5434.")
    second = run([*r, "add", "Staging Postgres listens on port 5434."], cli_env).stdout.strip()
    assert second == f"added {new} (revises {old})"
    assert sorted(x for (x,) in db_rows(root, "SELECT id FROM entries")) == sorted([old, new])


def test_lethe_dedupe_dry_run_then_merge_list_and_restore(tmp_path, cli_env):
    root = tmp_path / "p"
    root.mkdir()
    r = ["--root", str(root)]
    run([*r, "init"], cli_env)
    mem = root / ".lethe" / "memory"
    write(mem / "2026-10-01.md", f"## 09:00 first\n{BASE}\n## other\n{UNRELATED[2]}\n")
    write(mem / "2026-10-02.md", f"## 09:00 again\n{VARIANT}\n## other\n{UNRELATED[3]}\n## near\n{LONGER}\n")
    off = dict(cli_env, LETHE_DEDUP="0")
    idx = json.loads(run([*r, "index", "--json"], off).stdout)     # planted: on-write dedup off
    assert (idx["entries_total"], idx["entries_absorbed"]) == (5, 0)
    base, var = id_of(BASE), id_of(VARIANT)

    dry = json.loads(run([*r, "dedupe", "--dry-run", "--json"], cli_env).stdout)
    assert dry["dry_run"] is True and dry["absorbed"] == 0
    assert [(p["kept"], p["absorbed"]) for p in dry["pairs"]] == [(base, var)]   # the older kept; LONGER never
    assert dry["pairs"][0]["absorbed_text"] == VARIANT
    assert len(db_rows(root, "SELECT id FROM entries")) == 5

    done = json.loads(run([*r, "dedupe", "--json"], cli_env).stdout)
    assert done["absorbed"] == 1 and done["entries_total"] == 4
    assert db_rows(root, "SELECT name FROM fts_main_entries.docs WHERE name = ?", [var]) == []

    listed = json.loads(run([*r, "dedupe", "--list", "--json"], cli_env).stdout)
    assert [(x["id"], x["into_id"], x["text"], x["source"]) for x in listed] == [
        (var, base, VARIANT, ".lethe/memory/2026-10-02.md")
    ]
    assert "->" in run([*r, "dedupe", "--list"], cli_env).stdout

    out = run([*r, "dedupe", "--restore", var], cli_env).stdout
    assert "restored" in out
    assert len(db_rows(root, "SELECT id FROM entries")) == 5
    hits = json.loads(run([*r, "search", "reconcile nightly", "--json", "--mode", "bm25"], cli_env).stdout)
    assert {base, var} <= {h["id"] for h in hits}
    # restored means exempt: a pass does not absorb it again
    assert json.loads(run([*r, "dedupe", "--json"], cli_env).stdout)["pairs"] == []

    bad = run([*r, "dedupe", "--restore", "ffffffffffffffff"], cli_env, check=False)
    assert bad.returncode == 2 and bad.stderr.strip().startswith("lethe: error: no absorbed entry")


def test_lethe_index_says_how_many_were_absorbed(tmp_path, cli_env):
    root = tmp_path / "p"
    root.mkdir()
    r = ["--root", str(root)]
    run([*r, "init"], cli_env)
    write(root / ".lethe" / "memory" / "a.md", f"## a\n{BASE}\n## b\n{VARIANT}\n## c\n{LONGER}\n")
    out = run([*r, "index"], cli_env).stdout
    assert "+2 -0 entries" in out and "1 duplicate(s) absorbed" in out


def test_dated_facts_that_differ_in_a_number_are_each_found_first_by_their_number(project):
    """The same list in a dated file with times (so revisions could be detected among its
    sections): a question naming a fact's number still gets that fact first."""
    n = 120
    write(project.memory_dir / "2026-11-01.md", "".join(
        f"## {8 + i // 60:02d}:{i % 60:02d} fact {i}\nfact number {i} about service s{i % 17}\n" for i in range(1, n + 1)))
    project.index()
    for i in (3, 57, 118):
        want = id_of(f"fact number {i} about service s{i % 17}")
        top = [h.id for h in project.search(f"fact number {i}", top_k=5, learn=False)]
        assert top[0] == want, (i, top)


def test_an_add_in_the_same_second_as_the_newest_memory_comes_after_it(project):
    """`lethe add` stamps to the second, and memories of one time are not ordered: a second
    add is stamped one second after the newest memory when that is not older than the
    clock, so it can revise the first (the issue's port example typed quickly)."""
    from datetime import datetime, timedelta

    ahead = datetime.now().replace(microsecond=0) + timedelta(seconds=10)  # as if added just now, twice
    a = project.add_memory("Staging Postgres listens on port 5433.", when=ahead)
    b = project.add_memory("Staging Postgres listens on port 5434.")
    at = dict(project.con.execute("SELECT id, created_at FROM entries").fetchall())
    assert at[b.id] == ahead + timedelta(seconds=1)
    assert (b.status, b.revises) == ("revises", (a.id,))
    # a memory far ahead of the clock (dated by hand) is not followed
    far = datetime.now().replace(microsecond=0) + timedelta(days=3)
    project.add_memory("The release freeze starts on Friday.", when=far)
    c = project.add_memory("Grafana dashboards live in the ops folder.")
    at = dict(project.con.execute("SELECT id, created_at FROM entries").fetchall())
    assert at[c.id] == ahead + timedelta(seconds=2)
