"""Query analysis for the final score: what a question asks about time, and what an entry is.

Cues that ``pipeline.blend`` adds, weighted, to the z-scored judge and first-stage scores:
0/1 signals (weights ``Settings.blend_time``, ``blend_date``, ``blend_question``,
``blend_phrase``, chosen on the tune half of LoCoMo dev7: bench/results/default-search.md;
``blend_ident`` for the identifiers a question names) and the title's share (``blend_title``):

* **time**: the question asks for a kind of time (``asks_time``, read from its opening
  words) and the entry states that kind (``states_time``): *when* (``when``, ``what
  year/month/day/date/time``) and a time (``yesterday``, ``last week``, a weekday, a month,
  a year, a clock time like ``03:30`` or ``9 pm``; on LoCoMo's tune questions 79% of the
  evidence for "when" questions states one, against 17% of all entries); *how long* (``how
  many days``, ``how far ahead``, ``how soon``, ``how much notice``) and a duration (``30
  days``, ``a 50-minute session``, ``720h``, ``12h30``) or a time (chat evidence for "how
  long" is dated talk: "since last time", "this Tuesday"); *how often* and a frequency
  (``every 60 s``, ``twice a week``, ``nightly``) or a duration (a polling period said as
  "15 minutes"). Until the twentieth session "how long" asked for a time as "when" does, a
  time was no clock time, and "how often" asked for nothing. Over the update sets (p01-p125)
  the answers to 297 "how long" questions state such a time 30% of the time (all memories
  32%), a duration or a time 97% (49%); to 257 "when" and "what time" questions a time 56%
  (32%), with clock times 86% (37%); to 128 "how often" questions a frequency or a duration
  97% (37%); of LoCoMo dev7's 38 evidence turns for "how long", 61% state a time (all turns
  16%), 87% a duration or a time (17%). Each kind states its answer in all of a chain's
  versions alike, so the cue sets versions apart from other notes, not from each other: the
  wider readings were chosen so that it fires on every version (``"frequency"`` read only
  ``every``, ``nightly``, "twice a week" at first: the update sets then lost a current
  version that says "settled on 15 minutes" to the older "every 300 s").
* **date**: the question names a period (``in June``, ``May 2023``, ``on 13 October,
  2023``, ``in 2023``) and the entry's date (``entries.created_at``: the session date,
  or the memory file's date) falls in it.
* **phrase**: the query quotes a phrase (``"The Lean Startup"``, ``“connection refused”``;
  double quotes only, as apostrophes are everywhere; an unclosed quote runs to the end)
  and the entry's text holds it: its words in order, compared on the tokens BM25 uses
  (lowercase runs of ``[a-z0-9_]``), so case and punctuation do not matter. Quoting is an
  explicit request, so its weight (3.0) is large enough that an entry holding the phrase
  usually outranks one that does not. The data could not choose it: 6 of the 561 tune
  questions quote something (titles), and their NDCG@10 was the same at every weight from
  0.5 to 3; no NFCorpus or LongMemEval question quotes anything.
* **past** (not a blend term): the question asks about an earlier state: it says so
  ("used to", "originally", "at first", "previously", "the old ...", "no longer", "when
  we were ...", "why did we drop X"; "the original ...", "the old ..." describe a thing, not
  the question, beside "currently", "these days", "right now"), or it is in the past tense ("did", "was", "were",
  "had"; but "what did we decide" asks about a decision in force), or it names a period.
  When it says so outright (**earlier**), older versions rank above the memories that
  replaced them; otherwise history is ranked as is. Such a question is ranked as if no memory superseded
  another; any other question is about the present, and there a superseded memory
  ranks below the memories that replaced it (``revisions.py``, ``pipeline``).
* **title**: how far the entry's heading names what the question asks about
  (``title_share``: the content words (``words``) the question and the heading, its leading
  date and time left out, share, over the geometric mean of their counts): an agent's
  heading names the subject of its note ("Scaling bounds", "Ranker REST port moved"), and
  the indexed text leaves the heading out. Until the eighteenth session it was the share of
  the question's words the heading holds, which gives a long heading holding the one word
  of a one-word question full weight; over the update sets p50-p65 + p70-p117 (n = 1,024
  current) the change moved cur@1 0.804 -> 0.807, cur_first 0.948 -> 0.947, stale@1 0.027
  -> 0.031, past@5 0.962 -> 0.966, static@5 0.987 -> 0.990. (It was made for an NFCorpus
  loss that was not the cue's: the benchmark's headings are document ids, so the cue is 0
  there; the loss came from the judge's kept token vectors, ``mirror.token_rows``, fixed in
  the nineteenth session.) Chosen by leave-one-project-out over the update sets p01-p17
  (weight 0 / 0.5 / 1 / 2: cur@1 0.742 / 0.760 / 0.767 / 0.771, static@5 0.969 / 0.972 /
  0.972 / 0.975, n = 275 / 359; bench/lever_study/README.md); raised to 3 on 2026-11-25
  with chain evidence: leave-one-project-out over p01-p45 (out-of-fold links; n = 723
  current / 544 past / 950 static) cur@1 0.788 -> 0.808, past@5 0.936 -> 0.950, static@5
  0.978 -> 0.979, both halves (p01-p33, p34-p45) better; weights 2 and 4 by replay
  (bench/lever_study/README.md). LoCoMo's headings hold no words of a
  question: its tune half scores 0.649 at 1 and at 3.
* **question**: the entry is itself a question (``is_question``: its text ends with
  ``?`` and the question is most of it). Conversation turns that only ask hold no fact;
  a user turn that states a fact and then asks the assistant something (LongMemEval's
  evidence) is not one.

Pure functions of the query and an entry's text and date; English only.
"""

