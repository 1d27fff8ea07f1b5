"""The update-chain benchmark (bench/lethe_bench/updates.py): its metrics, its reading of a
set, what it says about a miss, and a run end to end on a small set with the real model."""

import json

import pytest

from lethe_bench import updates as U
from lethe_sql.errors import UsageError

CUR = {"id": "q1", "kind": "current", "question": "?", "current": "c", "stale": ["s1", "s2"]}


@pytest.mark.parametrize("ranked, want", [
    (["c", "x", "s1"], (1.0, 1.0, 0.0)),
    (["s1", "c"], (0.0, 0.0, 1.0)),
    (["x", "c", "s1"], (0.0, 1.0, 0.0)),
    (["x", "s2", "c"], (0.0, 0.0, 0.0)),
    (["x", "y"], (0.0, 0.0, 0.0)),
    ([f"n{i}" for i in range(10)] + ["c"], (0.0, 0.0, 0.0)),  # the current version 11th: not in the top 10
])
def test_current_metrics(ranked, want):
    m = U._metrics(CUR, ranked)
    assert (m["cur@1"], m["cur_first"], m["stale@1"]) == want


def test_past_and_static_count_the_top_five():
    past = {"kind": "past", "target": "t", "newer": ["n"]}
    assert U._metrics(past, ["a", "b", "c", "d", "t"]) == {"past@5": 1.0}
    assert U._metrics(past, ["a", "b", "c", "d", "e", "t"]) == {"past@5": 0.0}
    assert U._metrics({"kind": "static", "target": "t"}, ["t"]) == {"static@5": 1.0}


def test_a_miss_says_what_ranked_first():
    linked = lambda a, b: (a, b) == ("s1", "c")  # noqa: E731
    assert U.miss(CUR, ["c", "s1"], linked) is None
    assert U.miss(CUR, ["s1", "c"], linked) == "stale version, linked"
    assert U.miss(CUR, ["s2", "c"], linked) == "stale version, not linked"
    assert U.miss(CUR, ["x", "c"], linked) == "another memory, current in the top 10"
    assert U.miss(CUR, ["x", "y"], linked) == "another memory, current not in the top 10"
    assert U.miss({"kind": "static", "target": "t"}, ["x"], linked) is None


def _memory(i, date, title, text):
    return {"id": f"p1-m{i}", "date": date, "time": "09:00", "title": title, "text": text}


SET = {"projects": [{"id": "p1", "memories": [
    _memory(1, "2026-03-02", "Staging database", "Staging Postgres listens on port 5433."),
    _memory(2, "2026-03-03", "Backups", "Nightly backups of the ledger go to the s3://acme-backups bucket at 02:00."),
    _memory(3, "2026-03-04", "Linting", "CI runs ruff and mypy on every pull request."),
    _memory(4, "2026-03-10", "Staging database moved", "Staging Postgres listens on port 5434."),
], "queries": [
    {"id": "q1", "kind": "current", "question": "Which port does staging Postgres use now?",
     "current": "p1-m4", "stale": ["p1-m1"]},
    {"id": "q2", "kind": "past", "question": "Which port did staging Postgres use before?",
     "target": "p1-m1", "newer": ["p1-m4"]},
    {"id": "q3", "kind": "static", "question": "Where do the nightly backups end up?", "target": "p1-m2"},
]}]}


def test_reading_a_set_names_the_fault(tmp_path):
    bad = json.loads(json.dumps(SET))
    bad["projects"][0]["queries"][0]["stale"] = ["p1-m9"]
    (tmp_path / "a.json").write_text(json.dumps(bad))
    with pytest.raises(UsageError, match="query q1 names unknown memories p1-m9"):
        U.load(tmp_path / "a.json")
    bad = json.loads(json.dumps(SET))
    del bad["projects"][0]["memories"][2]["date"]
    (tmp_path / "a.json").write_text(json.dumps(bad))
    with pytest.raises(UsageError, match="memory p1-m3 has no date"):
        U.load(tmp_path / "a.json")
    with pytest.raises(UsageError, match="no project p7"):
        (tmp_path / "a.json").write_text(json.dumps(SET))
        U.load(tmp_path / "a.json", ["p7"])


@pytest.mark.slow
def test_a_run_scores_the_port_example(tmp_path):
    (tmp_path / "set.json").write_text(json.dumps(SET))
    result, per_query = U.run(tmp_path / "set.json", ["default"], workdir=tmp_path, log=lambda *a: None)
    row = result["configs"]["default"]
    assert {m: row[m]["mean"] for m in U.METRICS} == {"cur@1": 1.0, "cur_first": 1.0, "stale@1": 0.0,
                                                         "past@5": 1.0, "static@5": 1.0}
    assert result["detection"]["gold_pairs"] == 1 and result["detection"]["link_recall"] == 1.0
    assert row["misses"] == dict.fromkeys(U.MISSES, 0)
    assert per_query["default"]["q1"]["top"][:2] == ["p1-m4", "p1-m1"]
    assert per_query["default"]["q2"]["top"][0] == "p1-m1"
    report = U.markdown(result, "lethe bench updates set.json")
    assert "| default | 1.000 [1.000, 1.000] | 1.000" in report and "not answered first" in report
