"""Query analysis (lethe_sql.cues): when-questions, named periods, entries that state a time."""

from __future__ import annotations

from datetime import datetime

import pytest

from lethe_sql.cues import Period, analyze, is_question, signals, states_time


@pytest.mark.parametrize("query, kind", [
    ("When did Caroline go to the support group?", "when"),
    ("What year did Maria start volunteering?", "when"),
    ("how long has John been playing basketball", "duration"),
    ("For how long do we keep the original uploads?", "duration"),
    ("How many days did James plan to spend in Canada?", "duration"),
    ("How far ahead of boarding is a pilot called out?", "duration"),
    ("How much rest must a pilot have between two jobs?", "duration"),
    ("How much memory does the worker get?", ""),          # an amount, not of time
    ("What time does the nightly backup start?", "when"),
    ("At what time do pilots get called out?", "when"),
    ("How often are boarding estimates recalculated?", "frequency"),
    ("how frequently does the scraper poll?", "frequency"),
    ("How many replicas does staging run?", ""),            # a count of things, not of time
    ("What did Caroline research?", ""),
    ("Where is the deploy script? when it breaks", ""),     # the kind is read from the opening words
])
def test_the_kind_of_time_a_question_asks_for(query, kind):
    assert analyze(query).temporal == kind


@pytest.mark.parametrize("kind, text, states", [
    ("duration", "Switching club ice to 50-minute sessions.", True),
    ("duration", "Audit rows are kept for 30 days, then purged.", True),
    ("duration", "Spread-over limit is 12h30 for general duties.", True),
    ("duration", "Tokens expire after a week.", True),
    ("duration", "We talked about it last time.", True),             # chat evidence for "how long" is dated talk
    ("duration", "Late-cancelled slots are offered at 70% of the price.", False),
    ("duration", "Use it as a fallback, as agreed.", False),         # "as" is no "a s"
    ("when", "The backup starts at 03:30 UTC.", True),
    ("when", "Deploys go out at 7 pm.", True),
    ("frequency", "etad now recomputes every 60 s.", True),
    ("frequency", "Gulls are counted twice a week.", True),
    ("frequency", "The report is built nightly.", True),
    ("frequency", "Devices poll every 300 s.", True),
    ("frequency", "Settled on polling at 15 minutes.", True),            # a frequency said as its period
    ("frequency", "The report lists 60 ships.", False),
    ("when", "Shipped on Monday.", True),
    ("when", "Cutover at 06:00.", True),
    ("when", "the lake was lovely", False),
])
def test_an_entry_states_the_kind_of_time_asked_for(kind, text, states):
    assert states_time(text, kind) is states


def test_a_how_long_question_rewards_a_duration_and_not_a_time_of_day():
    cues = analyze("How long is a standard club ice session?")
    assert signals(cues, "Switching club ice to 50-minute sessions.", None)["time"] == 1.0
    assert signals(cues, "Resale of cancelled ice at 70% of the normal price.", None)["time"] == 0.0
    assert signals(analyze("How often does the backup run?"), "It runs at 70% load.", None)["time"] == 0.0


@pytest.mark.parametrize("query, earlier", [
    ("Who used to handle the store releases?", True),
    ("What did the idle reset timer used to be set to?", True),
    ("Which Grafana plugin is used to query ClickHouse?", False),   # passive "is used to": the present
    ("Which tool gets used to sign builds?", False),
    ("What config filename did older knurl versions look for?", True),
    ("How long are raw events kept, and where do older ones live?", False),  # older data, not an older state
    ("Which port did staging Postgres use before the migration?", True),
    # "the original uploads" are raw files: with "currently" the question asks about now
    ("For how long do we currently keep the original uploads before they're deleted?", False),
    ("Where do the old reports live these days?", False),
    ("How long did we keep the original uploads?", True),
    ("What was the original bucket?", True),
    ("What did we use originally, and what do we use now?", True),   # "originally" is no modifier
    # "before" and a name closing the question or its clause: what replaced it
    ("Which provider took online payments before Stripe?", True),
    ("What produced the distance matrices before Valhalla, and with which profile?", True),
    ("Which MQTT service received lock telemetry before IoT Core?", True),
    ("Which firmware ran before v2.4?", True),
    ("How many records behind can the sink be before CloudWatch alerts?", False),   # a clause goes on
    ("How long can a page sit in the ISR cache before Next regenerates it?", False),
    ("What has to be merged before Friday?", False),                                # a weekday is no name
    # what was replaced, by the verbs of a move away from it
    ("Which Node version did we start with?", True),
    ("Which database did we migrate away from?", True),
    ("What did we move off last spring?", True),
    ("What did Vitest replace?", True),
    ("What replaced the cron job?", False),                                         # asks for the newer one
    ("What was staging on prior to the migration?", True),
    ("What was the staging port until last week?", True),
    ("What do we start with when the pager fires?", False),                         # a present how-to
])
def test_questions_that_ask_for_an_earlier_version(query, earlier):
    assert analyze(query).earlier is earlier
    assert analyze(query).present is not earlier


