"""Dedup: exact duplicates are one entry; near-duplicates (cosine >= 0.95) merge on write
and with `lethe dedupe`, keeping the longer text, and come back when their keeper goes."""

import json
import os
import subprocess

import duckdb
import numpy as np
import pytest

from conftest import BIN, write

LETHE = str(BIN / "lethe")

BASE = "The reconcile job runs nightly at 02:00 UTC and writes its report to the ops bucket"
LONGER = BASE + " daily"                      # one trailing word more
LONGEST = LONGER + " again"
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


# -- the pure pieces -------------------------------------------------------------


def test_blockwise_near_pairs_equal_brute_force(monkeypatch):
    from lethe_sql import dedup

    monkeypatch.setattr(dedup, "BLOCK_ROWS", 7)   # many uneven blocks
    monkeypatch.setattr(dedup, "CHUNK_ROWS", 5)
    rng = np.random.default_rng(3)
    v = rng.standard_normal((40, 384)).astype(np.float32)
    v[25] = v[3] + 0.05 * rng.standard_normal(384)   # planted near-duplicates
    v[39] = v[38] + 0.05 * rng.standard_normal(384)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    e = rng.standard_normal((23, 384)).astype(np.float32)
    e[17] = 20 * v[10] + 0.05 * rng.standard_normal(384)
    e /= np.linalg.norm(e, axis=1, keepdims=True)
    t = 0.9

    def brute(q, b, upper):
        s = q @ b.T
        return {(i, j) for i, j in zip(*np.nonzero(s >= t)) if not upper or j > i}

    i, j, s = dedup.near_pairs(v, v, t, self_pairs=True)
    assert set(zip(i.tolist(), j.tolist())) == brute(v, v, True) == {(3, 25), (38, 39)}
    np.testing.assert_allclose(s, [v[a] @ v[b] for a, b in zip(i, j)], rtol=1e-5)
    i, j, _ = dedup.near_pairs(v, e, t)
    assert set(zip(i.tolist(), j.tolist())) == brute(v, e, False) == {(10, 17)}


def test_resolve_keeps_the_longer_and_moves_what_a_loser_held():
    from lethe_sql.dedup import resolve

    lens = {0: 10, 1: 20, 2: 30, 3: 5}
    pi, pj, ps = np.array([0, 1, 3]), np.array([1, 2, 2]), np.array([0.99, 0.97, 0.96], dtype=np.float32)
    into = resolve(pi, pj, ps, lambda i: (lens[i],), lambda i: False, lambda a, b: 0.5)
    # 0 -> 1 first (most similar), then 1 -> 2 carries 0 along (similarity recomputed), 3 -> 2
    assert into == {0: (2, 0.5), 1: (2, pytest.approx(0.97)), 3: (2, pytest.approx(0.96))}
    # an exempt loser blocks its merge
    into = resolve(pi, pj, ps, lambda i: (lens[i],), lambda i: i == 1, lambda a, b: 0.5)
    assert into == {0: (1, pytest.approx(0.99)), 3: (2, pytest.approx(0.96))}


# -- on write ----------------------------------------------------------------------


def test_the_test_texts_are_what_they_claim(embedder):
    assert cos(embedder, BASE, LONGER) >= 0.95
    assert cos(embedder, LONGER, LONGEST) >= 0.95
    v = embedder.encode(UNRELATED + [BASE])
    s = v @ v.T
    np.fill_diagonal(s, 0)
    assert s.max() < 0.95


