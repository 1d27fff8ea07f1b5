"""Bench loaders on tiny hand-written fixtures (plain and gzipped), and the smoke files."""

import gzip
import json
from pathlib import Path

import pytest

from lethe_bench import beir, locomo, longmemeval
from lethe_bench.data import sha256_file

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"

LOCOMO = [
    {
        "sample_id": "conv-x",
        "conversation": {
            "speaker_a": "Ann",
            "speaker_b": "Bob",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                {"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a dog."},
                {"speaker": "Bob", "dia_id": "D1:2", "text": "Nice!", "blip_caption": "a photo of a puppy"},
            ],
            "session_2_date_time": "9:00 am on 1 June, 2023",
            "session_2": [
                {"speaker": "Ann", "dia_id": "D2:1", "text": "The dog is called Rex."},
                {"speaker": "Bob", "dia_id": "D2:2", "text": "Thanks!"},
            ],
        },
        "qa": [
            {"question": "What did Ann adopt?", "answer": "a dog", "evidence": ["D1:1"], "category": 4},
            {"question": "Dog's name?", "answer": "Rex", "evidence": ["D1:1; D2:1"], "category": 1},
            {"question": "Typo id", "answer": "x", "evidence": ["D:2:2"], "category": 2},
            {"question": "Unknown", "answer": "x", "evidence": ["D9:9"], "category": 3},
            {"question": "Adversarial", "adversarial_answer": "x", "evidence": ["D1:1"], "category": 5},
        ],
    }
]


def _write(path: Path, obj, gz: bool) -> Path:
    data = json.dumps(obj).encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


@pytest.mark.parametrize("gz", [False, True])
def test_locomo_turn_global(tmp_path, gz):
    p = _write(tmp_path / ("l.json.gz" if gz else "l.json"), LOCOMO, gz)
    b = locomo.load(p, "turn-global")
    assert b.dataset == "locomo" and b.turn_level and not b.session_level
    assert len(b.corpora) == 1
    items = {i.id: i for i in b.corpora[0].items}
    assert list(items) == ["conv-x:D1:1", "conv-x:D1:2", "conv-x:D2:1", "conv-x:D2:2"]
    assert items["conv-x:D1:1"].text == "Ann: I adopted a dog."
    assert items["conv-x:D1:2"].text == "Bob: Nice! (image: a photo of a puppy)"
    assert items["conv-x:D2:1"].session == "conv-x:session_2"
    assert items["conv-x:D1:1"].created_at.isoformat() == "2023-05-08T13:56:00"
    qs = b.corpora[0].queries
    assert [q.text for q in qs] == ["What did Ann adopt?", "Dog's name?", "Typo id"]
    assert qs[0].relevant == {"conv-x:D1:1": 1} and qs[0].category == "4"
    assert qs[1].relevant == {"conv-x:D1:1": 1, "conv-x:D2:1": 1}
    assert qs[2].relevant == {"conv-x:D2:2": 1}  # "D:2:2" cleaned to D2:2
    assert b.files == {p.name: sha256_file(p)}
    assert any("1 question(s) left without evidence" in n for n in b.notes)
    # nothing about relevance is in the text of any item
    assert all("D1:1" not in i.text for i in items.values())


def test_locomo_session_local(tmp_path):
    p = _write(tmp_path / "l.json", LOCOMO + [dict(LOCOMO[0], sample_id="conv-y")], False)
    b = locomo.load(p, "session-local")
    assert b.session_level and not b.turn_level
    assert [c.name for c in b.corpora] == ["conv-x", "conv-y"]
    c = b.corpora[0]
    assert [i.id for i in c.items] == ["conv-x:session_1", "conv-x:session_2"]
    assert c.items[1].text == "Ann: The dog is called Rex.\nBob: Thanks!"
    assert c.queries[1].relevant == {"conv-x:session_1": 1, "conv-x:session_2": 1}
    assert len(locomo.load(p, "session-local", limit_conversations=1).corpora) == 1
    with pytest.raises(ValueError):
        locomo.load(p, "nope")


