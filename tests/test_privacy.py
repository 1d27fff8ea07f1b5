"""Privacy on every write path: <private> spans and secrets never reach the index."""

import json
import subprocess

import pytest

from conftest import BIN, write
from lethe_sql.markdown import Document, parse
from lethe_sql.privacy import KINDS, scrub

LETHE = str(BIN / "lethe")

# Realistic shapes (fake values, the right lengths and alphabets).
SECRETS = {
    "anthropic-key": "sk-ant-api03-Zq8mT4vKp2LxW9nB7cYdF3gH6jR1sU5eA0oI-_QwErTyUiOpAsDfGhJkLzXcVbNm1234567890AbCdEfGh",
    "openai-key": "sk-proj-4fKq9LmN2pR7sT1vW3xY5zA8bC0dE6gH",
    "aws-access-key": "AKIAZ7QXN4M2K8P5R3TW",
    "github-token": "ghp_R2d2C3p0L8k9J7h6G5f4D3s2A1q0W9e8R7t6",
    "slack-token": "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
    "jwt": "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJ1c2VyLTQyIiwicm9sZSI6ImFkbWluIn0.Q9xZ7mK2pL4vN8rT1sW6yB3cD5fG0hJ",
}
URL_PASSWORD = "Hunter2Tr0ub4dor"
ASSIGNED = "pa55-w0rd-correct-horse"
PEM_BODY = "MIIEowIBAAKCAQEAq7BFUd5tJ9Xc1LmN2pQ3rS4tU5vW6xY7zA8bC9dE0fG1hI2j"
GH_PAT = "github_pat_11ABCDEFG0aBcDeFgHiJkL_mNoPqRsTuVwXyZ0123456789aBcDeFgHiJkLmNoPqRsTuVwXyZ01234"
PRIVATE = "my-home-address-is-42-elm-street"


def leaky_text() -> str:
    return (
        f"Deploy notes: the Anthropic key {SECRETS['anthropic-key']} and OpenAI {SECRETS['openai-key']}.\n"
        f"AWS id {SECRETS['aws-access-key']}, GitHub {SECRETS['github-token']} and {GH_PAT}.\n"
        f"Slack bot {SECRETS['slack-token']}; session JWT {SECRETS['jwt']}.\n"
        f"Database at postgres://deploy:{URL_PASSWORD}@db.internal:5432/app, and password={ASSIGNED}\n"
        "-----BEGIN OPENSSH PRIVATE KEY-----\n"
        f"{PEM_BODY}\n"
        "-----END OPENSSH PRIVATE KEY-----\n"
        f"Staging listens on port 5433. <private>{PRIVATE}</private> Keep max_tokens=512.\n"
    )


ALL_SECRET_BYTES = [*SECRETS.values(), URL_PASSWORD, ASSIGNED, PEM_BODY, GH_PAT, PRIVATE]


def test_scrub_redacts_every_shape_and_is_idempotent():
    out = scrub(leaky_text())
    for s in ALL_SECRET_BYTES:
        assert s not in out.text
    assert out.count == 11  # 9 secrets, 1 PEM block, 1 private span
    for kind in [*SECRETS, "url-password", "password", "private-key"]:
        assert f"[REDACTED:{kind}]" in out.text
    # the ordinary words stay
    assert "port 5433" in out.text and "max_tokens=512" in out.text and "postgres://deploy:" in out.text
    again = scrub(out.text)
    assert again.text == out.text and again.count == 0


