"""One sample for every secret shape the redactor declares (``privacy._SECRETS``: each
pattern, not only each kind), each redacted. A pattern added without a sample here fails
``test_every_declared_pattern_has_a_sample``; a pattern that stops matching its sample fails
``test_each_sample_is_redacted_by_its_own_pattern``. Fake values of the right shapes."""

from __future__ import annotations

import pytest

from lethe_sql import privacy
from lethe_sql.privacy import KINDS, scrub

AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzq8Xk2Lm4T"
AZURE_KEY = "Zk3mQ9vR2tX7pL4nW8bY1cF6hJ0sD5gA+/Eq2rT9uI3oP7aS4dF8gH1jK6lZ0xC5vB3nM9qW2eR7tY4uI8oPzXcVbN=="
GOOGLE_KEY = "AIzaSyD3x9Kq2LmN7pR4sT8vW1yZ5bC0dE6fG2h"
PEM = ("-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAq7BFUd5tJ9Xc1LmN2pQ3rS4tU5vW6xY7zA8bC9dE0fG1hI2j\n"
       "-----END RSA PRIVATE KEY-----")

# (kind, text, the secret in it): at least one per pattern of privacy._SECRETS
SAMPLES = [
    ("private-key", f"key file:\n{PEM}\nend", "MIIEowIBAAKCAQEAq7BFUd5tJ9Xc1LmN2pQ3rS4tU5vW6xY7zA8bC9dE0fG1hI2j"),
    ("anthropic-key", "ANTHROPIC key sk-ant-api03-Zq8mT4vKp2LxW9nB7cYdF3gH6jR1sU5eA0oI-_QwErTy in .env",
     "sk-ant-api03-Zq8mT4vKp2LxW9nB7cYdF3gH6jR1sU5eA0oI-_QwErTy"),
    ("openai-key", "the OpenAI key is sk-proj-4fKq9LmN2pR7sT1vW3xY5zA8bC0dE6gH", "sk-proj-4fKq9LmN2pR7sT1vW3xY5zA8bC0dE6gH"),
    ("stripe-key", "Stripe live key sk_live_4eC39HqLyjWDarjtT1zdp7dc for payments", "sk_live_4eC39HqLyjWDarjtT1zdp7dc"),
    ("aws-secret-key", f"aws configure: AKIAZ7QXN4M2K8P5R3TW then {AWS_SECRET}", AWS_SECRET),
    ("aws-access-key", "the access key id AKIAZ7QXN4M2K8P5R3TW is for CI", "AKIAZ7QXN4M2K8P5R3TW"),
    ("github-token", "fine-grained github_pat_11ABCDEFG0aBcDeFgHiJkL_mNoPqRsTuVwXyZ0123456789",
     "github_pat_11ABCDEFG0aBcDeFgHiJkL_mNoPqRsTuVwXyZ0123456789"),
    ("github-token", "classic ghp_R2d2C3p0L8k9J7h6G5f4D3s2A1q0W9e8R7t6 for the bot", "ghp_R2d2C3p0L8k9J7h6G5f4D3s2A1q0W9e8R7t6"),
    ("gitlab-token", "git clone https://oauth2:glpat-x7Yz9AbCdEf2GhIjKl3M@gitlab.com/acme/app.git",
     "glpat-x7Yz9AbCdEf2GhIjKl3M"),
    ("npm-token", "//registry.npmjs.org/:_authToken=npm_Ab3dEf6hIj9lMn2pQr5tUv8xYz1bCd4fGh7j",
     "npm_Ab3dEf6hIj9lMn2pQr5tUv8xYz1bCd4fGh7j"),
    ("huggingface-token", "huggingface-cli login --token hf_QbHkLmNpRsTvWxYzAcEgIkMoQsUwYaCeGiKm",
     "hf_QbHkLmNpRsTvWxYzAcEgIkMoQsUwYaCeGiKm"),
    ("slack-token", "bot token xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
     "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"),
    ("slack-webhook", "alerts go to https://hooks.slack.com/services/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",
     "T04ABCD12/B05EFGH34/Zk3mQ9vR2tX7pL4nW8bY1cF6"),
    ("sendgrid-key", "SENDGRID key 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",
     "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"),
    ("google-api-key", f"Maps uses {GOOGLE_KEY} in the browser", GOOGLE_KEY),
    ("google-api-key", f'firebase config: {{apiKey: "{GOOGLE_KEY}"}}', GOOGLE_KEY),
    ("azure-key", f"DefaultEndpointsProtocol=https;AccountName=ledgerprod;AccountKey={AZURE_KEY};"
     "EndpointSuffix=core.windows.net", AZURE_KEY),
    ("jwt", "session eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ1c2VyLTQyIn0.Q9xZ7mK2pL4vN8rT1sW6yB3cD5fG0hJ",
     "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ1c2VyLTQyIn0.Q9xZ7mK2pL4vN8rT1sW6yB3cD5fG0hJ"),
    ("bearer-token", "curl -H 'Authorization: Bearer ya29.a0AfH6SMBx7Lq2Zp9Rk3Tn8Wv5Yc1Ud4Fe6Gh0Ij' https://api",
     "ya29.a0AfH6SMBx7Lq2Zp9Rk3Tn8Wv5Yc1Ud4Fe6Gh0Ij"),
    ("basic-auth", "curl -H 'Authorization: Basic ZGVwbG95OnMzY3IzdC1wYXNzd29yZA==' https://ci.internal/api",
     "ZGVwbG95OnMzY3IzdC1wYXNzd29yZA=="),
    ("basic-auth", "the header was Basic ZGVwbG95OnMzY3IzdC1wYXNzd29yZA== last time", "ZGVwbG95OnMzY3IzdC1wYXNzd29yZA=="),
    ("url-password", "Database at postgres://deploy:Hunter2Tr0ub4dor@db.internal:5432/app", "Hunter2Tr0ub4dor"),
    ("env-secret", "export DATABASE_PASSWORD=Xk9fQ2mLp7vR3tZ8w", "Xk9fQ2mLp7vR3tZ8w"),
    ("password", "connect with password=pa55-w0rd-correct-horse today", "pa55-w0rd-correct-horse"),
    ("hex-token", "The deploy token: 3f2a9c1b7e4d8a6f0b5c2e9d1a7f3b8c6e4d2a0f expires Friday.",
     "3f2a9c1b7e4d8a6f0b5c2e9d1a7f3b8c6e4d2a0f"),
]