from __future__ import annotations

import calendar
import math
import re
from dataclasses import dataclass
from datetime import datetime, timedelta

# What kind of time a question asks for, read from its opening words (``asks_time``); the
# first that matches wins
_ASKS = (
    ("frequency", re.compile(r"^\W*(?:how (?:often|frequently)|at what (?:interval|frequency|cadence))\b", re.I)),
    ("duration", re.compile(r"^\W*(?:for )?how (?:long|soon|quickly|early|late|far (?:ahead|in advance|back|out)|"
                            r"much (?:time|notice|rest|lead time|warning|grace)|many (?:milliseconds|seconds|minutes|"
                            r"hours|days|nights|weeks|fortnights|months|years|decades))\b", re.I)),
    ("when", re.compile(r"^\W*(?:when|(?:at )?what (?:year|month|day|date|time))\b", re.I)),
)
_TIME = re.compile(
    r"\b(yesterday|today|tonight|tomorrow|last|next|ago|week|weekend|month|year|"
    r"monday|tuesday|wednesday|thursday|friday|saturday|sunday|"
    r"january|february|march|april|may|june|july|august|september|october|november|december|"
    r"\d{4}|recently|morning|evening|night|since|soon|summer|winter|spring|fall)\b",
    re.I,
)
_CLOCK = re.compile(r"\b\d{1,2}:\d{2}\b|\b\d{1,2} ?(?:am|pm)\b|\b(?:noon|midnight|midday|morning|afternoon|evening|"
                    r"night|nightly|overnight)\b", re.I)
_COUNT = (r"(?:an?|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|fifteen|twenty|thirty|forty|"
          r"fifty|sixty|ninety|hundred|half|few|several|multiple|many|couple of)")
_UNIT = r"(?:ms|milliseconds?|s|secs?|seconds?|mins?|minutes?|h|hrs?|hours?|days?|nights?|weeks?|fortnights?|months?|years?|decades?)"
# a number and a unit ("30 days", "50-minute", "90s", "12h30"), or a counting word, a space or hyphen and
# a unit ("a week", "two-hour"): a counting word joined to a unit would read "as" as "a s"
_DURATION = re.compile(rf"\b(?:\d+(?:[.,]\d+)?(?: ?|-)|{_COUNT}[ -]){_UNIT}\b|\b\d+h\d+\b", re.I)
_FREQUENCY = re.compile(rf"\bevery\b|\b(?:nightly|daily|hourly|weekly|fortnightly|monthly|yearly|annually|once|twice)\b|"
                        rf"\bper {_UNIT}\b|\b(?:\d+|{_COUNT}) times?\b|\bcron\b", re.I)
#: the kind of time a question asks for -> what in an entry's text states it
_STATES = {
    "when": (_TIME, _CLOCK),
    "duration": (_DURATION, _TIME),
    "frequency": (_FREQUENCY, _DURATION),
}
#: the kind of time a question asks for -> the words ``lethe explain`` says it in
TIME_KINDS = {"when": "a time (when)", "duration": "a duration (how long)", "frequency": "a frequency (how often)"}
_MONTH_NAMES = r"january|february|march|april|may|june|july|august|september|october|november|december|" \
               r"jan|feb|mar|apr|jun|jul|aug|sept|sep|oct|nov|dec"