# More shapes (fake values, the right lengths and alphabets): (kind, text, the secret in it).
SHA = "3f2a9c1b7e4d8a6f0b5c2e9d1a7f3b8c6e4d2a0f"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzq8Xk2Lm4T"
AZURE_KEY = "Zk3mQ9vR2tX7pL4nW8bY1cF6hJ0sD5gA" + "+/Eq2rT9uI3oP7aS4dF8gH1jK6lZ0xC5vB" + "3nM9qW2eR7tY4uI8oPzXcVbN=="
NEW_SHAPES = [
    ("env-secret", "export DATABASE_PASSWORD=Xk9fQ2mLp7vR3tZ8w", "Xk9fQ2mLp7vR3tZ8w"),
    ("env-secret", "services:\n  db:\n    environment:\n      MYSQL_ROOT_PASSWORD: 7hQ2xLm9Pz4Kv8Rt\n", "7hQ2xLm9Pz4Kv8Rt"),
    ("env-secret", 'STRIPE_API_KEY="c2VjcmV0LWtleS0xMjM0NTY3"', "c2VjcmV0LWtleS0xMjM0NTY3"),
    ("url-password", "REDIS_URL=redis://:Sup3rS3cretPw@cache.internal:6379/0", "Sup3rS3cretPw"),
    ("npm-token", "//registry.npmjs.org/:_authToken=npm_Ab3dEf6hIj9lMn2pQr5tUv8xYz1bCd4fGh7j",
     "npm_Ab3dEf6hIj9lMn2pQr5tUv8xYz1bCd4fGh7j"),
    ("huggingface-token", "huggingface-cli login --token hf_QbHkLmNpRsTvWxYzAcEgIkMoQsUwYaCeGiKm",
     "hf_QbHkLmNpRsTvWxYzAcEgIkMoQsUwYaCeGiKm"),
    ("gitlab-token", "git clone https://oauth2:glpat-x7Yz9AbCdEf2GhIjKl3M@gitlab.com/acme/app.git",
     "glpat-x7Yz9AbCdEf2GhIjKl3M"),
    ("sendgrid-key", "SENDGRID key 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",
     "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"),
    ("azure-key", f"DefaultEndpointsProtocol=https;AccountName=ledgerprod;AccountKey={AZURE_KEY};"
     "EndpointSuffix=core.windows.net", AZURE_KEY),
    ("basic-auth", "curl -H 'Authorization: Basic ZGVwbG95OnMzY3IzdC1wYXNzd29yZA==' https://ci.internal/api",
     "ZGVwbG95OnMzY3IzdC1wYXNzd29yZA=="),
    ("basic-auth", "the header was Basic ZGVwbG95OnMzY3IzdC1wYXNzd29yZA== last time", "ZGVwbG95OnMzY3IzdC1wYXNzd29yZA=="),
    ("slack-webhook", "alerts go to https://hooks.slack.com/services/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",
     "T04ABCD12/B05EFGH34/Zk3mQ9vR2tX7pL4nW8bY1cF6"),
    ("aws-secret-key", f"aws configure: AKIAZ7QXN4M2K8P5R3TW then {AWS_SECRET}", AWS_SECRET),
    ("aws-secret-key", f"the secret access key is {AWS_SECRET} (rotate monthly)", AWS_SECRET),
    ("hex-token", f"The deploy token: {SHA} expires Friday.", SHA),
    ("hex-token", f"X-Api-Key: {SHA.upper()}", SHA.upper()),
]


@pytest.mark.parametrize("kind, text, secret", NEW_SHAPES, ids=[f"{k}-{i}" for i, (k, _, _) in enumerate(NEW_SHAPES)])
def test_more_secret_shapes_are_redacted(kind, text, secret):
    out = scrub(text)
    assert secret not in out.text and f"[REDACTED:{kind}]" in out.text, out.text
    assert kind in out.kinds and kind in KINDS
    again = scrub(out.text)
    assert again.text == out.text and again.count == 0  # idempotent


def test_every_kind_is_named_in_the_module_docstring():
    """The docstring lists what is redacted; each placeholder kind stands for one item of it."""
    import lethe_sql.privacy as privacy

    doc = " ".join(privacy.__doc__.split()).lower()
    words = {"env-secret": "*_password", "hex-token": "40 hex digits", "aws-secret-key": "aws secret access keys",
             "aws-access-key": "aws access key ids", "basic-auth": "authorization: basic", "private-key": "pem private key",
             "url-password": "passwords in urls", "password": "password=...", "huggingface-token": "hugging face",
             "azure-key": "azure storage account keys", "slack-webhook": "slack webhook"}
    for kind in KINDS:
        name = words.get(kind, kind.split("-")[0])
        assert name in doc, (kind, name)


@pytest.mark.parametrize("text", [
    "The password policy says twelve characters.",
    "Set max_tokens=4096 and the token limit: 5 per request.",
    "Clone https://github.com/acme/tool.git and open http://localhost:8080/a@b",
    "sk-learn is a library; the ask-ant role; AKIA is a prefix",
    f"Fixed in commit {SHA}; git show {SHA[:8]} has the diff.",
    f"The token refresh bug was fixed in commit {SHA}.",
    f"sha {SHA} is the release tag; HEAD is at {SHA}",
    "request id 123e4567-e89b-12d3-a456-426614174000 in the logs",
    "image digest sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "max_token=4096, pad_token: <pad>, DB_PASSWORD_FILE=/run/secrets/db",
    "We use basic authentication behind the VPN; npm_config_cache and hf_hub_download are settings.",
    f"the cache key is {AWS_SECRET[:20]}{AWS_SECRET[:20].lower()} for the build",
])
def test_ordinary_text_is_left_alone(text):
    assert scrub(text).text == text and scrub(text).count == 0