def test_new_shorter_near_duplicate_is_absorbed_and_stays_absorbed_until_its_keeper_goes(project, embedder):
    sim = cos(embedder, BASE, LONGER)
    a = write(project.memory_dir / "a.md", f"## keep\n{LONGER}\n## lunch\n{UNRELATED[0]}\n")
    project.index()
    b = write(project.memory_dir / "b.md", f"## short\n{BASE}\n")
    r = project.index()
    assert (r.entries_added, r.entries_absorbed) == (0, 1)
    short, long_ = id_of(BASE), id_of(LONGER)
    assert entry_ids(project) == {long_, id_of(UNRELATED[0])}
    row = project.con.execute("SELECT id, into_id, similarity, text, source FROM absorbed").fetchall()
    assert row == [(short, long_, pytest.approx(sim, abs=1e-4), BASE, ".lethe/memory/b.md")]
    assert project.absorbed_map() == {short: long_}
    hits = [h.id for h in project.search("reconcile nightly ops bucket", mode="bm25")]
    assert hits == [long_]
    # both occurrences stay recorded; the file itself is untouched
    assert project.con.execute("SELECT count(*) FROM entry_sources WHERE id = ?", [short]).fetchone()[0] == 1
    assert b.read_text() == f"## short\n{BASE}\n"
    check_invariants(project)

    # A reindex of the absorbed one's file (changed, so it is parsed again) does not resurrect it.
    write(b, f"## short\n{BASE}\n## more\n{UNRELATED[1]}\n")
    os.utime(b, (1, 1))
    r = project.index()
    assert (r.files_indexed, r.entries_added, r.entries_absorbed) == (1, 1, 0)
    assert short not in entry_ids(project)
    assert project.absorbed_map() == {short: long_}
    check_invariants(project)

    # The keeper's section goes: the absorbed text comes back, searchable, in the same pass.
    write(a, f"## lunch\n{UNRELATED[0]}\n")
    os.utime(a, (2, 2))
    r = project.index()
    assert (r.entries_added, r.entries_removed) == (1, 1)
    assert short in entry_ids(project) and long_ not in entry_ids(project)
    assert project.con.execute("SELECT count(*) FROM absorbed").fetchone()[0] == 0
    assert [h.id for h in project.search("reconcile nightly ops bucket", mode="bm25")] == [short]
    row = project.con.execute("SELECT source, heading, content FROM entries WHERE id = ?", [short]).fetchone()
    assert row == (".lethe/memory/b.md", "short", f"## short\n{BASE}")
    check_invariants(project)


def test_existing_shorter_entry_is_absorbed_by_a_longer_new_one_which_inherits_its_learned_state(project):
    write(project.memory_dir / "a.md", f"## short\n{BASE}\n")
    project.index()
    short, long_ = id_of(BASE), id_of(LONGER)
    project.con.execute(
        "UPDATE entries SET retrieval_count = 7, affinity = 0.9, tier = 'memory', last_retrieval_step = 12 WHERE id = ?",
        [short],
    )
    project.con.execute("INSERT INTO rif_suppression VALUES (0, ?, 0.4, 12), (3, ?, 0.1, 12)", [short, short])
    write(project.memory_dir / "b.md", f"## long\n{LONGER}\n")
    r = project.index()
    assert (r.entries_added, r.entries_removed, r.entries_absorbed) == (1, 0, 1)
    assert entry_ids(project) == {long_}
    row = project.con.execute(
        "SELECT retrieval_count, affinity, tier, last_retrieval_step FROM entries WHERE id = ?", [long_]
    ).fetchone()
    assert row == (7, 0.9, "memory", 12)
    assert project.con.execute("SELECT count(*) FROM rif_suppression").fetchone()[0] == 0
    assert project.absorbed_map() == {short: long_}
    assert [h.id for h in project.search("reconcile", mode="bm25")] == [long_]
    check_invariants(project)
    # a rebuild re-reads every file: still absorbed
    r = project.index(rebuild=True)
    assert entry_ids(project) == {long_} and r.entries_absorbed == 0
    assert project.absorbed_map() == {short: long_}
    check_invariants(project)


def test_a_keeper_absorbed_later_hands_on_what_it_held(project):
    write(project.memory_dir / "a.md", f"## a\n{BASE}\n")
    write(project.memory_dir / "b.md", f"## b\n{LONGER}\n")
    r = project.index()
    assert r.entries_absorbed == 1   # within one batch
    write(project.memory_dir / "c.md", f"## c\n{LONGEST}\n")
    r = project.index()
    assert r.entries_absorbed == 1
    final = id_of(LONGEST)
    assert entry_ids(project) == {final}
    assert project.absorbed_map() == {id_of(BASE): final, id_of(LONGER): final}
    direct = dict(project.con.execute("SELECT id, into_id FROM absorbed").fetchall())
    assert direct == {id_of(BASE): final, id_of(LONGER): final}
    check_invariants(project)
    # the last keeper goes: both come back, and merge again between themselves
    (project.memory_dir / "c.md").unlink()
    r = project.index()
    assert entry_ids(project) == {id_of(LONGER)}
    assert project.absorbed_map() == {id_of(BASE): id_of(LONGER)}
    check_invariants(project)