def _matches(entry, text: str) -> bool:
    """Whether one declared pattern (kind, pattern, group, check) finds a secret in ``text``."""
    _, pat, _, check = entry
    return any(check is None or check(text, m) for m in pat.finditer(text))


def uncovered(patterns, samples) -> list[str]:
    """The declared patterns that no sample of their kind exercises, as 'kind #i: regex'."""
    return [f"{e[0]} #{i}: {e[1].pattern[:60]}" for i, e in enumerate(patterns)
            if not any(kind == e[0] and _matches(e, text) for kind, text, _ in samples)]


def test_every_declared_pattern_has_a_sample():
    assert uncovered(privacy._SECRETS, SAMPLES) == []
    assert {k for k, _, _ in SAMPLES} == set(KINDS)


def test_the_coverage_check_notices_a_new_pattern():
    import re

    new = ("example-key", re.compile(r"\bexk_[a-z0-9]{20}"), 0, None)
    assert uncovered([*privacy._SECRETS, new], SAMPLES) == ["example-key #%d: \\bexk_[a-z0-9]{20}" % len(privacy._SECRETS)]


@pytest.mark.parametrize("kind, text, secret", SAMPLES, ids=[f"{k}-{i}" for i, (k, _, _) in enumerate(SAMPLES)])
def test_each_sample_is_redacted_by_its_own_pattern(kind, text, secret):
    assert secret in text
    assert any(e[0] == kind and _matches(e, text) for e in privacy._SECRETS), "no pattern of its kind matches"
    out = scrub(text)
    assert secret not in out.text, out.text
    assert f"[REDACTED:{kind}]" in out.text and kind in out.kinds, out.text
    again = scrub(out.text)
    assert again.text == out.text and again.count == 0


def test_a_google_api_key_is_redacted_wherever_it_is_indexed(project):
    """The AIza shape end to end: memory file -> index -> neither the entries nor the FTS
    dictionary hold it."""
    from conftest import write

    write(project.memory_dir / "2026-01-02.md", f"## maps\n\nThe maps widget loads with key {GOOGLE_KEY} today.\n")
    project.index()
    con = project.con
    text, content = con.execute("SELECT text, content FROM entries").fetchone()
    assert GOOGLE_KEY not in text and GOOGLE_KEY not in content and "[REDACTED:google-api-key]" in text
    assert con.execute("SELECT count(*) FROM fts_main_entries.dict WHERE term = lower(?)", [GOOGLE_KEY]).fetchone()[0] == 0