def test_private_span_across_sections_and_unclosed_span():
    md = "# t\n## one\nkeep this <private>hide\n## two\nall of this</private> and this\n## three\nvisible <PRIVATE>rest"
    chunks = parse(md, "2026-11-01.md")
    texts = [c.text for c in chunks]
    assert texts == ["keep this  and this", "visible"]
    assert sum(c.redacted for c in chunks) == 2
    assert all("hide" not in c.content and "rest" not in c.content for c in chunks)


def test_document_path_scrubs_too():
    c = Document(f"token {SECRETS['github-token']} here", heading=f"key {SECRETS['aws-access-key']}").to_chunk(0, "x")
    assert SECRETS["github-token"] not in c.content + c.text and SECRETS["aws-access-key"] not in c.heading
    assert c.redacted == 2


def _db_bytes(store) -> bytes:
    store.con.execute("CHECKPOINT")
    store.close()
    return store.db_path.read_bytes()


def test_index_keeps_secrets_out_of_the_database_but_leaves_the_users_file(project):
    path = write(project.memory_dir / "2026-11-02.md", "# day\n## 10:00 deploy\n" + leaky_text())
    before = path.read_bytes()
    report = project.index()
    assert report.redacted == 11 and report.entries_added == 1
    assert path.read_bytes() == before  # the user's own file is never rewritten
    hits = project.search("staging port deploy notes", top_k=3)
    dumped = json.dumps([h.as_dict() for h in hits])
    assert "5433" in dumped
    for s in ALL_SECRET_BYTES:
        assert s not in dumped
    data = _db_bytes(project)
    for s in ALL_SECRET_BYTES:
        assert s.encode() not in data, s
    assert b"REDACTED:anthropic-key" in data


def test_cli_add_writes_and_indexes_no_secret(tmp_path, cli_env):
    root = tmp_path / "p"
    p = subprocess.run([LETHE, "--root", str(root), "add", "--json", "-"], input=leaky_text(), env=cli_env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["redacted"] == 11
    files = list((root / ".lethe" / "memory").glob("*.md"))
    written = files[0].read_text()
    assert "port 5433" in written
    for s in ALL_SECRET_BYTES:
        assert s not in written
    out = subprocess.run([LETHE, "--root", str(root), "search", "deploy notes staging", "--json"], env=cli_env,
                         capture_output=True, text=True, timeout=300).stdout
    assert "5433" in out and not any(s in out for s in ALL_SECRET_BYTES)
    p = subprocess.run([LETHE, "--root", str(root), "add", f"<private>{PRIVATE}</private>"], env=cli_env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 2 and p.stderr.strip().count("\n") == 0 and "private" in p.stderr
    idx = root / ".lethe" / "index"
    data = b"".join(f.read_bytes() for f in idx.iterdir() if f.name.startswith("lethe.duckdb"))
    for s in ALL_SECRET_BYTES:
        assert s.encode() not in data


def test_an_index_built_before_privacy_reads_every_file_once_more(project):
    write(project.memory_dir / "2026-11-09.md", "## a\nplain memory\n")
    assert project.index().files_indexed == 1
    assert project.index().files_unchanged == 1
    project.con.execute("DELETE FROM meta WHERE key = 'privacy'")  # as an older lethe left it
    again = project.index()
    assert again.files_indexed == 1 and again.entries_added == 0 and again.entries_removed == 0
    assert project.index().files_unchanged == 1


def test_a_query_holding_a_secret_leaves_no_trace_in_the_database(project):
    """Every search logs its query (learn.apply): the log keeps the scrubbed form only."""
    write(project.memory_dir / "2026-11-03.md", "## deploy\nThe deploy uses the release token from the vault.\n")
    project.index()
    token = "ghp_Q7w2E9r4T1y8U3i6O0p5A2s7D4f9G1h6J3k8"
    query = f"why does the deploy reject token {token} and DATABASE_PASSWORD={ASSIGNED}"
    assert project.search(query, top_k=3)
    assert project.flush_learning() == 1  # a writer applies what it learned in runs
    logged = [r[0] for r in project.con.execute("SELECT query FROM query_log").fetchall()]
    assert logged == ["why does the deploy reject token [REDACTED:github-token] and "
                      "DATABASE_PASSWORD=[REDACTED:env-secret]"]
    project.close()  # what is on disk now: the database file and its write-ahead log
    idx = project.db_path.parent
    data = b"".join(f.read_bytes() for f in idx.iterdir() if f.name.startswith("lethe.duckdb"))
    assert b"why does the deploy reject token" in data  # the log is on disk (so the check below means something)
    assert token.encode() not in data and ASSIGNED.encode() not in data
