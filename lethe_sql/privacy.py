"""What never enters the index: ``<private>`` spans and secrets.

Every indexed text is produced by ``markdown.parse`` (memory files, ``lethe add``,
mined transcripts, hook summaries) or ``markdown.Document.to_chunk`` (documents
put into the store directly), and both pass their text through :func:`scrub`
first, so the ``entries`` table, the FTS tables, the token index and the
``absorbed`` table never hold a private span or a recognised secret. Search
queries are scrubbed before ``query_log`` stores them, and an exchange before the
stop hook sends it to a summarising model.

* ``<private> ... </private>`` (any case, may span lines and sections) is removed
  with its contents; an unclosed ``<private>`` hides everything after it.
* Secrets are replaced by ``[REDACTED:<kind>]`` (the kinds of ``KINDS``):
  Anthropic / OpenAI / Stripe / Google / SendGrid API keys, AWS access key ids and,
  next to one or to words naming one, AWS secret access keys; GitHub, GitLab, npm,
  Hugging Face and Slack tokens, Slack webhook URLs, Azure storage account keys
  (``AccountKey=`` / ``SharedAccessKey=``), JWTs, PEM private key blocks, bearer
  tokens, ``Authorization: Basic`` credentials, passwords in URLs
  (``scheme://user:pass@host``, ``redis://:pass@host``), ``password=...`` style
  assignments, environment-style ones (``DATABASE_PASSWORD=...``,
  ``MYSQL_ROOT_PASSWORD: ...``: a ``*_PASSWORD``, ``*_PASSWD``, ``*_SECRET``,
  ``*_TOKEN`` or ``*_API_KEY`` name), and 40 hex digits when the nearest telling
  word before them is token / key / secret (a commit SHA after "commit" or "sha"
  stays).

Markdown files a user writes are the user's own: ``lethe index`` never rewrites
them, it only keeps their private spans and secrets out of the index. Text lethe
writes itself (``lethe add``, ``lethe mine``, the agent hooks) is scrubbed
*before* it is written, so those files hold no secrets either (they are meant
to be committed).

:func:`scrub` is idempotent: scrubbing scrubbed text changes nothing and counts 0.
It runs in time linear in the length of the text: every pattern below enters a run
of a character class only at the run's start (a lookbehind on the same class) or
reads a bounded number of characters, and never backtracks into a run it has read
(possessive quantifiers); ``tests/test_linear_time.py`` checks it on adversarial input.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

PLACEHOLDER = "[REDACTED:{kind}]"

_PRIVATE = re.compile(r"<private\b[^<>]*+>.*?(?:</private\s*+>|\Z)", re.I | re.S)
_STRAY_CLOSE = re.compile(r"</private\s*+>", re.I)

#: how far (characters, on the same line) the words that say what a candidate is are looked for
CONTEXT_CHARS = 64

_AWS_CONTEXT = re.compile(
    r"(?i:aws.{0,24}?secret|secret.{0,3}?access.{0,3}?key|secret_?key)"
    r"|\b(?:AKIA|ASIA|AGPA|AIDA|AROA)[0-9A-Z]{16}\b|\[REDACTED:aws-access-key\]"
)
_HEX_CONTEXT = re.compile(
    r"(?i)(?P<secret>token|key|secret|passw|credential|bearer|auth)"
    r"|(?P<git>commit|sha|revision|\brev\b|hash|checksum|digest|merge|cherry|\bref\b|tree|blob|\bgit\b|\btag\b"
    r"|parent|revert|head)"
)


def _window(text: str, start: int, end: int, chars: int = CONTEXT_CHARS) -> tuple[str, str]:
    """The text on the same line before ``start`` and after ``end``, at most ``chars`` each."""
    lo = max(text.rfind("\n", max(0, start - chars), start) + 1, start - chars, 0)
    hi = text.find("\n", end, end + chars)
    return text[lo:start], text[end: hi if hi >= 0 else end + chars]


def _aws_secret(text: str, m: re.Match) -> bool:
    """40 base64 characters are an AWS secret access key only in mixed case (a git SHA is
    lowercase hex) and next to an access key id or words that name one."""
    v = m.group(0)
    if v.lower() == v or v.upper() == v:
        return False
    before, after = _window(text, m.start(), m.end(), 2 * CONTEXT_CHARS)
    return bool(_AWS_CONTEXT.search(before) or _AWS_CONTEXT.search(after))


def _hex_token(text: str, m: re.Match) -> bool:
    """40 hex digits are a token when the nearest telling word before them on their line is
    token / key / secret / ..., not commit / sha / hash / ... (a commit stays)."""
    before, _ = _window(text, m.start(), m.end())
    last = None
    for last in _HEX_CONTEXT.finditer(before):
        pass
    return last is not None and last.lastgroup == "secret"


def _basic_credentials(text: str, m: re.Match) -> bool:  # noqa: ARG001
    """``Basic <base64>`` outside an Authorization header: only when it decodes to user:password."""
    import base64
    import binascii

    v = m.group(1)
    try:
        raw = base64.b64decode(v + "=" * (-len(v) % 4), validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        return False
    user, sep, pw = raw.partition(":")
    return bool(sep and user and pw and raw.isprintable())


# DATABASE_PASSWORD, GITHUB_TOKEN, STRIPE_API_KEY; in lower case only the unambiguous
# suffixes (db_password, webhook_secret; not max_token or pad_token). The name parts may
# give back a part to the suffix (STRIPE_API_KEY): one backtrack per part, linear.
_ENV_NAME = (
    r"(?:(?:[A-Z][A-Z0-9]*+_)+(?:PASSWORD|PASSWD|SECRET|TOKEN|API_KEY)"
    r"|(?:[a-z][a-z0-9]*+_)+(?:password|passwd|secret|api_key))"
)
# a quoted value, or an unquoted one up to whitespace or punctuation that ends it
_VALUE = r"""(?:"([^"\s]{4,}+)"|'([^'\s]{4,}+)'|([^\s"',;)\]}]{4,}+))"""