@pytest.mark.parametrize("before,after", [(BASE, LONGER), (LONGER, BASE)])
def test_editing_a_section_replaces_it_without_absorbing_the_old_version(project, before, after):
    f = write(project.memory_dir / "a.md", f"## x\n{before}\n")
    project.index()
    write(f, f"## x\n{after}\n")
    os.utime(f, (1, 1))
    r = project.index()
    assert (r.entries_added, r.entries_removed, r.entries_absorbed) == (1, 1, 0)
    assert entry_ids(project) == {id_of(after)}
    assert project.con.execute("SELECT count(*) FROM absorbed").fetchone()[0] == 0


def test_unrelated_texts_are_never_merged(project):
    write(project.memory_dir / "a.md", "".join(f"## s{i}\n{t}\n" for i, t in enumerate(UNRELATED[:3])))
    project.index()
    write(project.memory_dir / "b.md", "".join(f"## s{i}\n{t}\n" for i, t in enumerate(UNRELATED[3:] + [BASE])))
    r = project.index()
    assert r.entries_absorbed == 0
    assert entry_ids(project) == {id_of(t) for t in UNRELATED + [BASE]}
    assert project.con.execute("SELECT count(*) FROM absorbed").fetchone()[0] == 0


@pytest.mark.parametrize("setting", [{"dedup_threshold": 0.0}, {"dedup_threshold": 1.0}, {"dedup": False}])
def test_dedup_can_be_switched_off(project, setting):
    project.settings = project.settings.with_(**setting)
    write(project.memory_dir / "a.md", f"## a\n{BASE}\n## b\n{LONGER}\n")
    r = project.index()
    assert (r.entries_added, r.entries_absorbed) == (2, 0)


def test_a_batch_over_dedup_max_batch_skips_the_check_with_a_warning(project):
    project.settings = project.settings.with_(dedup_max_batch=1)
    write(project.memory_dir / "a.md", f"## a\n{BASE}\n## b\n{LONGER}\n")
    r = project.index()
    assert (r.entries_added, r.entries_absorbed) == (2, 0)
    assert any("dedup_max_batch" in w and "lethe dedupe" in w for w in r.warnings)


def test_put_documents_dedups_too_and_absorbed_map_maps_items(project):
    from lethe_sql.ingest import IndexReport
    from lethe_sql.markdown import Document

    report = IndexReport()
    project.put_documents("bench/x", [Document(BASE), Document(UNRELATED[1]), Document(LONGER)], report=report)
    assert report.entries_absorbed == 1
    amap = project.absorbed_map()
    assert amap == {id_of(BASE): id_of(LONGER)}
    live = entry_ids(project)
    assert all(amap.get(id_of(t), id_of(t)) in live for t in (BASE, UNRELATED[1], LONGER))


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


def test_lethe_add_of_the_same_text_twice_is_one_entry_with_two_occurrences(tmp_path, cli_env):
    root = tmp_path / "p"
    root.mkdir()
    r = ["--root", str(root)]
    run([*r, "init"], cli_env)
    a = json.loads(run([*r, "add", "--json", UNRELATED[1]], cli_env).stdout)["id"]
    b = json.loads(run([*r, "add", "--json", UNRELATED[1]], cli_env).stdout)["id"]
    assert a == b == id_of(UNRELATED[1])
    assert db_rows(root, "SELECT id FROM entries") == [(a,)]
    assert db_rows(root, "SELECT count(*) FROM entry_sources WHERE id = ?", [a]) == [(2,)]
    assert db_rows(root, "SELECT count(*) FROM absorbed") == [(0,)]


