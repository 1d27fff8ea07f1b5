"""`lethe enrich` with the real anthropic SDK over a fake HTTP transport: no key, no network."""

import json
import subprocess

import anthropic
import httpx2
import pytest

from conftest import BIN, write
from lethe_sql.agents.enrich import enrich
from lethe_sql.errors import LetheError

LETHE = str(BIN / "lethe")


def fake_client(handler):
    return anthropic.Anthropic(api_key="test-key", max_retries=0,
                               http_client=httpx2.Client(transport=httpx2.MockTransport(handler)))


def tool_reply(data: dict, tin=120, tout=60):
    return {"id": "msg_01", "type": "message", "role": "assistant", "model": "claude-haiku-4-5",
            "content": [{"type": "tool_use", "id": "toolu_01", "name": "record_enrichment", "input": data}],
            "stop_reason": "tool_use", "stop_sequence": None, "usage": {"input_tokens": tin, "output_tokens": tout}}


class Fake:
    def __init__(self):
        self.requests = []

    def __call__(self, request):
        body = json.loads(request.content)
        self.requests.append(body)
        assert request.url.path == "/v1/messages"
        assert body["tool_choice"] == {"type": "tool", "name": "record_enrichment"}
        assert body["tools"][0]["input_schema"]["additionalProperties"] is False
        text = body["messages"][0]["content"]
        if "broken" in text:
            return httpx2.Response(200, json=tool_reply({"gist": "x", "questions": ["only one"]}))
        if "postgres" in text:
            data = {"gist": "The developer's local database server listens on a non-default socket.",
                    "questions": ["Which socket does the zeppelin database use?", "Where is local PG?",
                                  "What number should DATABASE_URL carry?"],
                    "entities": ["postgres", "5433"], "temporal": ["since Tuesday"]}
        else:
            data = {"gist": "A note.", "questions": ["a?", "b?", "c?"], "entities": [], "temporal": []}
        return httpx2.Response(200, json=tool_reply(data))


def test_enrich_caches_indexes_beside_the_text_and_never_pays_twice(project):
    write(project.memory_dir / "2026-11-06.md",
          "## 09:00\nLocal postgres runs on port 5433 now.\n## 09:10\nThe linter is ruff.\n## 09:20\nbroken entry\n")
    project.index()
    fake = Fake()
    rep = enrich(project, client=fake_client(fake), concurrency=2)
    assert (rep.pending, rep.enriched, rep.failed, rep.cached) == (3, 2, 1, 0)
    assert rep.input_tokens == 360 and rep.output_tokens == 180 and rep.cost_usd > 0
    assert any("did not fit the schema" in w for w in rep.warnings)
    assert len(fake.requests) == 3 and fake.requests[0]["model"] == "claude-haiku-4-5"
    row = project.con.execute(
        "SELECT x.questions, x.entities, x.temporal FROM enrichment x JOIN entries e USING (id) "
        "WHERE e.text LIKE '%postgres%'").fetchone()
    assert len(row[0]) == 3 and row[1] == ["postgres", "5433"] and row[2] == ["since Tuesday"]

    # 'zeppelin' is only in the enrichment: BM25 over the context field finds the entry
    hits = project.search("zeppelin", top_k=1, judge="none")
    assert hits and "5433" in hits[0].text and "zeppelin" not in hits[0].content
    dense = project.search("which socket does the zeppelin database use", top_k=3, mode="dense")
    assert "5433" in dense[0].text

    again = Fake()
    rep2 = enrich(project, client=fake_client(again))
    assert (rep2.pending, rep2.enriched, rep2.cached) == (1, 0, 2)  # only the failed one is retried
    assert len(again.requests) == 1


def test_enrich_estimate_and_refusals(project):
    write(project.memory_dir / "2026-11-07.md", "".join(f"## n{i}\nnote {i} about topic {i * 7919}\n" for i in range(30)))
    project.index()
    fake = Fake()
    asked = []
    rep = enrich(project, client=fake_client(fake), confirm=lambda r: asked.append(r.estimated_usd) or False,
                 confirm_over=0.001)
    assert asked and asked[0] == rep.estimated_usd > 0 and rep.enriched == 0 and not fake.requests
    assert project.con.execute("SELECT count(*) FROM enrichment").fetchone()[0] == 0

    def denied(request):
        return httpx2.Response(401, json={"type": "error", "error": {"type": "authentication_error", "message": "bad key"}})

    with pytest.raises(LetheError, match="refused"):
        enrich(project, client=fake_client(denied), limit=2)
    assert project.con.execute("SELECT count(*) FROM enrichment").fetchone()[0] == 0


def test_cli_without_a_key_changes_nothing(tmp_path, cli_env):
    root = tmp_path / "p"
    subprocess.run([LETHE, "--root", str(root), "add", "a memory"], env=cli_env, check=True, capture_output=True)
    env = {k: v for k, v in cli_env.items() if k != "ANTHROPIC_API_KEY"}
    p = subprocess.run([LETHE, "--root", str(root), "enrich", "--yes"], env=env, capture_output=True, text=True)
    assert p.returncode == 1 and p.stderr.strip() == (
        "lethe: error: ANTHROPIC_API_KEY is not set: enrichment needs it (nothing was sent or changed)")
    p = subprocess.run([LETHE, "--root", str(root), "enrich", "--dry-run", "--json"], env=env, capture_output=True, text=True)
    assert json.loads(p.stdout)["pending"] == 1
