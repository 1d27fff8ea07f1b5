"""What never enters the index: ``<private>`` spans and secrets.

Every indexed text is produced by ``markdown.parse`` (memory files, ``lethe add``,
mined transcripts, hook summaries) or ``markdown.Document.to_chunk`` (documents
put into the store directly), and both pass their text through :func:`scrub`
first, so the ``entries`` table, the FTS tables, the token index and the
``absorbed`` table never hold a private span or a recognised secret.

* ``<private> ... </private>`` (any case, may span lines and sections) is removed
  with its contents; an unclosed ``<private>`` hides everything after it.
* Secrets are replaced by ``[REDACTED:<kind>]``: Anthropic / OpenAI / Stripe /
  Google API keys, AWS access key ids, GitHub tokens, Slack tokens, JWTs,
  PEM private key blocks, bearer tokens, passwords in URLs
  (``scheme://user:pass@host``) and ``password=...`` style assignments.

Markdown files a user writes are the user's own: ``lethe index`` never rewrites
them, it only keeps their private spans and secrets out of the index. Text lethe
writes itself (``lethe add``, ``lethe mine``, the agent hooks) is scrubbed
*before* it is written, so those files hold no secrets either (they are meant
to be committed).

:func:`scrub` is idempotent: scrubbing scrubbed text changes nothing and counts 0.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PLACEHOLDER = "[REDACTED:{kind}]"

_PRIVATE = re.compile(r"<private\b[^>]*>.*?(?:</private\s*>|\Z)", re.I | re.S)
_STRAY_CLOSE = re.compile(r"</private\s*>", re.I)

# (kind, pattern, group holding the secret or 0 for the whole match). Order matters:
# the more specific shapes come first.
_SECRETS: list[tuple[str, re.Pattern[str], int]] = [
    (
        "private-key",
        re.compile(
            r"-----BEGIN ([A-Z0-9 ]*)PRIVATE KEY( BLOCK)?-----.*?(?:-----END \1PRIVATE KEY( BLOCK)?-----|\Z)", re.S
        ),
        0,
    ),
    ("anthropic-key", re.compile(r"\bsk-ant-[A-Za-z0-9_\-]{20,}"), 0),
    ("openai-key", re.compile(r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,}"), 0),
    ("stripe-key", re.compile(r"\b(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}"), 0),
    ("aws-access-key", re.compile(r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA)[0-9A-Z]{16}\b"), 0),
    ("github-token", re.compile(r"\bgithub_pat_[A-Za-z0-9_]{22,}"), 0),
    ("github-token", re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}\b"), 0),
    ("slack-token", re.compile(r"\bxox[abposre]-[A-Za-z0-9\-]{10,}"), 0),
    ("google-api-key", re.compile(r"\bAIza[0-9A-Za-z_\-]{35}\b"), 0),
    ("jwt", re.compile(r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"), 0),
    ("bearer-token", re.compile(r"(?i)\bbearer\s+([A-Za-z0-9._~+/\-]{20,}=*)"), 1),
    # scheme://user:password@host
    ("url-password", re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.\-]*://[^\s:/@\[\]]+:([^\s@/\[\]]+)@"), 1),
    # password=..., "api_key": "...", secret: ... (yaml); the value only
    (
        "password",
        re.compile(
            r"""(?ix)
            \b(?:password|passwd|pwd|passphrase|secret|client_secret|secret_key|api_?key|access_token|
               auth_token|refresh_token|private_key|aws_secret_access_key|token)\b
            ["']?
            (?: \s*=\s* | \s*:\s*(?=["']) | (?<=password)\s*:\s* | (?<=passwd)\s*:\s* | (?<=secret_key)\s*:\s*
              | (?<=aws_secret_access_key)\s*:\s* )
            (?:["']([^"'\s]{4,})["'] | ([^\s"',;)\]}]{4,}))
            """
        ),
        -1,
    ),
]


# Every secret pattern above needs one of these substrings: one scan of the text decides
# whether the patterns run at all (most memories hold none of them).
_TRIGGER = re.compile(
    r"sk-|[spr]k_|A(?:KIA|SIA|GPA|IDA|ROA)|gh[pousr]_|github_pat_|xox|AIza|eyJ|://|-----BEGIN"
    r"|(?i:bearer|passw|pwd|passphrase|secret|api_?key|token|private_key)"
)


@dataclass(frozen=True)
class Scrubbed:
    text: str
    count: int          # secrets redacted + private spans removed
    kinds: tuple[str, ...] = ()


def strip_private(text: str, mark: str = "") -> tuple[str, int]:
    """Remove ``<private>...</private>`` spans (``mark`` is left where each one stood)."""
    n = 0

    def repl(_m: re.Match) -> str:
        nonlocal n
        n += 1
        return mark

    out = _PRIVATE.sub(repl, text)
    out = _STRAY_CLOSE.sub("", out)
    return out, n


def redact_secrets(text: str) -> tuple[str, list[str]]:
    """Replace recognised secrets by ``[REDACTED:<kind>]``; returns (text, kinds found)."""
    found: list[str] = []
    if not _TRIGGER.search(text):
        return text, found
    for kind, pat, group in _SECRETS:
        if group == 0:
            def repl(m: re.Match, kind=kind) -> str:
                found.append(kind)
                return PLACEHOLDER.format(kind=kind)
        else:
            def repl(m: re.Match, kind=kind, group=group) -> str:
                g = group
                if g == -1:
                    g = 1 if m.group(1) is not None else 2
                value = m.group(g)
                if value.startswith("[REDACTED") or value.startswith("REDACTED"):
                    return m.group(0)
                found.append(kind)
                s, e = m.start(g) - m.start(0), m.end(g) - m.start(0)
                whole = m.group(0)
                return whole[:s] + PLACEHOLDER.format(kind=kind) + whole[e:]
        text = pat.sub(repl, text)
    return text, found


def scrub(text: str) -> Scrubbed:
    """Private spans removed, secrets redacted: the only form of a text the index may hold."""
    if not text:
        return Scrubbed(text or "", 0)
    out, n_private = strip_private(text)
    out, kinds = redact_secrets(out)
    return Scrubbed(out, n_private + len(kinds), tuple(kinds))
