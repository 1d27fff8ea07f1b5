"""Long memories (issue "Long memories"): every part of a memory longer than the model's
window reaches the dense list and the judge.

The fixture: three design notes of about 900 wordpieces each. Each opens with the same
build-log filler and states its one distinctive fact only at the end, far past the first
254 wordpieces that the memory's own vector reads; a short note shares the subject's
words. Before windows, the dense list could not tell the long notes apart.
"""

from __future__ import annotations

import numpy as np
import pytest

from lethe_sql.markdown import Document
from lethe_sql.udfs.embed import WINDOW_STRIDE, window_starts

FILLER = " ".join(
    f"Step {i} of the nightly build compiled the workspace crates and linked the test binaries."
    for i in range(45)
)
TAILS = {
    "webhooks": "Payment webhooks that fail are retried with exponential backoff, six attempts, then parked.",
    "vacuum": "The analytics warehouse runs a full vacuum every Sunday at three in the morning.",
    "fonts": "The marketing site self-hosts its fonts and subsets them to Latin characters.",
}


def _long(tail: str) -> str:
    return f"{FILLER}\n\n{tail}"


@pytest.fixture()
def long_store(project):
    docs = [Document(content=_long(t), heading=k) for k, t in TAILS.items()]
    docs.append(Document(content="Stripe is the payment provider of the shop.", heading="short"))
    project.put_documents("notes", docs)
    return project


def test_window_starts_cover_the_text_with_overlap():
    assert window_starts(100, 254) == [0]
    assert window_starts(254, 254) == [0]
    assert window_starts(255, 254) == [0, 1]
    assert window_starts(600, 254) == [0, WINDOW_STRIDE, 346]
    # every wordpiece is read, and consecutive windows overlap
    for n in (255, 600, 1000, 5003):
        s = window_starts(n, 254)
        assert s[-1] + 254 == n
        assert all(b - a <= WINDOW_STRIDE and a + 254 > b for a, b in zip(s, s[1:]))


def test_a_long_text_gets_windows_and_token_vectors_for_all_of_it(embedder):
    text = _long(TAILS["webhooks"])
    n = len(embedder._whole.encode(text, add_special_tokens=False).ids)
    assert n > 800
    vecs, toks = embedder.encode_full([text, "a short note"])
    assert toks[1].windows is None and len(toks[1].ids) == 3
    assert len(toks[0].ids) == n  # every wordpiece, once
    assert toks[0].windows.shape == (len(window_starts(n, 254)) - 1, 384)
    assert np.allclose(np.linalg.norm(toks[0].windows, axis=1), 1.0, atol=1e-4)
    # the first window is the text's own vector, unchanged from the truncated read
    alone = embedder.encode([text])
    assert np.allclose(vecs[0], alone[0], atol=1e-6)


def test_the_index_holds_every_window_of_a_long_memory(long_store):
    con = long_store.con
    per = dict(con.execute(
        "SELECT e.heading, count(w.n) FROM entries AS e LEFT JOIN entry_windows AS w USING (id) GROUP BY e.heading"
    ).fetchall())
    assert per["short"] == 0
    assert min(per["webhooks"], per["vacuum"], per["fonts"]) >= 3


@pytest.mark.parametrize("query, heading", [
    ("how many times are failed payment webhooks retried?", "webhooks"),
    ("when does the warehouse vacuum run?", "vacuum"),
    ("are the website fonts self-hosted?", "fonts"),
])
def test_dense_search_finds_a_fact_past_the_first_window(long_store, query, heading):
    hits = long_store.search(query, top_k=4, mode="dense")
    heads = {r[0]: r[1] for r in long_store.con.execute("SELECT id, heading FROM entries").fetchall()}
    ranked = [heads[h.id] for h in hits if heads[h.id] != "short"]
    assert ranked[0] == heading  # the three long notes' first windows are the same filler


def test_default_search_finds_a_fact_past_the_first_window(long_store):
    heads = {r[0]: r[1] for r in long_store.con.execute("SELECT id, heading FROM entries").fetchall()}
    hits = long_store.search("how often does the warehouse get vacuumed", top_k=4)
    assert heads[hits[0].id] == "vacuum"


def test_forgetting_a_long_memory_drops_its_windows(long_store):
    con = long_store.con
    eid = con.execute("SELECT id FROM entries WHERE heading = 'fonts'").fetchone()[0]
    from lethe_sql.ingest import token_index_delete

    token_index_delete(con, [eid])
    assert con.execute("SELECT count(*) FROM entry_windows WHERE id = ?", [eid]).fetchone()[0] == 0
    assert con.execute("SELECT count(*) FROM entry_windows").fetchone()[0] > 0


def test_an_index_from_before_windows_reads_its_long_memories_again(tmp_path, embedder):
    from lethe_sql import MemoryStore

    root = tmp_path / "p"
    (root / ".lethe" / "memory").mkdir(parents=True)
    (root / ".lethe" / "memory" / "2026-01-05.md").write_text(
        "# 2026-01-05\n\n## 10:00 Long note\n\n" + _long(TAILS["vacuum"]) + "\n\n## 11:00 Short\n\nA short note.\n"
    )
    with MemoryStore(root, embedder=embedder) as st:
        st.index()
        con = st.con
        windows = con.execute("SELECT count(*) FROM entry_windows").fetchone()[0]
        tokens = con.execute("SELECT count(*) FROM token_vectors").fetchone()[0]
        assert windows >= 3
        # what an older version left: the first window only, and no mark
        con.execute("DELETE FROM entry_windows")
        con.execute("DELETE FROM token_vectors WHERE pos >= 254")
        con.execute("DELETE FROM meta WHERE key = 'windows_read'")
        st.index()
        assert con.execute("SELECT count(*) FROM entry_windows").fetchone()[0] == windows
        assert con.execute("SELECT count(*) FROM token_vectors").fetchone()[0] == tokens
        assert con.execute("SELECT value FROM meta WHERE key = 'windows_read'").fetchone()[0] == "1"


def test_the_judge_scores_a_long_memory_by_its_best_span(long_store):
    """The late-interaction judge reads every token of a long memory and scores its best
    span (``judges.SPAN``); numpy and the SQL macro agree, and the note whose tail
    answers comes first among the long notes, whose first spans are the same filler."""
    from lethe_sql.judges import LateInteractionJudge, encode_query, ids_literal
    from lethe_sql.vectors import vecs_literal

    con = long_store.con
    heads = dict(con.execute("SELECT id, heading FROM entries").fetchall())
    enc = encode_query(long_store.embedder, "how many attempts do failed payment webhooks get?")
    ids = sorted(heads)
    fast = LateInteractionJudge().score(con, enc, ids)
    sql = dict(con.execute(LateInteractionJudge().sql(), [
        vecs_literal(enc.tok_vecs), "[" + ",".join(map(str, enc.tok_ids.tolist())) + "]", ids_literal(ids), True,
    ]).fetchall())
    for i in ids:
        assert fast[i] == pytest.approx(sql[i], abs=1e-5)
    long_ranked = sorted((i for i in ids if heads[i] != "short"), key=lambda i: -fast[i])
    assert heads[long_ranked[0]] == "webhooks"