Check = Callable[[str, re.Match], bool]

# (kind, pattern, group holding the secret (0: the whole match, -1: the first group that
# matched), check of the match in its text or None). Order matters: the more specific
# shapes come first, and an AWS secret key before the access key id it sits next to.
_SECRETS: list[tuple[str, re.Pattern[str], int, Check | None]] = [
    (
        "private-key",
        re.compile(
            r"-----BEGIN ([A-Z0-9 ]{0,40})PRIVATE KEY( BLOCK)?-----.*?(?:-----END \1PRIVATE KEY( BLOCK)?-----|\Z)",
            re.S,
        ),
        0, None,
    ),
    ("anthropic-key", re.compile(r"\bsk-ant-[A-Za-z0-9_\-]{20,}+"), 0, None),
    ("openai-key", re.compile(r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,}+"), 0, None),
    ("stripe-key", re.compile(r"\b(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}+"), 0, None),
    ("aws-secret-key", re.compile(r"(?<![A-Za-z0-9/+=])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])"), 0, _aws_secret),
    ("aws-access-key", re.compile(r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA)[0-9A-Z]{16}\b"), 0, None),
    ("github-token", re.compile(r"\bgithub_pat_[A-Za-z0-9_]{22,}+"), 0, None),
    ("github-token", re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}+\b"), 0, None),
    ("gitlab-token", re.compile(r"\bgl(?:pat|ptt|dt|rt)-[A-Za-z0-9_\-]{20,}+"), 0, None),
    ("npm-token", re.compile(r"(?<![A-Za-z0-9_])npm_[A-Za-z0-9]{36}(?![A-Za-z0-9])"), 0, None),
    ("huggingface-token", re.compile(r"(?<![A-Za-z0-9_])hf_[A-Za-z0-9]{34,}+"), 0, None),
    ("slack-token", re.compile(r"\bxox[abposre]-[A-Za-z0-9\-]{10,}+"), 0, None),
    ("slack-webhook", re.compile(r"\bhooks\.slack\.com/(?:services|workflows|triggers)/([A-Za-z0-9_/\-]{8,}+)"), 1, None),
    ("sendgrid-key", re.compile(r"(?<![A-Za-z0-9_.\-])SG\.[A-Za-z0-9_\-]{22}\.[A-Za-z0-9_\-]{43}(?![A-Za-z0-9_\-])"),
     0, None),
    ("google-api-key", re.compile(r"\bAIza[0-9A-Za-z_\-]{35}\b"), 0, None),
    ("azure-key", re.compile(r"(?<![A-Za-z])(?i:Account|SharedAccess)Key[ \t]*+=[ \t]*+([A-Za-z0-9+/]{20,}+={0,2})"),
     1, None),
    (
        "jwt",
        re.compile(r"(?<![A-Za-z0-9_\-])eyJ[A-Za-z0-9_\-]{8,}+\.eyJ[A-Za-z0-9_\-]{8,}+\.[A-Za-z0-9_\-]{8,}+"),
        0, None,
    ),
    ("bearer-token", re.compile(r"(?i)\bbearer\s++([A-Za-z0-9._~+/\-]{20,}+=*+)"), 1, None),
    # Authorization: Basic <base64>; elsewhere "Basic <base64>" only when it decodes to user:password
    (
        "basic-auth",
        re.compile(r"""(?i)\bauthorization["']?[ \t]*+[:=][ \t]*+["']?basic[ \t]++([A-Za-z0-9+/]{4,}+={0,2})"""),
        1, None,
    ),
    ("basic-auth", re.compile(r"\b[Bb]asic[ \t]++([A-Za-z0-9+/]{8,}+={0,2})(?![A-Za-z0-9+/=])"), 1,
     _basic_credentials),
    # scheme://user:password@host and scheme://:password@host
    (
        "url-password",
        re.compile(r"(?<![A-Za-z0-9+.\-])[a-zA-Z][a-zA-Z0-9+.\-]*+://[^\s:/@\[\]]*+:([^\s@/\[\]]++)@"),
        1, None,
    ),
    # DATABASE_PASSWORD=..., MYSQL_ROOT_PASSWORD: ... (env files, yaml, json); the value only
    (
        "env-secret",
        re.compile(rf"""(?<![\w-]){_ENV_NAME}\b["']?[ \t]*+(?:=|:(?=[ \t"']))[ \t]*+{_VALUE}"""),
        -1, None,
    ),
    # password=..., "api_key": "...", secret: ... (yaml); the value only
    (
        "password",
        re.compile(
            r"""(?ix)
            \b(?:password|passwd|pwd|passphrase|secret|client_secret|secret_key|api_?key|access_token|
               auth_token|refresh_token|private_key|aws_secret_access_key|token)\b
            ["']?
            (?: \s*+=\s*+ | \s*+:\s*+(?=["']) | (?<=password)\s*+:\s*+ | (?<=passwd)\s*+:\s*+
              | (?<=secret_key)\s*+:\s*+ | (?<=aws_secret_access_key)\s*+:\s*+ )
            (?:["']([^"'\s]{4,}+)["'] | ([^\s"',;)\]}]{4,}+))
            """
        ),
        -1, None,
    ),
    # 40 hex digits after token / key / secret, not after commit / sha (_hex_token)
    ("hex-token", re.compile(r"(?<![A-Za-z0-9_])[0-9a-fA-F]{40}(?![A-Za-z0-9_])"), 0, _hex_token),
]

#: every kind a placeholder can name
KINDS: tuple[str, ...] = tuple(dict.fromkeys(kind for kind, *_ in _SECRETS))

# Every secret pattern above needs one of these substrings: one scan of the text decides
# whether the patterns run at all (most memories hold none of them).
_TRIGGER = re.compile(
    r"sk-|[spr]k_|A(?:KIA|SIA|GPA|IDA|ROA)|gh[pousr]_|github_pat_|gl(?:pat|ptt|dt|rt)-|npm_|hf_|SG\.|xox|AIza|eyJ"
    r"|://|-----BEGIN|hooks\.slack\.com|[0-9a-fA-F]{40}"
    r"|(?i:bearer|passw|pwd|passphrase|secret|api_?key|token|private_key|accountkey|accesskey|basic)"
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
    for kind, pat, group, check in _SECRETS:
        def repl(m: re.Match, kind=kind, group=group, check=check, text=text) -> str:
            if check is not None and not check(text, m):
                return m.group(0)
            if group == 0:
                found.append(kind)
                return PLACEHOLDER.format(kind=kind)
            g = group if group > 0 else next(i for i in range(1, m.re.groups + 1) if m.group(i) is not None)
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
