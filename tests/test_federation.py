"""Cross-project search: projects ATTACHed READ_ONLY to one connection, one first stage
over the union, one judge batch, nothing written. Real DuckDB files, real FTS tables,
the real embedder; `lethe` runs as a process where the user's path matters."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb
import pytest

from conftest import BIN, REPO, write

LETHE = str(BIN / "lethe")

MEMORIES = {
    "alpha": [
        "Postgres for alpha listens on port 5433 in staging; 5432 is the system one.",
        "Alpha deploys run on Tuesdays through the blue-green pipeline.",
        "The alpha webhook retries five times with exponential backoff.",
        "Alpha uses sqlalchemy 2.0 with alembic migrations.",
    ],
    "beta": [
        "Beta caches user sessions in redis with a 300 second TTL.",
        "Beta's CI is flaky because the reconcile test depends on the timezone.",
        "Beta stores uploads in the S3 bucket beta-uploads.",
        "The beta public API is rate limited to 100 requests per minute.",
    ],
    "gamma": [
        "Gamma trains its ranking models on two A100 GPUs overnight.",
        "The gamma postgres replica lags behind during nightly backups.",
        "Gamma's CI is flaky too: its reconcile test depends on the timezone.",
        "Deploying gamma needs the office VPN switched on.",
    ],
}


def _markdown(texts):
    return "".join(f"## note {i}\n\n{t}\n\n" for i, t in enumerate(texts))


@pytest.fixture(scope="module")
def fed_env(tmp_path_factory, embedder):
    """Three indexed projects registered in a private LETHE_HOME, plus one database
    holding all three projects' memories (the reference for equivalence)."""
    from lethe_sql import MemoryStore
    from lethe_sql.registry import Registry

    base = tmp_path_factory.mktemp("fed")
    home = base / "lethe-home"
    reg = Registry(home / "projects.json")
    projects = {}
    for name, texts in MEMORIES.items():
        root = base / name
        write(root / ".lethe" / "memory" / f"{name}.md", _markdown(texts))
        write(base / "merged" / ".lethe" / "memory" / f"{name}.md", _markdown(texts))
        with MemoryStore(root, embedder=embedder) as store:
            store.index()
        projects[name] = reg.add(root)[0]
    with MemoryStore(base / "merged", embedder=embedder) as store:
        store.index()
    env = dict(os.environ, LETHE_HOME=str(home), HOME=str(base / "home"), LETHE_CACHE=str(base / "cache"),
               LETHE_LOCK_TIMEOUT="0.3")
    env.pop("LETHE_DISABLE_GLOBAL_REGISTRY", None)
    return {"base": base, "home": home, "projects": projects, "env": env, "registry": reg}


def lethe(args, env, check=True, input=None):
    p = subprocess.run([LETHE, *args], env=env, capture_output=True, text=True, timeout=300, input=input)
    if check and p.returncode != 0:
        raise AssertionError(f"lethe {args} exited {p.returncode}: {p.stderr}")
    return p


def _state(root: Path) -> tuple:
    con = duckdb.connect(str(root / ".lethe" / "index" / "lethe.duckdb"), read_only=True)
    try:
        return (
            con.execute("SELECT value FROM meta WHERE key = 'search_step'").fetchall(),
            con.execute("SELECT count(*) FROM query_log").fetchone()[0],
            con.execute("SELECT count(*) FROM rif_suppression").fetchone()[0],
            con.execute("SELECT sum(retrieval_count), string_agg(tier, ',' ORDER BY id) FROM entries").fetchone(),
        )
    finally:
        con.close()