_PERIOD = re.compile(
    rf"\b(?:(\d{{1,2}})\s+)?({_MONTH_NAMES})\b(?:\s+(\d{{1,2}})\b)?(?:,?\s+(\d{{4}}))?|\b((?:19|20)\d\d)\b",
    re.I,
)
_MONTHS = {name.lower(): i for i, name in enumerate(calendar.month_name) if name}
_MONTHS.update({name.lower(): i for i, name in enumerate(calendar.month_abbr) if name})
_MONTHS["sept"] = 9


@dataclass(frozen=True)
class Period:
    """A span of dates a question names; ``month`` alone (no year) matches that month of any year."""

    start: datetime | None = None
    end: datetime | None = None
    month: int | None = None

    def contains(self, when) -> bool:
        if not isinstance(when, datetime):
            return False
        if self.month is not None:
            return when.month == self.month
        return self.start <= when < self.end


@dataclass(frozen=True)
class QueryCues:
    temporal: str = ""                         # the kind of time it asks for (``asks_time``), or ""
    period: Period | None = None
    phrases: tuple[tuple[str, ...], ...] = ()  # quoted phrases, as token sequences
    past: bool = False                         # asks about an earlier state (``asks_past``)
    earlier: bool = False                      # and says so outright: "before", "used to" (``asks_earlier``)
    now: bool = False                          # names the present outright: "now", "currently" (``says_now``)

    idents: frozenset = frozenset()            # identifiers the query names (``identifiers``)
    words: frozenset = frozenset()             # its content words (``words``)

    @property
    def present(self) -> bool:
        """A question about how things are now: not about the past or a period. "When is the
        cutover?" asks for the date in force now: a plan that moved is a fact that changed
        ("when was/did ..." is in the past tense)."""
        return not self.past and self.period is None


# Words that put a question in the past: an earlier state, named outright...
_PAST = re.compile(
    r"\b((?<!\bis )(?<!\bare )(?<!\bbe )(?<!\bbeen )(?<!\bbeing )(?<!\bget )(?<!\bgets )(?<!\bgot )used to|"
    r"previous(?:ly)?|originally|the original|initially|at first|at the (?:very )?(?:start|beginning)|"
    r"in the (?:very )?beginning|formerly|former|in the past|back (?:when|then)|no longer|any ?more|"
    r"at one point|at some point|started out|when we (?:were|was|tried|started|had|used|ran|first)|"
    r"first (?:version|choice|plan|setup|attempt)|the old|an old|"
    r"older (?:\w+ )?(?:version|release|build|board|model|setup|config\w*|revision|firmware|hardware)s?|"
    r"(?:before|prior to) (?:the|we|our) [\w .-]{0,40}?(?:change|switch|move|migration|upgrade|cutover|rename|rewrite)|"
    r"why did (?:we|they|you|i) (?:drop|switch|move|replace|stop|abandon|remove|change|leave|migrate|ditch|give up)|"
    r"did (?:we|they|you|i|the team) start (?:out |off )?with|until (?:last|recently|yesterday)|"
    r"(?:migrated|moved|switched|did \w+ (?:migrate|move|switch)) (?:away from|off))\b"
    r"|^\W*(?:before|prior to)\b|\b(?:before|prior to)\W*$|\bdid [\w.-]+ replace\W*$",
    re.I,
)
# ...or a past-tense auxiliary ("how many GPUs did we get", "who was the approver"), unless
# it asks what was decided: a decision in force is a question about the present.
_PAST_TENSE = re.compile(r"\b(did|was|were|had)\b", re.I)
_DECIDED = re.compile(
    r"\b(?:did (?:we|they|you|i|the team) (?:decide|agree|choose|pick|settle|conclude|land)|"
    r"(?:was|were) (?:decided|agreed|chosen|picked|settled|concluded))\b",
    re.I,
)


# A past marker that only describes a thing ("the original uploads", "the old bucket", "former
# staff") gives way to an adverb that puts the question itself in the present: "how long do
# we currently keep the original uploads?" asks about the retention in force.
_MODIFIER = re.compile(r"the original|the old|an old|former|older .*", re.I)
_NOW = re.compile(r"\b(?:currently|nowadays|these days|at (?:the )?moment|right now|at present|as of (?:now|today))\b",
                  re.I)