@pytest.mark.parametrize("query, present", [
    ("When is PB100 planned to go live in production?", True),   # the plan in force: plans move
    ("When are production deploys frozen?", True),
    ("When will the staging bucket be deleted?", True),
    ("When was the cutover?", False),                             # past tense
    ("When did the nightly eval originally run?", False),
    ("When is the stand-up in March?", False),                    # a period
])
def test_when_is_asks_about_the_present(query, present):
    assert analyze(query).present is present


@pytest.mark.parametrize("query, now", [
    ("Which port does staging Postgres use now?", True),
    ("What is the current retention?", True),
    ("Is the API still on pg-stg-1?", True),
    ("How do we deploy these days?", True),
    ("Which port does staging Postgres use?", False),
    ("Where is the nowhere-man config?", False),       # a word, not the adverb
])
def test_questions_that_name_the_present_outright(query, now):
    assert analyze(query).now is now


def test_periods_a_question_names():
    assert analyze("What did Gina find on 1 February, 2023?").period == Period(datetime(2023, 1, 31),
                                                                                 datetime(2023, 2, 3))
    assert analyze("What painting did Melanie show on October 13, 2023?").period == Period(
        datetime(2023, 10, 12), datetime(2023, 10, 15))
    assert analyze("What workout did Maria start in December 2023?").period == Period(datetime(2023, 12, 1),
                                                                                    datetime(2024, 1, 1))
    assert analyze("When did Melanie go camping in June?").period == Period(month=6)
    assert analyze("How many times has she gone to the beach in 2023?").period == Period(datetime(2023, 1, 1),
                                                                                       datetime(2024, 1, 1))
    assert analyze("what may have caused the outage").period is None  # the verb, not the month
    assert analyze("What did she say in May?").period == Period(month=5)
    assert analyze("migrate on 31 February, 2023").period is None  # no such day: no period
    assert analyze("no dates here").period is None


def test_period_membership():
    june = Period(month=6)
    assert june.contains(datetime(2022, 6, 30)) and not june.contains(datetime(2023, 7, 1))
    dec = analyze("in December 2023").period
    assert dec.contains(datetime(2023, 12, 31, 23, 59)) and not dec.contains(datetime(2024, 1, 1))
    assert not dec.contains(None)


def test_entry_cues():
    assert states_time("we went camping last weekend") and states_time("Shipped on Monday")
    assert not states_time("the lake was lovely") and not states_time(None)
    assert is_question("Did they enjoy the campfire?  ") and not is_question("They did.")
    assert is_question("Wow! What did you paint?") and is_question("That sounds great, how did it feel?")
    # a turn that states something at length and then asks holds a fact: not a question
    assert not is_question("I just got back from a guided tour at MoMA about Cubism and it sparked "
                           "my interest. Can you tell me more?")
    cues = analyze("When did we ship in June?")
    assert signals(cues, "shipped it yesterday", datetime(2023, 6, 3)) == {"time": 1.0, "date": 1.0, "question": 0.0,
                                                                         "phrase": 0.0, "ident": 0.0, "title": 0.0}
    assert signals(cues, "did we ship?", None) == {"time": 0.0, "date": 0.0, "question": 1.0, "phrase": 0.0,
                                                   "ident": 0.0, "title": 0.0}


def test_the_title_cue_is_the_words_question_and_heading_share_over_their_geometric_mean():
    cues = analyze("Which port does the ranker's REST API listen on?")
    assert cues.words == {"which", "port", "ranker", "rest", "api", "listen"}
    title = lambda heading: signals(cues, "text", None, heading)["title"]
    assert title("14:05 Ranker REST port moved") == pytest.approx(3 / (6 * 4) ** 0.5)
    assert title("2026-03-04 09:00 ranker-serve 0.14") == pytest.approx(1 / (6 * 4) ** 0.5)   # its date and time say nothing
    assert title("09:00") == 0.0 and title(None) == 0.0
    assert signals(analyze("the and of"), "text", None, "the and of")["title"] == 0.0   # no content word asked
    # one word asked: a long title that holds it counts less than a heading that names it
    one = analyze("chlorophyll")
    long_title = signals(one, "text", None, "Chlorophyll content of leafy vegetables and cancer risk")["title"]
    assert long_title == pytest.approx(1 / 6 ** 0.5)
    assert signals(one, "text", None, "Chlorophyll")["title"] == 1.0