def test_union_equals_one_database_holding_every_project(fed_env, embedder):
    """Same first stage (ids, fused scores, ranks) and same final order as a search of
    one database holding all the memories: the scores are comparable across projects."""
    from lethe_sql import MemoryStore, federation
    from lethe_sql.judges import LateInteractionJudge, encode_query
    from lethe_sql.pipeline import _candidates
    from lethe_sql.pipeline import run as run_one
    from lethe_sql.settings import Settings

    s = Settings().with_(rif=False)
    projects = list(fed_env["projects"].values())
    with MemoryStore(fed_env["base"] / "merged", embedder=embedder, read_only=True) as one, \
            federation.Federation(projects) as fed:
        for q in ["postgres port in staging", "deploy", "flaky timezone test", "it's \"quoted\"; DROP TABLE entries; --"]:
            enc = encode_query(embedder, q)
            mine = fed.candidates(enc, 30, 30, s)
            ref = _candidates(one.con, enc, 30, 30, 0, 1, s)
            key = lambda c: (c.id, c.bm25_rank, c.ctx_rank, c.dense_rank)  # noqa: E731
            assert [key(c) for c in mine] == [key(c) for c in ref], q
            assert [(c.fused, c.dense_score) for c in mine] == [pytest.approx((c.fused, c.dense_score), abs=1e-6) for c in ref]
            judge = federation.pick_judge(fed, "auto")
            out = federation.run(fed, enc, s, judge)
            ref_out = run_one(one.con, enc, s, LateInteractionJudge(), learn=False)
            assert out.judge == "late-interaction"
            assert [c.id for c in out.results] == [c.id for c in ref_out.results], q
            # the same scores up to float rounding (rounding both to 6 places can split two
            # values 1e-7 apart on either side of a boundary)
            assert [c.judge_score for c in out.results] == pytest.approx([c.judge_score for c in ref_out.results], abs=1e-6)
            assert judge.batches == 1  # late interaction judges the whole pool in one batch
        # the union's first stage is prepared once (lethe_sql.prepared) and DuckDB keeps its plan
        plans = fed.con.execute("SELECT result_types IS NOT NULL FROM duckdb_prepared_statements() "
                                "WHERE name LIKE 'lethe_%'").fetchall()
        assert len(plans) == 2 and all(ok for (ok,) in plans)  # two shapes: 30 candidates, the judged 100
    # the rrf fusion too
    enc = encode_query(embedder, "redis session cache")
    r = s.with_(fusion="rrf")
    with MemoryStore(fed_env["base"] / "merged", embedder=embedder, read_only=True) as one, \
            federation.Federation(projects) as fed:
        assert [c.id for c in fed.candidates(enc, 10, 30, r)] == [c.id for c in _candidates(one.con, enc, 10, 30, 0, 1, r)]


def test_generated_sql_qualifies_every_table_and_binds_the_query(fed_env):
    from lethe_sql.federation import first_stage_sql, qualify

    sql = first_stage_sql(("alpha", "beta"))
    assert "$q" in sql and "$qvec" in sql and "postgres" not in sql
    for t in ("fts_main_entries.dict", "fts_main_entries.terms", "fts_main_entries.docs", "fts_main_entries.stats",
              "lethe_ctx.dict", "lethe_ctx.stats", "main.entries", "main.enrichment"):
        assert f'"alpha".{t}' in sql and f'"beta".{t}' in sql
    # no unqualified base table is left, and no macro is called: DuckDB cannot run them across ATTACH
    assert not re.search(r"(?<![.\w\"])(fts_main_entries|lethe_ctx)\.", sql)
    assert not re.search(r"(FROM|JOIN) (entries|enrichment)\b", sql)
    assert not re.search(r"lethe_(bm25|bm25_ctx|dense|fused|hybrid|candidates|suppression_at)\(", sql, re.I)
    q = qualify("SELECT __project__ AS p, e.id FROM entries AS e JOIN qterms USING (id)", 'we"ird').sql(dialect="duckdb")
    assert q == """SELECT 'we"ird' AS p, e.id FROM "we""ird".main.entries AS e JOIN qterms USING (id)"""


def test_the_federated_first_stage_is_expanded_from_the_sql_files():
    """One text per concept: the union's statement is pipeline.CANDIDATES_SQL expanded from
    the macros of sql/, so the BM25 formula and the fusion are written once, in sql/."""
    from lethe_sql import federation
    from lethe_sql.resources import resource_dir

    src = (REPO / "lethe_sql" / "federation.py").read_text(encoding="utf-8")
    for text in ("0.75 * (docs.len", "(1.2 + 1)", "stddev_pop", "1.0 / (60 +"):
        assert text in (resource_dir("sql") / ("fuse.sql" if text in ("stddev_pop", "1.0 / (60 +") else "bm25.sql")).read_text()
        assert text not in src
    macros = federation.table_macros()
    assert set(federation.LIST_MACROS) | {"lethe_candidates", "lethe_fused", "lethe_hybrid"} <= set(macros)
    sql = federation.first_stage_sql(("p0",))
    # the BM25 formula of sql/bm25.sql, as sqlglot writes it, stands in the generated statement
    body = macros["lethe_bm25"].body.find(federation.exp.Sum).sql(dialect="duckdb")
    assert body in sql