# "before" and a name that closes the question or its clause ("which provider took payments
# before Stripe?", "what produced the matrices before Valhalla, and with which profile?",
# "who owned it before Amira?"): the name is what replaced the thing asked about. Case
# matters (a name is capitalised; a weekday, a month or "I" is not one), and a clause
# that goes on ("before CloudWatch alerts?", "before Next regenerates it") is no name.
_BEFORE_NAME = re.compile(
    r"\bbefore\s+(?!(?:Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday|January|February|March|"
    r"April|May|June|July|August|September|October|November|December|I)\b)"
    r"(?:(?:[A-Z][\w.'/-]*|v\d[\w.]*)\s*){1,3}(?:[?,;]|\band\b|$)")


def _says_earlier(q: str) -> bool:
    """``_PAST`` or ``_BEFORE_NAME`` in ``q``, but for a modifier alone (``_MODIFIER``)
    beside a present adverb."""
    now = _NOW.search(q) is not None
    return (any(not (now and _MODIFIER.fullmatch(m.group(0))) for m in _PAST.finditer(q))
            or _BEFORE_NAME.search(q) is not None)


# The present named outright: a question that says "now", "currently", "these days", "still",
# "the latest" expects that its subject changed (``present.py`` reads it).
_SAYS_NOW = re.compile(r"\b(?:now|currently|nowadays|these days|at (?:the )?moment|right now|at present|today|"
                       r"still|latest|current)\b", re.I)


def says_now(query: str) -> bool:
    """Whether a question names the present outright (``_SAYS_NOW``)."""
    return _SAYS_NOW.search(query or "") is not None


def asks_earlier(query: str) -> bool:
    """Whether a question asks outright for an earlier version ("used to", "originally",
    "before the move"): then older versions rank above the ones that replaced them."""
    return _says_earlier(query or "")


def asks_past(query: str) -> bool:
    """Whether a question asks about an earlier state (module docstring: **past**)."""
    q = query or ""
    if _says_earlier(q):
        return True
    return bool(_PAST_TENSE.search(_DECIDED.sub(" ", q)))


_QUOTED = re.compile(r'["\u201c\u201d]([^"\u201c\u201d]*)(?:["\u201c\u201d]|$)')
_WORD = re.compile(r"[a-z0-9_]+")


def tokens(text: str) -> list[str]:
    """The BM25 tokenizer (``lethe_tokens`` in sql/00_tokens.sql): lowercase runs of [a-z0-9_]."""
    return _WORD.findall((text or "").lower())


def _phrases(query: str) -> tuple[tuple[str, ...], ...]:
    out = []
    for m in _QUOTED.finditer(query):
        toks = tuple(tokens(m.group(1)))
        if toks and toks not in out:
            out.append(toks)
    return tuple(out)


def holds(text_tokens: list[str], phrase: tuple[str, ...]) -> bool:
    """Whether ``phrase`` occurs as consecutive tokens of ``text_tokens``."""
    n = len(phrase)
    return any(tuple(text_tokens[i:i + n]) == phrase for i, t in enumerate(text_tokens) if t == phrase[0])


def _period(text: str) -> Period | None:
    """The first period the text names, or None. A day with a month and year is that day
    with a day of slack each side; a month and year is that month; a year is that year."""
    for m in _PERIOD.finditer(text):
        if m.group(5):
            y = int(m.group(5))
            return Period(datetime(y, 1, 1), datetime(y + 1, 1, 1))
        month = _MONTHS[m.group(2).lower()]
        day, year = m.group(1) or m.group(3), m.group(4)
        if year is None:
            if m.group(2) == "may" and not day:
                continue  # a lowercase "may" without a day or year is the verb
            return Period(month=month)
        y = int(year)
        try:
            if day:
                d0 = datetime(y, month, int(day))
                return Period(d0 - timedelta(days=1), d0 + timedelta(days=2))
        except ValueError:
            continue
        return Period(datetime(y, month, 1), datetime(y + (month == 12), month % 12 + 1, 1))
    return None


# Identifiers: code spans, and runs of word characters, dots, slashes, colons and dashes
# that hold a digit, "_", "." or "/" (ports, versions, paths, hosts, config keys, ticket
# numbers). Runs are matched whole and tested in Python, so the scan is linear.
_CODE_SPAN = re.compile(r"`[^`\n]{1,80}`")
_RUN = re.compile(r"[\w./:-]+")
_ID_SPLIT = re.compile(r"[.:/@]+")


def identifiers(text: str) -> set[str]:
    """Tokens that name a thing exactly, lowercased (see above)."""
    out = set()
    t = text or ""
    for m in _CODE_SPAN.finditer(t):
        tok = m.group(0).strip("`").strip(".:/-").lower()
        if tok and any(c.isalnum() for c in tok):
            out.add(tok)
    for m in _RUN.finditer(t):
        tok = m.group(0).strip(".:/-").lower()
        if any(c.isdigit() or c in "_./" for c in tok) and (len(tok) >= 2 or tok.isdigit()):
            out.add(tok)
    return out