def test_the_heading_that_names_the_subject_outranks_a_neighbouring_note(project):
    """Two notes the body alone cannot tell apart for the question; the heading can."""
    from conftest import write

    others = ["Deploys go out from the main branch after review.", "The nightly backup lands in the archive bucket.",
              "Lint runs ruff and mypy before the tests.", "The API listens on port 8000 behind nginx.",
              "Grafana alerts page the on-call engineer.", "Release notes live in CHANGELOG.md."]
    write(project.memory_dir / "2026-03-01.md",
          "## 09:00 Dashboard cache\nEntries expire after ten minutes and the warm-up runs at boot.\n"
          "## 09:30 Session store\nEntries expire after ten minutes and the sweeper runs hourly.\n"
          + "".join(f"## 1{k}:00 note {k}\n{t}\n" for k, t in enumerate(others)))
    project.index()
    top = project.search("how long do dashboard cache entries live", learn=False, top_k=2)
    assert [h.heading for h in top] == ["09:00 Dashboard cache", "09:30 Session store"]
    top = project.search("how long do session store entries live", learn=False, top_k=2)
    assert [h.heading for h in top] == ["09:30 Session store", "09:00 Dashboard cache"]


def test_identifiers_and_the_identifier_cue():
    from lethe_sql.cues import id_parts, identifiers

    assert identifiers("Staging DB pg-stg-1.int:5432, key `JWT_ACCESS_TTL`, v1.2.3, fact number 7, plain words") == {
        "pg-stg-1.int:5432", "jwt_access_ttl", "v1.2.3", "7"}
    assert {"pg-stg-1", "int", "5432"} <= id_parts("host pg-stg-1.int:5432")
    q = analyze("is staging still on pg-stg-1 port 5432?")
    assert q.idents == {"pg-stg-1", "5432"}
    assert signals(q, "Staging: pg-stg-1.int:5432", None)["ident"] == 1.0
    assert signals(q, "Staging: pg-stg-2.int:5432", None)["ident"] == 0.0    # all of them, as parts
    assert signals(analyze("which port does staging use"), "port 5432", None)["ident"] == 0.0
    assert signals(analyze("what did we ship"), "shipped it yesterday", datetime(2023, 6, 3))["time"] == 0.0


def test_quoted_phrases():
    assert analyze('When did Jon start reading "The Lean Startup"?').phrases == (("the", "lean", "startup"),)
    assert analyze("what is \u201cLittle Women\u201d about, and \"x\"").phrases == (("little", "women"), ("x",))
    # an unclosed quote runs to the end; empty or punctuation-only quotes are no phrase
    assert analyze('When did Joanna first watch "Eternal Sunshine?').phrases == (("eternal", "sunshine"),)
    assert analyze('say "" or "--" and it\'s "fine" "fine"').phrases == (("fine",),)
    assert analyze("Melanie's dog's name").phrases == ()  # apostrophes are not quotes
    q = analyze('grep "ECONNREFUSED 127.0.0.1:5432"')
    assert q.phrases == (("econnrefused", "127", "0", "0", "1", "5432"),)
    assert signals(q, "psql: Econnrefused 127.0.0.1:5432 again", None)["phrase"] == 1.0
    assert signals(q, "127.0.0.1:5432 gave ECONNREFUSED", None)["phrase"] == 0.0  # same words, other order
    assert signals(analyze("lean startup"), "the lean startup", None)["phrase"] == 0.0  # nothing quoted


def test_a_heading_that_names_the_subject_outranks_a_body_that_mentions_it(project):
    """The title cue (``blend_title``, 3): the note whose heading names what the question
    asks about comes before a checklist whose text has more of the question's words."""
    from conftest import write

    write(project.memory_dir / "2026-03-02.md",
          "# 2026-03-02\n## 10:00 Windows installers\n"
          "Authenticode via signtool and the Sectigo OV certificate; the thumbprint is in the runner secret.\n"
          "## 11:00 release checklist\n"
          "How the installers are signed: the macOS installers are signed and notarized by release.yml; "
          "the Windows installers are built on windows-2022 and uploaded as draft assets.\n"
          "## 12:00 lunch\nLunch is at noon on Fridays.\n")
    project.index()
    hits = project.search("How are the Windows installers signed?", learn=False, top_k=2)
    assert [h.heading for h in hits] == ["10:00 Windows installers", "11:00 release checklist"]
