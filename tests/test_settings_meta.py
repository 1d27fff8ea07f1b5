"""Every setting exists once: the SQL a user runs by hand (the ``lethe_suppression`` view,
``lethe_suppression_at`` without a decay) reads ``rif_lambda`` from ``meta``, where every
learning update writes the search's own setting (``settings.meta_rows``)."""

from __future__ import annotations

import math

import pytest

from lethe_sql.judges import encode_query
from lethe_sql.pipeline import run
from lethe_sql.settings import META_SETTINGS, Settings, meta_rows
from test_learning import FixedJudge


def test_a_learning_update_writes_rif_lambda_and_the_view_decays_by_it(project):
    for w in ("alpha", "bravo", "charlie", "delta"):
        project.add(f"note about {w} and the shared topic")
    con = project.con
    # before any update: the setting's default
    assert con.execute("SELECT lethe_rif_lambda()").fetchone()[0] == Settings().rif_lambda
    s = Settings(top_k=1, k_shallow=4, k_deep=4, depth=4, rif_lambda=0.02)
    judge = FixedJudge({"note about alpha and the shared topic": 9.0})
    run(con, encode_query(project.embedder, "alpha"), s, judge, learn=True)
    meta = dict(con.execute("SELECT key, value FROM meta").fetchall())
    assert {k: meta[k] for k in META_SETTINGS} == dict(meta_rows(s)) == {"rif_lambda": "0.02"}
    assert con.execute("SELECT lethe_rif_lambda()").fetchone()[0] == 0.02
    # a suppression row learned 50 steps ago, read through the view and the macro
    con.execute("DELETE FROM rif_suppression")
    step = int(meta["search_step"])
    con.execute("INSERT INTO rif_suppression VALUES (7, 'abc', 0.5, ?)", [step - 50])
    want = 0.5 * math.exp(-0.02 * 50)
    assert con.execute("SELECT s FROM lethe_suppression WHERE id = 'abc'").fetchone()[0] == pytest.approx(want)
    assert con.execute("SELECT s FROM lethe_suppression_at(7, ?)", [step]).fetchone()[0] == pytest.approx(want)
    assert con.execute("SELECT s FROM lethe_suppression_at(7, ?, decay := 0.0)", [step]).fetchone()[0] == 0.5
