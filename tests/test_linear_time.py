"""Every regex that runs on user text runs in time linear in the text.

A memory file, a transcript or a query can be anything, up to LETHE_MAX_FILE_BYTES. A
pattern that rescans the rest of the text from every start position (``<private``
without ``>``, a run of ``a-a-a-...`` before ``://``, ``## # # # ... x`` as a heading)
turns one hostile file into minutes of CPU for every `lethe index` and hook.

How this is measured, without depending on the machine's speed: there is no step counter
inside Python's ``re``, so the tests compare CPU time (``time.thread_time``: this thread
only, so other processes and the onnxruntime threads do not count) within one process,
taking the minimum of several repeats, and never look at a duration itself. The same
number of characters is processed twice: as 16 calls on inputs of N characters, and as
one call on an input of 16 x N (and 4 x N). For linear work both take about the same time
(the many small calls pay more per-call overhead, if anything); for quadratic work the
large call takes 16 (4) times longer. The test fails at a ratio of 4 or more: four times
the linear cost, four times below the quadratic one at the largest size, so neither a
loaded machine nor a quick one moves the verdict; a ratio over the limit is measured once
more before it fails. Sizes grow 4k -> 16k -> 64k characters (2k -> 32k for the slow
check of every regex): the super-linear patterns this suite was written against took
seconds at 64k, and 9 s for a 320 KB ``<private`` run.
"""

from __future__ import annotations

import importlib
import re
import time
from datetime import datetime

import pytest

from lethe_sql import cues, markdown, privacy, revisions
from lethe_sql.agents import hooks, mine
from lethe_sql.agents.mine import Exchange

# Adversarial units, repeated to the size measured: each is the start of some pattern
# whose end never comes (or comes only at the very end of the text).
UNITS = {
    "private-unclosed": "<private",
    "private-attr": "<private a",
    "private-close": "</private ",
    "pem-begin": "-----BEGIN ",
    "pem-begin-key": "-----BEGIN PRIVATE KEY-----",
    "sk": "sk-",
    "sk-ant": "sk-ant-",
    "scheme": "a://",
    "scheme-run": "a-",
    "url-colon": "s://h:a:",
    "jwt": "eyJ-",
    "jwt-dot": "eyJa.",
    "whitespace": " \t",
    "newlines": "\n",
    "quote": '"',
    "quote-word": '"a ',
    "curly-quote": "\u201c",
    "marker": "<!-- lethe ",
    "marker-attr": "<!-- lethe mined-through=",
    "heading": "# ",
    "password": "password ",
    "token-colon": "token: ",
    "env-name": "DB_",
    "env-suffix": "X_PASSWORD ",
    "base64": "Ab/+",
    "hex": "0123456789abcdef",
    "hex-key": "key 0123456789abcdef",
    "aws": "AKIAZ7QXN4M2K8P5R3TW ",
    "basic": "Basic ",
    "slack": "hooks.slack.com/services/",
    "azure": "AccountKey=",
    "ident": "a.",
    "code-span": "`a",
    "reminder": "<system-reminder>",
    "comment": "<!--",
    "before": "before ",
    "from-to": "from ",
}
SMALL = 16
SIZES = (4_000, 16_000, 64_000)
LIMIT = 4.0


def _text(unit: str, n: int, tail: str) -> str:
    return (unit * (n // len(unit) + 1))[: n - len(tail)] + tail


def _cpu(fn, texts, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.thread_time()
        for t in texts:
            fn(t)
        best = min(best, time.thread_time() - t0)
    return max(best, 1e-7)


def _growth(fn, unit: str, tail: str, sizes, repeats: int = 2) -> list[float]:
    """CPU time of one call on n characters over that of calls on sizes[0] characters
    totalling n, for each larger size n: about 1 for linear work, n / sizes[0] for quadratic."""
    base = _cpu(fn, [_text(unit, sizes[0], tail)] * SMALL, repeats) / SMALL
    return [_cpu(fn, [_text(unit, n, tail)], repeats) / (base * n / sizes[0]) for n in sizes[1:]]


def assert_linear(fn, label: str, sizes=SIZES, tails=("x",)) -> None:
    """``tails``: what each text ends with (a heading's last character decides its match)."""
    slow = []
    for name, unit in UNITS.items():
        for tail in tails:
            ratios = _growth(fn, unit, tail, sizes)
            if max(ratios) >= LIMIT:  # measure once more before calling it super-linear
                ratios = _growth(fn, unit, tail, sizes, repeats=5)
            if max(ratios) >= LIMIT:
                slow.append(f"{label} on {name}+{tail!r}: {[round(r, 1) for r in ratios]}")
    assert not slow, "super-linear (cost per character grows with the size):\n" + "\n".join(slow)


WHEN = datetime(2026, 5, 1)
QC = cues.analyze('when did "we move" the port in May?')

ENTRY_POINTS = {
    "privacy.scrub": privacy.scrub,
    # the sections' memo is emptied first: the work itself is measured, not a remembered answer
    "markdown.parse": lambda t: (markdown._parts_remembered.cache_clear(), markdown.parse("## h\n" + t, "2026-01-01.md"))[1],
    "cues.analyze": cues.analyze,
    "cues.signals": lambda t: cues.signals(QC, t, WHEN),
    "mine.mined_through": mine.mined_through,
    "mine._clean": mine._clean,
    "hooks.extractive_summary": lambda t: hooks.extractive_summary(Exchange(0, t, t)),
    "revisions._identifiers": revisions._identifiers,
    "revisions.words": revisions.words,
}


@pytest.mark.parametrize("name", list(ENTRY_POINTS))
def test_user_text_paths_run_in_linear_time(name):
    """Each function that reads user text: scrub (and so every write path), the markdown
    parser, the query cues, transcript mining, the hook's summary, revision detection."""
    assert_linear(ENTRY_POINTS[name], name)


MODULES = ["privacy", "markdown", "cues", "agents.mine", "agents.hooks", "revisions", "curate"]


def _patterns():
    for m in MODULES:
        mod = importlib.import_module(f"lethe_sql.{m}")
        for attr, value in sorted(vars(mod).items()):
            if isinstance(value, re.Pattern):
                yield f"{m}.{attr}", value
    for i, (kind, pat, *_rest) in enumerate(privacy._SECRETS):
        yield f"privacy._SECRETS[{i}] {kind}", pat


@pytest.mark.slow
@pytest.mark.parametrize("name, pattern", list(_patterns()), ids=lambda x: x if isinstance(x, str) else "")
def test_every_module_regex_runs_in_linear_time(name, pattern):
    """Every compiled regex of the modules that read user text, searched over the whole
    text from every position (``finditer``: at least the work of any way they are used), so
    that a pattern added later is checked without anyone remembering to list it (slow: about
    a minute for all of them)."""
    assert_linear(lambda t: sum(1 for _ in pattern.finditer(t)), name, sizes=(2_000, 8_000, 32_000),
                  tails=("x", "\n"))
