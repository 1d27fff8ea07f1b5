"""`--all` over one project is that project's own search: the federated first stage is
expanded from the same sql/ macros (lethe_sql.federation), enrichment vectors included,
so its ranking and scores equal lethe_candidates' and the final order equals the
single-project pipeline's."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from conftest import BIN, write

LETHE = str(BIN / "lethe")

NOTES = [
    "Local postgres runs on port 5433 now.",
    "The linter is ruff, with the line length at 120.",
    "Deploys go out on Tuesdays after the standup.",
    "The webhook retries five times with exponential backoff.",
    "Socket timeouts in the client are set to thirty seconds.",
    "Redis keeps user sessions for five minutes.",
]
QUERY = "which socket does the zeppelin database listen on"


@pytest.fixture(scope="module")
def enriched(tmp_path_factory, embedder):
    """One registered, indexed project whose postgres note carries an enrichment (stored
    the way `lethe enrich` stores one): the query reaches it through the enrichment."""
    from lethe_sql import MemoryStore
    from lethe_sql.agents.enrich import _store_results
    from lethe_sql.registry import Registry

    base = tmp_path_factory.mktemp("fed1")
    root = base / "solo"
    write(root / ".lethe" / "memory" / "2026-01-05.md", "".join(f"## n{i}\n\n{t}\n\n" for i, t in enumerate(NOTES)))
    with MemoryStore(root, embedder=embedder) as store:
        store.index()
        eid = store.con.execute("SELECT id FROM entries WHERE text LIKE '%5433%'").fetchone()[0]
        data = {"gist": "The zeppelin database server listens on a non-default socket.",
                "questions": ["Which socket does the zeppelin database listen on?", "Where is the zeppelin DB?",
                              "What port does zeppelin use?"],
                "entities": ["zeppelin"], "temporal": []}
        _store_results(store, "test-model", [(eid, data, 10, 10)])
    project = Registry(base / "home" / "projects.json").add(root)[0]
    env = dict(os.environ, LETHE_HOME=str(base / "home"), HOME=str(base / "userhome"), LETHE_CACHE=str(base / "cache"))
    env.pop("LETHE_DISABLE_GLOBAL_REGISTRY", None)
    return {"root": root, "project": project, "id": eid, "env": env}


def _key(c):
    return (c.id, c.pool_rank, round(c.fused, 9), round(c.adjusted, 9), c.bm25_rank, c.ctx_rank, c.dense_rank,
            round(c.dense_score, 9), c.tier)


@pytest.mark.parametrize("fusion", ["z", "rrf"])
def test_federation_of_one_project_equals_its_first_stage(enriched, embedder, fusion):
    from lethe_sql import MemoryStore, federation
    from lethe_sql.judges import encode_query
    from lethe_sql.pipeline import _candidates
    from lethe_sql.settings import Settings

    s = Settings().with_(fusion=fusion)
    enc = encode_query(embedder, QUERY)
    with MemoryStore(enriched["root"], embedder=embedder, read_only=True) as one, \
            federation.Federation([enriched["project"]]) as fed:
        own = one.con.execute("SELECT array_inner_product(embedding, CAST(? AS FLOAT[384])) FROM entries WHERE id = ?",
                              [enc.vec_text, enriched["id"]]).fetchone()[0]
        for k, depth in [(10, 30), (100, 100)]:
            ref = _candidates(one.con, enc, k, depth, 0, 1, s)
            mine = fed.candidates(enc, k, depth, s)
            assert [_key(c) for c in mine] == [_key(c) for c in ref]
            # the enriched entry tops the dense list on its enrichment's vector (better than its
            # own), and leads the default (z) fusion
            top = next(c for c in ref if c.id == enriched["id"])
            assert top.dense_rank == 1 and top.dense_score > own + 0.05
            assert fusion == "rrf" or ref[0].id == enriched["id"]
            assert {c.project for c in mine} == {enriched["project"].slug}


def test_search_all_over_one_project_returns_its_ranking(enriched, embedder):
    """The Python API and `lethe search --all` give exactly the single-project search's
    ranking and scores (judge included), the enriched entry first."""
    from lethe_sql import MemoryStore, federation

    with MemoryStore(enriched["root"], embedder=embedder, read_only=True) as one:
        ref = one.search_outcome(QUERY, learn=False)
    out = federation.search([enriched["project"]], QUERY, embedder=embedder)
    assert out.judge == ref.judge == "late-interaction"
    assert [(c.id, round(c.judge_score, 9)) for c in out.results] == [(c.id, round(c.judge_score, 9)) for c in ref.results]
    assert [_key(c) for c in out.pool] == [_key(c) for c in ref.pool]
    assert out.results[0].id == enriched["id"]

    env = enriched["env"]
    run = lambda *a: json.loads(subprocess.run([LETHE, "search", QUERY, "--json", *a], env=env, cwd=enriched["root"],  # noqa: E731
                                               capture_output=True, text=True, check=True, timeout=300).stdout)
    solo, every = run("--read-only"), run("--all")
    assert [(h["rank"], h["id"], round(h["score"], 6)) for h in every] == [(h["rank"], h["id"], round(h["score"], 6)) for h in solo]
    assert every[0]["id"] == enriched["id"] and {h["project"] for h in every} == {enriched["project"].slug}