def test_the_union_statistics_are_read_once_per_list_not_once_per_project():
    """Each project's dict is read a fixed number of times whatever the number of projects
    (the union's df is summed once per BM25 list, in a CTE every project's copy reads), and
    the entries joined to the candidates are looked up by their ids, project by project."""
    from lethe_sql import federation

    def reads(n, table):
        sql = federation.first_stage_sql(tuple(f"p{i}" for i in range(n)))
        return sql.count(f'"p0".{table} ')

    for table in ("fts_main_entries.dict", "lethe_ctx.dict", "fts_main_entries.stats", "lethe_ctx.stats"):
        assert reads(2, table) == reads(5, table) > 0, table
    sql = federation.first_stage_sql(("p0", "p1"))
    assert "lethe_union_fts_main_entries_dict" in sql and "lethe_union_lethe_ctx_stats" in sql
    assert re.search(r'FROM "p1"\.main\.entries AS e WHERE e\.id IN \(SELECT k\.id FROM \w+ AS k WHERE k\.project = 1\)', sql)


def test_cli_all_json_tags_hits_with_their_project_and_learns_nothing(fed_env):
    env = fed_env["env"]
    roots = {n: Path(p.root) for n, p in fed_env["projects"].items()}
    before = {n: _state(r) for n, r in roots.items()}
    mtimes = {n: (r / ".lethe" / "index" / "lethe.duckdb").stat().st_mtime_ns for n, r in roots.items()}
    hits = json.loads(lethe(["search", "postgres deploy redis logs", "--all", "--json", "-k", "12"], env).stdout)
    assert {h["project"] for h in hits} == {"alpha", "beta", "gamma"}
    for h in hits:
        assert h["root"] == str(roots[h["project"]])
        assert h["content"].split("\n\n", 1)[1] in MEMORIES[h["project"]]
        assert h["judge"] == "late-interaction" and h["rank"] >= 1
    top = json.loads(lethe(["search", "which port does postgres use in staging", "--all", "--json", "-k", "1"], env).stdout)
    assert top[0]["project"] == "alpha" and "5433" in top[0]["content"]
    assert {n: _state(r) for n, r in roots.items()} == before
    assert {n: (r / ".lethe" / "index" / "lethe.duckdb").stat().st_mtime_ns for n, r in roots.items()} == mtimes

    only = json.loads(lethe(["search", "postgres", "--projects", "beta,gamma", "--json", "-k", "12"], env).stdout)
    assert only and {h["project"] for h in only} <= {"beta", "gamma"}
    assert "gamma" in {h["project"] for h in only}
    by_root = json.loads(lethe(["search", "postgres", "--projects", str(roots["alpha"]), "--json"], env).stdout)
    assert {h["project"] for h in by_root} == {"alpha"}
    text = lethe(["search", "flaky timezone", "--all", "-k", "2"], env).stdout
    assert "beta:" in text and "searched 3 project(s)" in text

    bad = lethe(["search", "x", "--projects", "nope"], env, check=False)
    assert bad.returncode == 2 and bad.stderr.strip() == "lethe: error: no registered project 'nope' (see `lethe projects list`)"
    both = lethe(["search", "x", "--all", "--projects", "beta"], env, check=False)
    assert both.returncode == 2 and "either --all or --projects" in both.stderr