def test_lethe_dedupe_dry_run_then_merge_list_and_restore(tmp_path, cli_env):
    root = tmp_path / "p"
    root.mkdir()
    r = ["--root", str(root)]
    run([*r, "init"], cli_env)
    mem = root / ".lethe" / "memory"
    write(mem / "a.md", f"## short\n{BASE}\n## other\n{UNRELATED[2]}\n")
    write(mem / "b.md", f"## long\n{LONGER}\n## other\n{UNRELATED[3]}\n")
    off = dict(cli_env, LETHE_DEDUP="0")
    idx = json.loads(run([*r, "index", "--json"], off).stdout)     # planted: on-write dedup off
    assert (idx["entries_total"], idx["entries_absorbed"]) == (4, 0)
    short, long_ = id_of(BASE), id_of(LONGER)

    dry = json.loads(run([*r, "dedupe", "--dry-run", "--json"], cli_env).stdout)
    assert dry["dry_run"] is True and dry["absorbed"] == 0
    assert [(p["kept"], p["absorbed"]) for p in dry["pairs"]] == [(long_, short)]
    assert dry["pairs"][0]["similarity"] >= 0.95 and dry["pairs"][0]["absorbed_text"] == BASE
    assert len(db_rows(root, "SELECT id FROM entries")) == 4
    assert db_rows(root, "SELECT count(*) FROM absorbed") == [(0,)]
    # a threshold above the pair's cosine finds nothing
    assert json.loads(run([*r, "dedupe", "--dry-run", "--json", "--threshold", "0.999"], cli_env).stdout)["pairs"] == []

    done = json.loads(run([*r, "dedupe", "--json"], cli_env).stdout)
    assert done["absorbed"] == 1 and done["entries_total"] == 3
    assert short not in {x for (x,) in db_rows(root, "SELECT id FROM entries")}
    assert db_rows(root, "SELECT name FROM fts_main_entries.docs WHERE name = ?", [short]) == []

    listed = json.loads(run([*r, "dedupe", "--list", "--json"], cli_env).stdout)
    assert [(x["id"], x["into_id"], x["text"], x["source"]) for x in listed] == [
        (short, long_, BASE, ".lethe/memory/a.md")
    ]
    assert "->" in run([*r, "dedupe", "--list"], cli_env).stdout

    out = run([*r, "dedupe", "--restore", short], cli_env).stdout
    assert "restored" in out
    assert len(db_rows(root, "SELECT id FROM entries")) == 4
    assert db_rows(root, "SELECT count(*) FROM absorbed") == [(0,)]
    hits = json.loads(run([*r, "search", "reconcile nightly", "--json", "--mode", "bm25"], cli_env).stdout)
    assert {h["id"] for h in hits} == {short, long_}
    # restored means exempt: neither a pass nor a reindex absorbs it again
    assert json.loads(run([*r, "dedupe", "--json"], cli_env).stdout)["pairs"] == []
    write(mem / "a.md", f"## short\n{BASE}\n## other\n{UNRELATED[2]}\n## new\n{LONGEST}\n")
    os.utime(mem / "a.md", (1, 1))
    idx = json.loads(run([*r, "index", "--json"], cli_env).stdout)
    assert (idx["entries_total"], idx["entries_absorbed"]) == (4, 1)   # LONGER goes into LONGEST, BASE stays
    assert db_rows(root, "SELECT id, into_id FROM absorbed") == [(long_, id_of(LONGEST))]
    assert db_rows(root, "SELECT count(*) FROM entries WHERE id = ?", [short]) == [(1,)]

    bad = run([*r, "dedupe", "--restore", "ffffffffffffffff"], cli_env, check=False)
    assert bad.returncode == 2 and bad.stderr.strip().startswith("lethe: error: no absorbed entry")


def test_lethe_index_says_how_many_were_absorbed(tmp_path, cli_env):
    root = tmp_path / "p"
    root.mkdir()
    r = ["--root", str(root)]
    run([*r, "init"], cli_env)
    write(root / ".lethe" / "memory" / "a.md", f"## a\n{BASE}\n## b\n{LONGER}\n")
    out = run([*r, "index"], cli_env).stdout
    assert "+1 -0 entries" in out and "1 near-duplicate(s) absorbed" in out