def id_parts(text: str) -> set[str]:
    """The identifiers of ``text`` and their parts between dots, colons, slashes and @
    ("pg-stg-1.int:5432" also gives "pg-stg-1", "int" and "5432")."""
    out = set()
    for tok in identifiers(text):
        out.add(tok)
        out.update(p for p in _ID_SPLIT.split(tok) if p)
    return out


# Function words that say nothing about a memory's subject. Negations are NOT here:
# "uses X" and "no longer uses X" differ.
FUNCTION_WORDS = frozenset(
    """a an the and or but if of to in on at by for with from as is are was were be been being am
    do does did has have had having i me my we our you your he him his she her it its they them their
    this that these those there here so than too very can could will would should may might must
    just about into over after up down out off then once all any both each few more most other some
    such only own same s also via per""".split()
)
#: a heading's leading date and time ("2026-03-02 09:14", "09:14")
HEADING_STAMP = re.compile(r"^\s*(?:\d{4}-\d{2}-\d{2}[ T]?)?(?:\d{1,2}:\d{2}(?::\d{2})?)?\s*")


def words(text: str) -> list[str]:
    """Content words: the BM25 tokens of ``text`` (``tokens``), function words left out."""
    return [w for w in tokens(text) if w not in FUNCTION_WORDS]


def title_words(heading: str | None) -> set[str]:
    """The content words of a heading without its leading date and time."""
    return set(words(HEADING_STAMP.sub("", heading or "")))


def title_share(query_words: frozenset, heading: str | None) -> float:
    """How far a heading names what the question asks about: the content words the two
    share over the geometric mean of their counts (0 to 1). A short heading that names the
    question's subject ("Staging port" for "which port does staging use?") scores high; a
    long title that holds one word of a one-word question ("Chlorophyll content of leafy
    vegetables and cancer risk" for "chlorophyll") less than the share of the question's
    words it holds (1.0) would give."""
    h = title_words(heading)
    if not query_words or not h:
        return 0.0
    return len(query_words & h) / math.sqrt(len(query_words) * len(h))


def analyze(query: str) -> QueryCues:
    return QueryCues(temporal=asks_time(query), period=_period(query), phrases=_phrases(query),
                     past=asks_past(query), earlier=asks_earlier(query), now=says_now(query),
                     idents=frozenset(identifiers(query)), words=frozenset(words(query)))


def asks_time(query: str) -> str:
    """The kind of time a question asks for: "when" (when, what day, what time), "duration"
    (how long, how many days), "frequency" (how often), or "" (none)."""
    for kind, rx in _ASKS:
        if rx.search(query or ""):
            return kind
    return ""


def states_time(text: str, kind: str = "when") -> bool:
    """Whether ``text`` states the kind of time ``kind`` (``asks_time``) asks for."""
    return any(rx.search(text or "") for rx in _STATES.get(kind, ()))


_SENTENCE_END = re.compile(r"[.!?]+\s")


def is_question(text: str) -> bool:
    """The entry only asks: its text ends with ``?`` and that last sentence holds at least
    half of its words ("Did they enjoy the campfire?", "Wow! What did you paint?"). A
    text that states something at length and then asks ("I just got back from MoMA's
    tour of Cubism ... Can you tell me more about its artists?") holds a fact, and is not
    one."""
    t = (text or "").rstrip()
    if not t.endswith("?"):
        return False
    body = t.rstrip("?")
    last = 0
    for m in _SENTENCE_END.finditer(body):
        last = m.end()
    return 2 * len(_WORD.findall(body[last:].lower())) >= len(_WORD.findall(body.lower()))


def signals(cues: QueryCues, text: str, created_at, heading: str | None = None) -> dict[str, float]:
    """The cues of one entry for one query (see the module docstring): 0/1, and the title's
    share from 0 to 1."""
    phrase = 0.0
    if cues.phrases:
        toks = tokens(text)
        phrase = float(any(holds(toks, p) for p in cues.phrases))
    return {
        "title": title_share(cues.words, heading),
        "time": float(bool(cues.temporal) and states_time(text, cues.temporal)),
        "date": float(cues.period is not None and cues.period.contains(created_at)),
        "question": float(is_question(text)),
        "phrase": phrase,
        "ident": float(bool(cues.idents) and cues.idents <= id_parts(text)),
    }