def _lme_question(qid, has_answer=True, answer_sessions=("ans_1",)):
    return {
        "question_id": qid,
        "question_type": "single-session-user",
        "question": "What degree did I get?",
        "answer": "Business",
        "question_date": "2023/05/30 (Tue) 23:40",
        "haystack_session_ids": ["noise_1", "ans_1"],
        "haystack_dates": ["2023/05/01 (Mon) 10:00", "2023/05/02 (Tue) 11:30"],
        "haystack_sessions": [
            [{"role": "user", "content": "Recipe ideas?"}, {"role": "assistant", "content": "Try soup."}],
            [
                {"role": "user", "content": "I graduated in Business.", **({"has_answer": True} if has_answer else {})},
                {"role": "assistant", "content": "Congratulations!"},
            ],
        ],
        "answer_session_ids": list(answer_sessions),
    }


@pytest.mark.parametrize("gz", [False, True])
def test_longmemeval_turn_global(tmp_path, gz):
    data = [_lme_question("q1"), _lme_question("q2", has_answer=False), _lme_question("q3_abs")]
    p = _write(tmp_path / ("longmemeval_x.json.gz" if gz else "longmemeval_x.json"), data, gz)
    b = longmemeval.load(p, "turn-global")
    assert len(b.corpora) == 1 and b.turn_level
    items = b.corpora[0].items
    assert [i.id for i in items] == ["noise_1:0", "noise_1:1", "ans_1:0", "ans_1:1"]  # unique across haystacks
    assert items[2].text == "user: I graduated in Business." and items[2].session == "ans_1"
    assert items[2].created_at.isoformat() == "2023-05-02T11:30:00"
    qs = b.corpora[0].queries
    assert [q.id for q in qs] == ["q1", "q2"]  # the abstention question is left out
    assert qs[0].relevant == {"ans_1:0": 1}  # has_answer turns
    assert qs[1].relevant == {"ans_1:0": 1, "ans_1:1": 1}  # no marks: every turn of the answer session
    assert qs[0].category == "single-session-user"
    assert any("abstention" in n for n in b.notes)


def test_longmemeval_session_local(tmp_path):
    data = [_lme_question("q1"), _lme_question("q2", answer_sessions=("gone",))]
    p = _write(tmp_path / "longmemeval_x.json", data, False)
    b = longmemeval.load(p, "session-local")
    assert b.session_level and [c.name for c in b.corpora] == ["q1"]  # q2's answer session is not in its haystack
    c = b.corpora[0]
    assert [i.id for i in c.items] == ["noise_1", "ans_1"]
    assert c.items[1].text == "user: I graduated in Business.\nassistant: Congratulations!"
    assert c.queries[0].relevant == {"ans_1": 1}


def test_longmemeval_official_name_checks_sha256(tmp_path):
    p = _write(tmp_path / "longmemeval_s_cleaned.json", [_lme_question("q1")], False)
    b = longmemeval.load(p)
    assert any(n.startswith("WARNING: longmemeval_s_cleaned.json has sha256") for n in b.notes)
    assert longmemeval.check_official(Path("longmemeval_s_cleaned.json"), longmemeval.OFFICIAL_SHA256[
        "longmemeval_s_cleaned.json"]).endswith("(d6f21ea9d60a0d56f34a05b609c79c88a451d2ae03597821ea3d5a9678c3a442)")
    assert longmemeval.check_official(Path("other.json"), "x") is None


def test_not_the_layout_is_a_clear_error(tmp_path):
    p = _write(tmp_path / "x.json", {"hello": 1}, False)
    with pytest.raises(ValueError, match="LongMemEval layout"):
        longmemeval.load(p)
    with pytest.raises(ValueError, match="LoCoMo layout"):
        locomo.load(p)