def test_a_project_held_by_a_writer_is_skipped_with_a_warning(fed_env):
    env = fed_env["env"]
    db = Path(fed_env["projects"]["beta"].root) / ".lethe" / "index" / "lethe.duckdb"
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import duckdb, sys
            con = duckdb.connect({str(db)!r})
            con.execute("BEGIN TRANSACTION")
            con.execute("UPDATE meta SET value = value WHERE key = 'search_step'")
            print('locked', flush=True)
            sys.stdin.read()
        """)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        p = lethe(["search", "postgres redis", "--all", "--json", "-k", "12"], env)
        hits = json.loads(p.stdout)
        assert {h["project"] for h in hits} == {"alpha", "gamma"}
        warn = [line for line in p.stderr.splitlines() if "beta" in line]
        assert len(warn) == 1 and "skipped" in warn[0] and "locked by a writing process" in warn[0]
        assert "Traceback" not in p.stderr
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)


def test_missing_corrupt_and_foreign_schema_databases_are_skipped(fed_env, embedder, tmp_path):
    from lethe_sql import MemoryStore, federation
    from lethe_sql.registry import Project

    def project(name: str) -> Project:
        root = tmp_path / name
        (root / ".lethe" / "index").mkdir(parents=True)
        return Project(name, str(root), "")

    missing = project("missing")
    corrupt = project("corrupt")
    corrupt.db_path.write_bytes(b"this is not a duckdb file at all" * 300)
    newer = project("newer")
    write(Path(newer.root) / ".lethe" / "memory" / "n.md", "## n\n\nnewer schema memory about postgres\n")
    with MemoryStore(newer.root, embedder=embedder) as store:
        store.index()
        store.con.execute("INSERT INTO schema_migrations (name, sha256) VALUES ('999_future.sql', 'x')")
    gone = Project("gone", str(tmp_path / "gone"), "")
    busy = project("busy")
    held = duckdb.connect(str(busy.db_path))  # open read-write by this very process
    good = list(fed_env["projects"].values())
    try:
        out = federation.search([*good, missing, corrupt, newer, gone, busy], "postgres", embedder=embedder, top_k=5)
    finally:
        held.close()
    reasons = dict(out.skipped)
    assert set(reasons) == {"missing", "corrupt", "newer", "gone", "busy"}
    assert "is open in this process" in reasons["busy"]
    assert "no database" in reasons["missing"]
    assert "cannot be read" in reasons["corrupt"]
    assert "another schema version (newer" in reasons["newer"]
    assert "no longer exists" in reasons["gone"]
    assert out.results and {c.project for c in out.results} <= {"alpha", "beta", "gamma"}
    with pytest.raises(Exception, match="no project could be searched: project missing skipped"):
        federation.search([missing], "postgres", embedder=embedder)


def _sql_blocks(md: Path) -> list[str]:
    return re.findall(r"```sql\n(.*?)```", md.read_text(encoding="utf-8"), flags=re.S)


def test_lethe_sql_statements_and_the_documented_queries_run(fed_env):
    env = fed_env["env"]
    p = lethe(["sql", "--all", "--print"], env)
    statements = p.stdout
    assert statements.count("ATTACH") == 3 and "(READ_ONLY)" in statements
    con = duckdb.connect()
    try:
        con.execute(statements)
        assert con.execute("SELECT count(*) FROM all_memories").fetchone()[0] == 12
        assert sorted(r[0] for r in con.execute("SELECT project FROM all_projects").fetchall()) == ["alpha", "beta", "gamma"]
        assert con.execute("SELECT count(*) FROM alpha.lethe_memories").fetchone()[0] == 4
        blocks = _sql_blocks(REPO / "docs" / "cross-project.md")
        assert len(blocks) == 2
        assert all(b in _sql_blocks(REPO / "README.md") for b in blocks)  # the README shows the same two
        per_project = con.execute(blocks[0]).fetchall()
        assert {r[0] for r in per_project} == {"alpha", "gamma"} and all(r[1] == 1 for r in per_project)
        pairs = con.execute(blocks[1]).fetchall()
        assert pairs and all(r[0] < r[1] and r[2] >= 0.6 for r in pairs)
        assert any((r[0], r[1]) == ("beta", "gamma") and "reconcile" in r[3] and "reconcile" in r[4] for r in pairs)
        with pytest.raises(duckdb.Error):  # attached read-only
            con.execute("DELETE FROM alpha.entries")
    finally:
        con.close()
    # the interactive path, fed on stdin: the duckdb shell with the projects attached
    shell = lethe(["sql", "--projects", "alpha,beta"], env, input="SELECT project, count(*) AS n FROM all_memories GROUP BY ALL ORDER BY 1;\n")
    assert re.search(r"alpha\s*\S\s*4", shell.stdout) and re.search(r"beta\s*\S\s*4", shell.stdout)
    assert "gamma" not in shell.stdout


def test_slugs_are_safe_identifiers(fed_env, embedder, tmp_path):
    from lethe_sql import MemoryStore, federation
    from lethe_sql.registry import Registry

    root = tmp_path / "My Project-2 (old)"
    write(root / ".lethe" / "memory" / "m.md", "## m\n\nthe odd folder name holds a memory about kafka\n")
    with MemoryStore(root, embedder=embedder) as store:
        store.index()
    reg = Registry(tmp_path / "h" / "projects.json")
    p, _ = reg.add(root)
    assert p.slug == "my_project_2_old"
    out = federation.search([p], "kafka", embedder=embedder)
    assert out.results[0].project == "my_project_2_old" and "kafka" in out.results[0].text
