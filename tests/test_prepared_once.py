"""A search prepares its statements once per connection: the second search on the same
store (or federation) runs EXECUTE only. Counted from DuckDB's own query log
(``CALL enable_logging('QueryLog')``), so a change that re-PREPAREs on every call fails
here even though its results are the same."""

from __future__ import annotations

from collections import Counter

import pytest

from lethe_sql.prepared import _PREPARED


def _log(con) -> Counter:
    """(kind, statement name) -> count, for the PREPARE and EXECUTE of lethe's statements."""
    out: Counter = Counter()
    for (msg,) in con.execute("SELECT message FROM duckdb_logs WHERE type = 'QueryLog'").fetchall():
        words = msg.split()
        if len(words) >= 2 and words[0] in ("PREPARE", "EXECUTE") and words[1].startswith("lethe_"):
            out[(words[0], words[1])] += 1
    return out


def _prepares(log: Counter) -> Counter:
    return Counter({name: n for (kind, name), n in log.items() if kind == "PREPARE"})


def _executes(log: Counter) -> int:
    return sum(n for (kind, _), n in log.items() if kind == "EXECUTE")


@pytest.mark.parametrize("mode", ["default", "hybrid", "bm25", "dense"])
def test_two_searches_on_one_store_prepare_the_first_stage_once(conversation, mode):
    store = conversation
    con = store.con
    con.execute("CALL enable_logging('QueryLog')")
    store.search("what did Caroline say about the support group", mode=mode, learn=False)
    first = _log(con)
    assert _prepares(first) and set(_prepares(first).values()) == {1}
    store.search("camping with the kids", mode=mode, learn=False)
    second = _log(con)
    # the second search executed its statement(s) again and prepared nothing
    assert _prepares(second) == _prepares(first)
    assert _executes(second) == 2 * _executes(first)
    assert set(_prepares(second)) <= _PREPARED[con]


def test_a_federated_first_stage_is_prepared_once(tmp_path, embedder):
    from lethe_sql import MemoryStore, federation
    from lethe_sql.judges import encode_query
    from lethe_sql.registry import Registry
    from lethe_sql.settings import Settings

    from conftest import write

    reg = Registry(tmp_path / "home" / "projects.json")
    projects = []
    for name, text in [("one", "Postgres runs on port 5433."), ("two", "Kafka keeps seven days of events.")]:
        write(tmp_path / name / ".lethe" / "memory" / "m.md", f"## m\n\n{text}\n")
        with MemoryStore(tmp_path / name, embedder=embedder) as store:
            store.index()
        projects.append(reg.add(tmp_path / name)[0])
    with federation.Federation(projects) as fed:
        fed.con.execute("CALL enable_logging('QueryLog')")
        s = Settings()
        fed.candidates(encode_query(embedder, "postgres port"), 10, 10, s)
        first = _log(fed.con)
        fed.candidates(encode_query(embedder, "kafka retention"), 10, 10, s)
        second = _log(fed.con)
    assert sum(_prepares(first).values()) == 1
    assert _prepares(second) == _prepares(first) and _executes(second) == 2 == 2 * _executes(first)


def test_the_count_sees_a_repeated_prepare(conversation):
    """The log counts every PREPARE, the same name prepared twice included (DuckDB accepts
    it silently, which is why results alone cannot tell)."""
    con = conversation.con
    con.execute("CALL enable_logging('QueryLog')")
    con.execute("PREPARE lethe_probe AS SELECT 1")
    con.execute("PREPARE lethe_probe AS SELECT 1")
    assert _prepares(_log(con))["lethe_probe"] == 2