def test_beir_graded(tmp_path):
    d = tmp_path / "tiny"
    (d / "qrels").mkdir(parents=True)
    (d / "corpus.jsonl.gz").write_bytes(gzip.compress(
        b'{"_id": "D1", "title": "Statins", "text": "statins and cancer"}\n{"_id": "D2", "text": "vitamin d"}\n'))
    (d / "queries.test.jsonl").write_text('{"_id": "Q1", "text": "statin cancer"}\n{"_id": "Q2", "text": "none"}\n')
    (d / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nQ1\tD1\t2\nQ1\tD2\t1\nQ2\tD9\t1\nQ2\tD2\t0\n")
    b = beir.load(d)
    assert b.dataset == "tiny" and b.protocol == "beir"
    assert [i.text for i in b.corpora[0].items] == ["Statins\nstatins and cancer", "vitamin d"]
    assert [(q.id, q.relevant) for q in b.corpora[0].queries] == [("Q1", {"D1": 2, "D2": 1})]
    assert set(b.files) == {"corpus.jsonl.gz", "queries.test.jsonl", "qrels/test.tsv"}


needs_data = pytest.mark.skipif(not SHARED_DATA.is_dir(), reason=f"shared bench data not found at {SHARED_DATA}")


@needs_data
def test_longmemeval_smoke_file_loads():
    p = SHARED_DATA / "longmemeval-smoke" / "longmemeval_smoke16.json.gz"
    if not p.exists():
        pytest.skip(f"{p} is absent")
    b = longmemeval.load(p, "turn-global")
    c = b.corpora[0]
    assert len(c.items) == 612 and len(c.queries) == 16
    assert all(q.relevant and set(q.relevant) <= {i.id for i in c.items} for q in c.queries)
    s = longmemeval.load(p, "session-local")
    assert len(s.corpora) == 16 and all(len(c.items) == 80 for c in s.corpora)  # 82 sessions, 2 empty


@needs_data
def test_locomo_dev7_loads():
    p = SHARED_DATA / "locomo" / "locomo-dev7.json.gz"
    if not p.exists():
        pytest.skip(f"{p} is absent")
    b = locomo.load(p, "turn-global")
    assert len(b.corpora[0].items) == 4124
    assert len(b.corpora[0].queries) == 1033  # categories 1-4 with evidence found


def test_updates_maps_each_memory_to_its_entry_when_the_index_redacts_a_secret(tmp_path, embedder):
    """The update benchmark finds each memory's entry by the text the index holds: a memory
    whose text holds a secret is indexed redacted (privacy.scrub), and must still map to its
    entry, not to an id no entry has (it would count as never found)."""
    from lethe_bench import updates
    from lethe_sql import MemoryStore

    p = updates.Project("t1", [
        {"id": "m1", "date": "2026-03-02", "time": "09:00", "title": "Signing key",
         "text": "Bundles are signed with the dev key in keys/dev.pem."},
        {"id": "m2", "date": "2026-03-09", "time": "10:00", "title": "HSM key",
         "text": 'Bundles are signed in the HSM now: RAUC_KEY = "pkcs11:token=lumen-release;object=prod".'},
    ], [])
    updates.write_project(p, tmp_path / "t1")
    with MemoryStore(tmp_path / "t1", embedder=embedder) as st:
        st.index()
        ids = updates._ids(st, p)
        held = dict(st.con.execute("SELECT id, text FROM entries").fetchall())
    assert set(ids.values()) == set(held)
    assert "[REDACTED" in held[ids["m2"]] and "lumen-release" not in held[ids["m2"]]


def test_a_benchmark_item_whose_text_the_index_redacts_maps_to_its_entry(tmp_path, embedder):
    """``build_store`` finds each item's entry by the id ingestion gives it: an item holding a
    secret is indexed redacted and must still map to its entry (before, the run stopped with
    "neither in the index nor merged")."""
    from lethe_bench.data import Corpus, Item
    from lethe_bench.runner import build_store
    from lethe_sql import MemoryStore

    items = [Item("a", "The deploy key lives in Vault under secret/deploy."),
             Item("b", "Connect with password=Sw0rdfish-42 to the staging broker.")]
    with MemoryStore(tmp_path / "s", embedder=embedder) as st:
        built = build_store(st, Corpus("t", items, []), "bench/t")
        held = dict(st.con.execute("SELECT id, text FROM entries").fetchall())
    assert set(built.item_entry.values()) == set(held) and len(held) == 2
    assert "Sw0rdfish" not in held[built.item_entry["b"]]
