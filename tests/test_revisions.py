"""Revisions: detected and declared links, time-aware ranking, the SQL views, fixing links."""

import json
import os
import subprocess
from datetime import datetime

import duckdb
import pytest

from conftest import BIN, write

LETHE = str(BIN / "lethe")
OLD = "Staging Postgres listens on port 5433."
NEW = "Staging Postgres listens on port 5434."


def id_of(text):
    from lethe_sql.markdown import content_id

    return content_id(text)


def links(store):
    return sorted(store.con.execute("SELECT old_id, new_id, origin FROM revisions").fetchall())


def ranked_under_pair(store, pair, score, question, names, top_k=10):
    """``names`` (id -> name) in the order ``question`` ranks them once detection's only
    scored pair is ``pair`` (old id, new id) at ``score``."""
    store.con.execute("DELETE FROM revision_candidates")
    store.con.execute("INSERT INTO revision_candidates VALUES (?, ?, ?)", [*pair, score])
    return [names[h.id] for h in store.search(question, learn=False, top_k=top_k) if h.id in names]


# -- the pure pieces ------------------------------------------------------------------


def M(text, at, heading=None, source="f.md", position=0):
    from lethe_sql.revisions import Memory

    return Memory(id_of(text), text, heading, at, source, position)


def test_a_restatement_with_a_changed_value_is_a_revision_only_when_newer():
    from lethe_sql.revisions import classify

    a, b = M(OLD, datetime(2026, 3, 1)), M(NEW, datetime(2026, 3, 9))
    v = classify(a, b, 0.986, 0, {}, 2)
    assert v.revision and "5433 -> 5434" in v.reason
    assert not classify(b, a, 0.986, 0, {}, 2).revision              # the older one never supersedes
    same_day = M(NEW, datetime(2026, 3, 1), position=1)
    assert not classify(a, same_day, 0.986, 0, {}, 2).revision       # one day's list without times: no order
    assert not classify(M(OLD, None), b, 0.986, 0, {}, 2).revision   # undated: no order, no link


@pytest.mark.parametrize("old,new", [
    ("Error tracking goes to Sentry SaaS (org acme, project api).",
     "Error tracking runs on our self-hosted GlitchTip 4 instance at glitchtip.acme.internal."),
    ("The mobile app talks to the API through api.acme.io behind Cloudflare.",
     "The mobile app reaches the API via the AWS ALB at mobile-api.acme.io; Cloudflare proxying broke websockets."),
])
def test_a_revision_need_not_announce_its_change(old, new):
    """No "now", "instead" or "switched": the newer note just states the new fact (the model
    without ``revision_fit.unannounced`` scored these 0.36 and 0.32)."""
    from lethe_sql.revisions import classify

    v = classify(M(old, datetime(2026, 3, 1, 10)), M(new, datetime(2026, 3, 15, 10)), 0.6, 0, {}, 2)
    assert v.revision and "announces a change" not in v.reason


def test_two_notes_of_one_day_that_announce_no_change_are_a_list():
    from lethe_sql.revisions import classify

    a = M("Entries expire after ten minutes and the warm-up runs at boot.", datetime(2026, 3, 1, 9), "09:00 Dashboard cache")
    b = M("Entries expire after ten minutes and the sweeper runs hourly.", datetime(2026, 3, 1, 9, 30), "09:30 Session store")
    v = classify(a, b, 0.8, 0, {}, 2)
    assert not v.revision and v.reason == "written the same day, announcing no change"
    c = M("Entries now expire after thirty minutes and the warm-up runs at boot.", datetime(2026, 3, 1, 16))
    assert classify(a, c, 0.8, 0, {}, 2).reason != v.reason   # a change announced: the model decides
    d = M("Entries expire after ten minutes and the sweeper runs hourly.", datetime(2026, 3, 2, 9), "Session store")
    assert classify(a, d, 0.8, 0, {}, 2).reason != v.reason   # another day


def test_a_correction_written_the_same_day_revises():
    """A note that says it corrects an earlier one announces a change, hours later too."""
    from lethe_sql.revisions import classify

    old = M("Use pnpm, not npm, in this repo.", datetime(2026, 3, 1, 10))
    new = M("Correction to the earlier note: use npm, pnpm broke the lockfile in CI.", datetime(2026, 3, 1, 15))
    v = classify(old, new, 0.63, 0, {}, 2)
    assert v.revision and "announces a change" in v.reason


def test_a_correction_revises_the_recent_note_it_names():
    """A note that opens as a correction ("Correction: ...") revises a note of the week
    before it whose title it shares or whose value it says was wrong ("not 180"), however
    little else the two share (the model alone scored such pairs 0.02-0.27)."""
    from lethe_sql.revisions import classify, corrects

    old = M("Players get 180 seconds to reconnect before a game is marked abandoned.",
            datetime(2026, 5, 20, 10), "10:00 Disconnect grace")
    fix = M("Correction: 120 seconds, not 180. The arbiter rules say two minutes.",
            datetime(2026, 5, 20, 15, 30), "15:30 Correction: disconnect grace")
    v = classify(old, fix, 0.35, 4, {}, 2)
    assert v.revision and v.reason == "corrects it (disconnect, grace, not 180)"
    untitled = M(fix.text, fix.at)                       # no title: the wrong value it names ties it
    assert classify(old, untitled, 0.35, 4, {}, 2).reason == "corrects it (not 180)"
    later = M(fix.text, datetime(2026, 5, 28, 9), "Correction: disconnect grace")
    assert not classify(old, later, 0.35, 4, {}, 2).reason.startswith("corrects")   # more than a week on
    other = M("Rapid games default to 10+5.", datetime(2026, 5, 19), "Time control")
    assert not classify(other, fix, 0.35, 4, {}, 2).reason.startswith("corrects")   # nothing ties them
    assert [corrects(M(t, None, h)) for t, h in [
        ("Correction to this morning's note: 50 vouchers a year.", "Vouchers"),
        ("Tickets carry a QR code with error correction level M.", "Ticket barcode"),
        ("50 vouchers a year.", "10:00 Erratum: vouchers"),
        ("TMS re-sends corrected rows with the same id.", "Failing test"),
        ("Oops, the topic names I wrote down came from the planning sheet.", "MQTT topics"),
        ("Actually the database backup runs at 03:30 UTC.", "DB backup"),
        ("Scratch the earlier figure: 3 primaries.", "Shards"),
        ("Had that wrong at lunchtime: the bucket is nvo-archive.", "Archive"),
        ("The job actually runs twice; nobody was wrong about it.", "Cron"),
        ("Halvard require 13 months of 1-second data.", "15:10 Retention, take two"),
        ("The email said Wednesday 1 July.", "Deadline (fixed)"),
        ("Fixed the deadline reminder's time zone.", "Deadline reminder"),
    ]] == [True, False, True, False, True, True, True, True, False, True, True, False]


def test_an_unlabelled_correction_of_the_same_day_is_tied_by_the_thing_it_names():
    """No "Correction:" label, no shared title word: the name both notes hold ties them; and
    a note of the same day that opens as a correction is no item of a list, so a note it is
    not tied to is left to the model."""
    from lethe_sql.revisions import classify

    old = M("Index `tm-segments`: 5 primary shards, 1 replica, one analyzer per language.",
            datetime(2026, 8, 19, 14, 40), "14:40 OpenSearch indices")
    fix = M("Scratch the earlier figure: tm-segments was created with 3 primaries and 1 replica "
            "(ops/opensearch/tm-segments.json).",
            datetime(2026, 8, 19, 17, 25), "17:25 Shard count")
    assert classify(old, fix, 0.69, 0, {}, 2).reason == "corrects it (tm-segments)"
    other = M("Dashboards run on port 5601 behind the VPN.", datetime(2026, 8, 19, 16), "16:00 OpenSearch dashboards")
    v = classify(other, fix, 0.69, 0, {}, 2)
    assert not v.revision and v.reason != "written the same day, announcing no change"   # the model decides


def test_a_correction_corrects_one_note(project):
    """Of two notes of the morning a correction's title ties to, it revises the one nearer in
    meaning; the other stays current."""
    write(project.memory_dir / "2026-06-24.md", (
        "# 2026-06-24\n"
        "## 09:30 Visitor vouchers\nEach household gets 60 visitor vouchers a year, bought in books of 10.\n"
        "## 11:00 Visitor voucher refunds\nUnused visitor vouchers are refunded per household at the end of the "
        "permit year.\n"
        "## 13:45 Correction: visitor vouchers\nCorrection to this morning's note: the household allowance is 50 "
        "visitor vouchers per year; 60 is for blue badge holders.\n"))
    project.index()
    texts = dict(project.con.execute("SELECT id, left(text, 10) FROM entries").fetchall())
    assert [(texts[o], texts[n], origin) for o, n, origin in links(project)] == [
        ("Each house", "Correction", "detected")]
    reason = project.con.execute("SELECT reason FROM revisions").fetchone()[0]
    assert reason == "corrects it (visitor, vouchers)"


def test_a_notes_label_is_no_speaker():
    """"Update:", "Decision:", "Note:" open notes, not chat turns: a note labelled "Update:"
    revises one labelled "Decision:" (two speakers' turns never revise each other)."""
    from lethe_sql.revisions import classify, dialogue, speaker

    assert [speaker(t) for t in ("Update: moved to 5434.", "Root cause: a full disk.", "Caroline: hi!",
                                 "Priya Raman: ok", "user: hi")] == ["", "", "Caroline", "Priya Raman", "user"]
    assert not dialogue("Note: port 5433.\nUpdate: port 5434.\nNote: restart needed.")
    v = classify(M("Decision: the payments webhook retries 3 times with exponential backoff.", datetime(2026, 3, 1)),
                 M("Update: the payments webhook retries 5 times now, backoff capped at 60 s.", datetime(2026, 4, 1)),
                 0.9, 0, {}, 2)
    assert v.revision and "speakers" not in v.reason


@pytest.mark.parametrize("old,new", [
    ("The cache is shared between workers.", "The cache is not shared between workers."),
    ("The API client uses requests for HTTP.", "The API client uses httpx for HTTP."),
])
def test_negations_and_swapped_names_are_revisions(old, new):
    from lethe_sql.revisions import classify

    assert classify(M(old, datetime(2026, 3, 1)), M(new, datetime(2026, 4, 1)), 0.9, 0, {}, 2).revision


@pytest.mark.parametrize("old,new,why", [
    # another speaker's later turn answers, it does not revise (LoCoMo's pleasantries)
    ("Gina: Thanks, Jon! Appreciate your support!", "Jon: Thanks, Gina! Appreciate your support, really!",
     "said by different speakers (Gina, Jon)"),
    # a chat log's roles, in any case: the user and the assistant are two speakers
    ("user: I run 5k every morning now.", "Assistant: Running 5k every morning now is a great habit.",
     "said by different speakers (user, assistant)"),
    # ... and an assistant's answers are advice, not the user's facts
    ("assistant: Try 3 sets of 10 squats.", "assistant: Try 4 sets of 12 squats.",
     "an assistant's answer states no fact to revise"),
    # a question asserts nothing, so it neither revises nor is revised
    ("Tim: Wow! How long have you been surfing?", "Tim: Wow! How long have you been playing?",
     "a question states nothing to revise"),
    ("Which port does staging Postgres use?", NEW, "a question states nothing to revise"),
    # a whole chat session is many facts said by several people, not one fact's version
    ("Gina: The store opens at 9.\nJon: Nice!\nGina: And closes at 5.",
     "Gina: The store opens at 10 now.\nJon: Since when?\nGina: Since May.",
     "a conversation of several speakers states no single fact to revise"),
])
def test_questions_and_other_speakers_turns_are_never_revisions(old, new, why):
    from lethe_sql.revisions import classify

    v = classify(M(old, datetime(2026, 3, 1)), M(new, datetime(2026, 4, 1)), 0.95, 0, {}, 2)
    assert not v.revision and v.reason == why and v.score == 0.0
    # the same speaker restating a value still revises
    same = classify(M("Gina: The store opens at 9.", datetime(2026, 3, 1)),
                    M("Gina: The store opens at 10.", datetime(2026, 4, 1)), 0.95, 0, {}, 2)
    assert same.revision and "9 -> 10" in same.reason
    user = classify(M("user: My gym opens at 9.", datetime(2026, 3, 1)),
                    M("User: My gym opens at 10.", datetime(2026, 4, 1)), 0.95, 0, {}, 2)
    assert user.revision  # the user restating a fact of theirs, whatever the case of the role


@pytest.mark.parametrize("old,new", [
    (OLD, OLD + " Connect with psql -p 5433 from the bastion."),            # an elaboration adds, changes nothing
    ("Staging Postgres listens on port 5433.", "Staging Postgres runs PostgreSQL 16."),   # another attribute
])
def test_elaborations_and_other_attributes_are_not_restatements(old, new):
    from lethe_sql.revisions import _restated

    assert _restated(old, new, 0.9) == ""


def test_the_model_scores_a_change_note_above_an_unrelated_pair():
    from lethe_sql.revisions import LINK_AT, pair_features, probability

    df = {"staging": 3, "postgres": 3, "port": 2, "5433": 1, "5434": 1, "pgbouncer": 1, "lunch": 1}
    old = M(OLD, datetime(2026, 3, 1), "14:05 postgres port")
    change = M("Moved staging Postgres from 5433 to 5434: pgbouncer took 5433.", datetime(2026, 4, 2),
               "09:20 postgres moved")
    other = M("Team lunch is on Friday at the usual place.", datetime(2026, 4, 2), "12:00 lunch")
    p_change = probability(pair_features(old, change, 0.72, 0, df, 40))
    p_other = probability(pair_features(old, other, 0.31, 7, df, 40))
    assert p_change > LINK_AT > 0.05 > p_other


@pytest.mark.parametrize("text,is_dialogue", [
    ("Caroline: Hi!\nMelanie: Hey, how are you?\nCaroline: Good.", True),
    ("user: plan a trip\nassistant: sure, where to?\nuser: Lisbon", True),
    ("Caroline: I went to the support group yesterday.", False),          # one turn
    ("Host: pg-stg-2\nPort: 6432\nOwner: Ines", False),                  # a note's key: value lines
    ("**User:** fix the test\n\n**Assistant:** done, the fixture was stale", False),   # a mined exchange
])
def test_dialogue_is_several_speakers_one_of_them_speaking_twice(text, is_dialogue):
    from lethe_sql.revisions import dialogue

    assert dialogue(text) is is_dialogue


@pytest.mark.parametrize("old,new,changed", [
    ("Prod EKS upgrade done, tr-prod-euw1 = 1.29.", "Prod cluster on 1.30 after the window.", True),   # 9.9
    ("Staging Postgres: port 5432.", "Staging goes through pgbouncer, port 6432.", True),              # 9
    ("Worker pool is pg-stg-1.", "Worker pool moved to pg-stg-2.", True),                               # a-a-9
    ("Staging Postgres: port 5432.", "Staging Postgres: port 5432, db tally_stg.", False),  # nothing swapped
    ("Staging Postgres: port 5432.", "Postgres 16.2 on staging now.", False),      # 9 gone, 9.9 came: not one shape
    ("Timeout is 10 seconds.", "Timeout is ten seconds now.", False),              # no value came in its place
])
def test_value_changed_is_a_value_swapped_for_one_of_the_same_shape(old, new, changed):
    from lethe_sql.revisions import value_changed

    assert value_changed(old, new) is changed


@pytest.mark.parametrize("heading, text, kind", [
    ("09:40 Incident: DX flap", "The Direct Connect BGP session flapped 4 times.", 1.0),
    ("Reminder: SAVE_VERSION", "Touching SaveData means bumping SAVE_VERSION.", 1.0),
    ("15:20 Sync", "Q: should we take the next SDK release before the pilot ends?", 1.0),
    ("How-to: force a tariff reload", "POST /admin/tariffs/reload with the admin token.", 1.0),
    ("11:00 Tariff cache", "Tariffs are reloaded every 10 minutes now.", 0.0),
    ("Queue status page", "The status page moved to status.example.org.", 0.0),   # "status" not leading
    # ...or the title ends in such a noun (English titles put their head noun last)
    ("14:10 Tariff cache check", "Checked the cache after the change: reloads every 10 minutes.", 1.0),
    ("Tariff reload how-to", "POST /admin/tariffs/reload with the admin token.", 1.0),
    ("Infra overview (June)", "Tariffs cached 10 minutes, queue on redis-2.", 1.0),
    ("Tariff cache (checked)", "Tariffs are reloaded every 10 minutes now.", 0.0),  # only the parenthesis says so
    ("Check cadence for tariffs", "Tariffs are reloaded every 10 minutes now.", 0.0),  # "check" not the head
    # ...or it opens with a check that something works (a follow-up, not a new version)
    ("10:00 Setup time at Haldor", "Looked at 60 passes since the change: lock after 48-81 s.", 1.0),
    ("Per-project match threshold", "Confirmed the per-project override works; the default is untouched.", 1.0),
    ("Backup canary", "The nightly backup is checked by a restore canary at 04:00.", 0.0),   # "checked" not leading
])
def test_note_kind_is_a_note_that_reports_asks_or_reminds(heading, text, kind):
    """The ``note_kind`` feature: the newer note opens as an incident, a reminder, a
    question, a how-to ..., or its title ends in such a noun (a check, a test, an overview:
    ``note_head``); its heading's time stamp left out."""
    from lethe_sql.revisions import FEATURES, pair_features

    old = M("Tariffs are cached for an hour.", datetime(2026, 3, 1), heading="Tariff cache")
    new = M(text, datetime(2026, 3, 9), heading=heading)
    assert pair_features(old, new, 0.8, 0, {}, 2)[FEATURES.index("note_kind")] == kind


@pytest.mark.parametrize("old_heading, old, new_heading, new, apart", [
    ("Prod DB goes through pgbouncer", "The app connects through pgbouncer on pg-1.", "Staging DB now via pgbouncer",
     "Staging now mirrors prod: pgbouncer on pg-stg-1.", True),       # the headings name different scopes
    ("Prod broker", "Production MQTT is EMQX.", "Broker migration", "Moved production MQTT to a cluster.", False),
    ("Dev broker", "The dev broker is Mosquitto.", "Broker", "Production MQTT is now EMQX.", True),
    ("Broker", "MQTT is Mosquitto.", "Broker", "MQTT is now EMQX.", False),  # no scope named
    ("Broker", "The dev broker is Mosquitto.", "Broker", "Production MQTT is now EMQX.", True),  # texts only
])
def test_scope_apart_is_two_notes_naming_only_different_scopes(old_heading, old, new_heading, new, apart):
    from lethe_sql.revisions import FEATURES, pair_features, scope_apart

    a = M(old, datetime(2026, 3, 1), heading=old_heading)
    b = M(new, datetime(2026, 3, 9), heading=new_heading)
    assert scope_apart(a, b) is apart
    assert pair_features(a, b, 0.8, 0, {}, 2)[FEATURES.index("scope_apart")] == float(apart)   # with its word sets


def test_a_paraphrased_version_bump_scores_above_a_reworded_note_on_another_subject():
    # the pair a plain restatement check misses: other words, a retirement word, a value of one shape swapped
    from lethe_sql.revisions import classify, pair_features, probability

    df = {"kafka": 2, "bootstrap": 2, "9092": 1, "9096": 1, "msk": 1, "retired": 1, "grafana": 1}
    old = M("Kafka bootstrap: kafka-1.internal:9092, PLAINTEXT inside the VPC. Self-hosted on EC2.",
            datetime(2026, 2, 1), "10:00 kafka bootstrap")
    new = M("Self-hosted Kafka is retired. Bootstrap servers are the MSK brokers at b-1.internal:9096, TLS.",
            datetime(2026, 4, 1), "11:00 kafka on msk")
    side = M("Grafana dashboard for Kafka consumer lag lives in the ops folder.", datetime(2026, 4, 1),
             "11:30 lag dashboard")
    v = classify(old, new, 0.77, 0, df, 60)
    assert v.revision and "a value changed" in v.reason and "announces a change" in v.reason
    assert probability(pair_features(old, side, 0.55, 1, df, 60)) < 0.3 < v.score


# -- detected and declared links in a store -------------------------------------------


def test_detected_link_views_and_valid_times(project):
    write(project.memory_dir / "2026-03-01.md", f"# 2026-03-01\n## 09:00 db port\n{OLD}\n")
    write(project.memory_dir / "2026-03-09.md", f"# 2026-03-09\n## 10:30 db port\n{NEW}\n")
    r = project.index()
    assert r.revisions_detected == 1
    assert links(project) == [(id_of(OLD), id_of(NEW), "detected")]
    con = project.con
    row = con.execute("SELECT old_id, new_id, valid_from, valid_to FROM lethe_revisions").fetchone()
    assert row == (id_of(OLD), id_of(NEW), datetime(2026, 3, 1, 9, 0), datetime(2026, 3, 9, 10, 30))
    assert [r[0] for r in con.execute("SELECT id FROM lethe_current").fetchall()] == [id_of(NEW)]
    as_of = lambda ts: [r[0] for r in con.execute("SELECT id FROM lethe_as_of(?)", [ts]).fetchall()]
    assert as_of("2026-03-05") == [id_of(OLD)]
    assert as_of("2026-03-10") == [id_of(NEW)]
    assert as_of("2026-02-01") == []
    versions = con.execute("SELECT id, superseded_by, is_current FROM lethe_versions ORDER BY valid_from").fetchall()
    assert versions == [(id_of(OLD), id_of(NEW), False), (id_of(NEW), None, True)]


def test_an_index_built_under_another_revision_model_is_detected_again_once(project):
    from lethe_sql.revisions import fingerprint

    write(project.memory_dir / "2026-03-01.md", f"## 09:00 db port\n{OLD}\n## 11:00 lunch\nLunch is at noon on Fridays.\n")
    write(project.memory_dir / "2026-03-09.md", f"## 10:30 db port\n{NEW}\n")
    project.index()
    con = project.con
    assert con.execute("SELECT value FROM meta WHERE key = 'revision_model'").fetchone() == (fingerprint(),)
    # as an older version left it: another model's fingerprint, a link that model made, none of today's
    lunch = con.execute("SELECT id FROM entries WHERE text LIKE 'Lunch%'").fetchone()[0]
    con.execute("UPDATE meta SET value = 'older' WHERE key = 'revision_model'")
    con.execute("DELETE FROM revisions")
    con.execute("INSERT INTO revisions (old_id, new_id, origin, reason, score) VALUES (?, ?, 'detected', 'older', 0.5)",
                [lunch, id_of(NEW)])
    report = project.index()                      # no file changed: only the model did
    assert report.revisions_detected == 1
    assert links(project) == [(id_of(OLD), id_of(NEW), "detected")]
    assert con.execute("SELECT value FROM meta WHERE key = 'revision_model'").fetchone() == (fingerprint(),)
    con.execute("DELETE FROM revisions")
    assert project.index().revisions_detected == 0 and links(project) == []   # once: the same model leaves links be


def test_present_and_past_questions_and_what_each_result_says(project):
    write(project.memory_dir / "2026-03-01.md", f"## 09:00 db port\n{OLD}\n## 11:00 lunch\nLunch is at noon on Fridays.\n")
    write(project.memory_dir / "2026-03-09.md", f"## 10:30 db port\n{NEW}\n")
    project.index()
    now = project.search("which port does staging Postgres use now?", learn=False)
    assert [h.id for h in now[:2]] == [id_of(NEW), id_of(OLD)]
    assert now[0].superseded_by == () and now[0].is_current
    assert now[1].superseded_by == (id_of(NEW),) and now[1].superseded_at == datetime(2026, 3, 9, 10, 30)
    assert now[0].score >= now[1].score          # scores still fall with the rank
    before = project.search("which port did staging Postgres use before?", learn=False)
    assert id_of(OLD) in [h.id for h in before[:5]]
    assert before[0].id == id_of(OLD)            # history is ranked as is: the old phrasing matches
    # the single-list modes say it too
    assert {h.id: h.superseded_by for h in project.search("staging postgres port", mode="bm25")}[id_of(OLD)] == (id_of(NEW),)


def write_declared(project, heading, old_at, old, new_at, new):
    """Two notes under one ``heading`` (``at``: "YYYY-MM-DD HH:MM"), the newer declaring
    with a marker that it supersedes the older; indexed."""
    for (day, hm), text, mark in ((old_at.split(), old, ""),
                                  (new_at.split(), new, f"<!-- lethe supersedes={id_of(old)[:8]} -->\n")):
        write(project.memory_dir / f"{day}.md", f"## {hm} {heading}\n{text}\n{mark}")
    project.index()


def test_when_is_a_plan_that_moved_answers_with_the_plan_in_force(project):
    old = "Cutover date for the billing batch: Monday 2 March, after two clean parallel month-ends."
    new = "Billing batch cutover moved to Monday 13 April; 6 April is a bank holiday."
    write_declared(project, "cutover date", "2026-01-14 09:00", old, "2026-02-26 10:00", new)
    assert [h.id for h in project.search("When is the billing batch cutover?", learn=False)[:2]] == [
        id_of(new), id_of(old)]
    past = project.search("When was the billing batch cutover planned at first?", learn=False)
    assert past[0].id == id_of(old)


def test_currently_keeping_the_original_files_is_a_question_about_now(project):
    """"the original uploads" names the raw files, not an earlier state: with "currently"
    the question asks for the retention in force; "originally" still asks for the first."""
    old = "Original lecture uploads stay 90 days in the ingest bucket, then the expire-raw rule deletes them."
    new = "Raw retention is 180 days now: the registry needs lecture recordings for exam appeals."
    write_declared(project, "raw retention", "2026-03-06 14:10", old, "2026-03-27 09:30", new)
    now = project.search("How long do we currently keep the original uploads before they're deleted?", learn=False)
    assert [h.id for h in now[:2]] == [id_of(new), id_of(old)]
    first = project.search("How long did we originally keep uploads?", learn=False)
    assert first[0].id == id_of(old)


def test_a_superseded_memory_missing_from_the_pool_brings_its_current_version(project):
    """The question matches only the old wording; the current version joins the pool."""
    old = "Invoice PDFs are rendered by wkhtmltopdf through pdfkit in invoices/render.py."
    new = "Dropped it for WeasyPrint 62; xvfb is gone from the worker image."
    write_declared(project, "pdf", "2026-02-06 11:00", old, "2026-04-06 11:20", new)
    assert links(project) == [(id_of(old), id_of(new), "declared")]
    hits = project.search("what renders the invoice PDFs via pdfkit", learn=False, top_k=3)
    assert [h.id for h in hits[:2]] == [id_of(new), id_of(old)]


def test_a_weak_pair_promotes_a_newer_memory_but_not_over_the_answer_a_link_vouches_for(project):
    """A pair detection scored below the link threshold (0.2) still ranks the newer memory
    first for a question about the present (``present.order``), but a later note that
    only mentions the subject does not displace the answer a link vouches for."""
    clash = "Local Postgres listens on host port 5433 in the dev compose file."
    moved = "Postgres moved to host port 5434 because pgbouncer now owns 5433 in the dev compose."
    health = "The readyz health endpoint runs SELECT 1 against Postgres with a two second timeout."
    redis = "Local Redis listens on port 6379 in the dev compose file for the session cache."
    cache = "Session cache: 6380 from today, the Redis container shares the host with Sentinel."
    write(project.memory_dir / "2026-03-01.md", f"## 09:00 port clash\n{clash}\n## 09:30 redis\n{redis}\n")
    write(project.memory_dir / "2026-03-02.md",
          f"## 09:20 pgbouncer\n{moved}\n<!-- lethe supersedes={id_of(clash)[:8]} -->\n")
    write(project.memory_dir / "2026-03-04.md", f"## 14:45 health endpoints\n{health}\n## 15:00 cache port\n{cache}\n")
    project.index()
    con = project.con
    con.execute("DELETE FROM revisions WHERE origin = 'detected'")
    con.execute("DELETE FROM revision_candidates")
    con.execute("INSERT INTO revision_candidates VALUES (?, ?, 0.2), (?, ?, 0.2)",
                [id_of(moved), id_of(health), id_of(redis), id_of(cache)])
    assert links(project) == [(id_of(clash), id_of(moved), "declared")]
    ids = lambda q: [h.id for h in project.search(q, learn=False, top_k=5)]
    # the health note mentions Postgres, scores far below the link's answer: no promotion over it
    got = ids("which port does the local postgres use")
    assert got[0] == id_of(moved) and got.index(id_of(moved)) < got.index(id_of(clash))
    assert id_of(health) not in got[:1]
    # over a memory that supersedes nothing, the weak pair still puts the newer one first
    got = ids("which port does local redis listen on for the session cache")
    assert got.index(id_of(cache)) < got.index(id_of(redis))


def test_a_newer_note_comes_first_once_detection_scores_the_pair(project):
    """Two notes on one subject, twelve days apart (``present.order``): a question that finds
    both about as relevant gets the newer first whatever the pair scored (the order fitted on
    p94-p141 reads recency so; the one fitted on p01-p65 kept the judged order there); one
    worded like the older note keeps its order while detection scores the pair under 0.2
    (not read, or weak), and once detection scores the pair as a likely revision the newer
    comes first for both."""
    old = ("Client crash reports go to Unity Cloud Diagnostics: turn it on in the Services window, "
           "crashes show in the Unity dashboard.")
    new = "Client crash reports are sent to Sentry through sentry-unity 2.1; debug symbols are uploaded by the CI job."
    write(project.memory_dir / "2026-03-06.md", f"## 10:00 crash reporting\n{old}\n## 11:00 build machine\n"
          "The macOS builds run on the Mac mini in the office, Jenkins agent mac-01.\n")
    write(project.memory_dir / "2026-03-18.md", f"## 09:00 crash reporting\n{new}\n## 10:00 lobby\nThe lobby shows at most 8 rooms per page.\n")
    project.index()
    project.con.execute("DELETE FROM revisions WHERE origin = 'detected'")
    side_by_side = "where do crash reports from the client go?"
    old_wording = "how do I turn on Cloud Diagnostics in the Services window?"

    def first(score, q):
        got = ranked_under_pair(project, (id_of(old), id_of(new)), score, q, {id_of(old): "old", id_of(new): "new"}, 4)
        assert len(got) == 2
        return got[0]

    got = [(first(x, side_by_side), first(x, old_wording)) for x in (0.005, 0.03, 0.2, 0.9)]
    assert got == [("new", "old"), ("new", "old"), ("new", "new"), ("new", "new")]


def test_chat_lines_keep_the_questions_order_whatever_their_pair_scored(project):
    """Two chat lines of one speaker weeks apart, about equally relevant, among other chat
    lines: a list of conversation turns keeps the judged order (``present.conversation``)
    at any pair score under the link threshold; only a link puts the later line first."""
    old = "Maya: crash reports from the game client go to Unity Cloud Diagnostics, in the Unity dashboard."
    new = "Maya: crash reports from the game client are sent to Sentry, with symbols from CI."
    fill = ["Omar: the macOS builds run on the Mac mini in the office.", "Omar: the lobby shows 8 rooms per page.",
            "Omar: matchmaking waits 30 seconds before widening the skill range.",
            "Omar: the art team exports textures at 2k.", "Omar: nightly builds upload to the R2 bucket.",
            "Omar: the tutorial has five steps."]
    write(project.memory_dir / "2026-03-06.md",
          f"## 10:00 chat\n{old}\n" + "".join(f"## 11:0{i} chat\n{t}\n" for i, t in enumerate(fill[:3])))
    write(project.memory_dir / "2026-03-18.md",
          f"## 09:00 chat\n{new}\n" + "".join(f"## 10:0{i} chat\n{t}\n" for i, t in enumerate(fill[3:])))
    project.index()
    project.con.execute("DELETE FROM revisions WHERE origin = 'detected'")

    def order(score):
        return ranked_under_pair(project, (id_of(old), id_of(new)), score, "where do crash reports from the game client go?",
                                 {id_of(old): "old", id_of(new): "new"}, 4)

    assert [order(0.0), order(0.03), order(0.3)] == [["old", "new"], ["old", "new"], ["old", "new"]]
    project.con.execute("INSERT INTO revisions (old_id, new_id, origin, reason, score) VALUES (?, ?, 'declared', 't', 1)",
                        [id_of(old), id_of(new)])
    assert order(0.3) == ["new", "old"]


def test_of_two_versions_that_supersede_one_memory_the_later_comes_first_on_a_strong_pair(project):
    """A -> B and A -> C (both supersede A: a firmware updated, then rolled back to the first
    version): both rank above A; the question finds B far more relevant, and B stays first
    while detection scores B, C as a pair under 0.2, and at 0.6 too when that pair is no
    link (a person unlinked it: ``distinct``); at 0.9 C comes first. (The order fitted on
    p01-p65 put C first at 0.6 already; the one fitted on p94-p141 trusts the judge more
    against a pair that is no link.)"""
    a = "All MC-2 motor boards run firmware 2.3.1, flashed with tarn-fw from a dock."
    b = "Kofi flashed MC-2 firmware 2.4.0 onto all motor boards in tonight's deploy window."
    c = "Encoder scaling broke on the new build: every board is back on 2.3.1 as of tonight."
    write(project.memory_dir / "2026-03-06.md", f"## 10:00 motor firmware\n{a}\n")
    write(project.memory_dir / "2026-03-19.md",
          f"## 22:00 firmware update\n{b}\n<!-- lethe supersedes={id_of(a)[:8]} -->\n")
    write(project.memory_dir / "2026-03-24.md",
          f"## 23:00 rolled back\n{c}\n<!-- lethe supersedes={id_of(a)[:8]} -->\n")
    project.index()
    project.con.execute("DELETE FROM revisions WHERE origin = 'detected'")
    assert {(o, n) for o, n, _ in links(project)} == {(id_of(a), id_of(b)), (id_of(a), id_of(c))}

    def order(score):
        return ranked_under_pair(project, (id_of(b), id_of(c)), score,
                                 "which firmware is on the motor boards after Kofi's deploy window flash",
                                 {id_of(a): "a", id_of(b): "b", id_of(c): "c"})

    assert [order(x) for x in (0.0, 0.2, 0.6, 0.9)] == [["b", "c", "a"]] * 3 + [["c", "b", "a"]]


def test_a_marker_declares_a_link_and_a_rebuild_from_the_markdown_restores_it(project):
    a, b = "We deploy on Tuesdays and Thursdays.", "Deploys happen on every merge to main."
    write(project.memory_dir / "2026-02-01.md", f"## 09:00 deploys\n{a}\n")
    f = write(project.memory_dir / "2026-03-30.md",
              f"## 10:00 continuous deploys\n<!-- lethe supersedes={id_of(a)} -->\n{b}\n")
    project.index()
    assert links(project) == [(id_of(a), id_of(b), "declared")]
    assert project.con.execute("SELECT text FROM entries WHERE id = ?", [id_of(b)]).fetchone()[0] == b
    # the index is derived: delete it and the link comes back from the markdown
    project.close()
    db = project.db_path
    os.remove(db)
    project.index()
    assert links(project) == [(id_of(a), id_of(b), "declared")]
    assert f.read_text().count("supersedes=") == 1


def test_bad_markers_change_nothing_but_say_why(project):
    a, b = "Owner of billing is Alice.", "Owner of billing is Bob."
    write(project.memory_dir / "2026-01-01.md",
          f"## 09:00 owner\n<!-- lethe supersedes={id_of(b)} distinct=zz -->\n{a}\n")
    write(project.memory_dir / "2026-02-01.md",
          f"## 09:00 owner\n<!-- lethe supersedes={id_of(a)} -->\n{b}\n## 10:00 x\n<!-- lethe supersedes=ffffffffffffffff -->\nSomething else entirely.\n")
    r = project.index()
    cycle = [w for w in r.warnings if "cycle" in w]
    missing = [w for w in r.warnings if "names no memory" in w]
    assert len(cycle) == 1 and "2026-01-01.md" in cycle[0]       # the marker against the dates loses
    assert len(missing) == 2 and any("ffffffffffffffff" in w for w in missing) and any("distinct=zz" in w for w in missing)
    assert all("\n" not in w for w in r.warnings)
    assert links(project) == [(id_of(a), id_of(b), "declared")]
    assert project.con.execute("SELECT count(*) FROM entries").fetchone()[0] == 3


def test_add_supersedes_and_its_checks(project):
    first = project.add_memory("Default branch is master.", when=datetime(2026, 1, 5, 9, 0))
    second = project.add_memory("Default branch is main; master is frozen.", supersedes=[first.id[:6]],
                                when=datetime(2026, 2, 1, 9, 0))
    assert second.status == "revises" and second.revises == (first.id,)
    assert (first.id, second.id, "declared") in links(project)
    text = (project.memory_dir / "2026-02-01.md").read_text()
    assert f"supersedes={first.id}" in text and "source=add" in text
    files = {p: p.read_bytes() for p in project.memory_dir.glob("*.md")}
    from lethe_sql.errors import UsageError

    with pytest.raises(UsageError, match="names no memory"):
        project.add_memory("Something new.", supersedes=["abcdef123456"])
    with pytest.raises(UsageError, match="revision cycle"):
        project.add_memory("Default branch is master.", supersedes=[second.id])
    assert {p: p.read_bytes() for p in project.memory_dir.glob("*.md")} == files   # nothing written


def test_unlink_a_detected_link_for_good_and_relink_it(project):
    write(project.memory_dir / "2026-03-01.md", f"## 09:00 db port\n{OLD}\n")
    f = write(project.memory_dir / "2026-03-09.md", f"## 10:30 db port\n{NEW}\n")
    project.index()
    assert links(project) == [(id_of(OLD), id_of(NEW), "detected")]
    changed = project.unlink(id_of(NEW)[:6], id_of(OLD))
    assert changed == [".lethe/memory/2026-03-09.md"]
    assert f"distinct={id_of(OLD)}" in f.read_text() and NEW in f.read_text()
    assert links(project) == []
    assert project.index(rebuild=True) and links(project) == []          # a re-detection respects it
    assert [h.id for h in project.search("which port does staging postgres use now", learn=False)][:2] != []
    project.link(id_of(NEW), id_of(OLD))
    assert links(project) == [(id_of(OLD), id_of(NEW), "declared")]
    project.unlink(id_of(OLD), id_of(NEW))                                # either order
    assert links(project) == [] and "supersedes=" not in f.read_text()


def test_revisions_of_a_memory_is_its_chain(project):
    texts = ["Upload limit is 10 MB.", "Upload limit is 25 MB.", "Upload limit is 50 MB."]
    for d, t in zip(("2026-01-01", "2026-02-01", "2026-03-01"), texts):
        write(project.memory_dir / f"{d}.md", f"## 09:00 uploads\n{t}\n")
    project.index()
    chain = project.revisions(id_of(texts[1])[:6])
    assert [c["id"] for c in chain] == [id_of(t) for t in texts]
    assert [c["current"] for c in chain] == [False, False, True]
    assert {s["id"] for s in chain[2]["supersedes"]} >= {id_of(texts[1])}


def test_session_start_never_injects_a_superseded_memory(project):
    from lethe_sql.agents.hooks import recent_context

    write(project.memory_dir / "2026-03-01.md", f"## 09:00 db port\n{OLD}\n")
    write(project.memory_dir / "2026-03-09.md", f"## 10:30 db port\n{NEW}\n## 11:00 declared\n"
          f"<!-- lethe supersedes={id_of('Lunch is at noon.')} -->\nLunch is at one now.\n")
    write(project.memory_dir / "2026-03-02.md", "## 12:00 lunch\nLunch is at noon.\n")
    ctx, _ = recent_context(project.root, 600)
    assert "5433" in ctx and "noon" not in ctx    # nothing indexed yet: the markers are known already
    project.index()
    ctx, _ = recent_context(project.root, 600)
    assert "5434" in ctx and "5433" not in ctx and "noon" not in ctx and "at one now" in ctx


# -- the CLI --------------------------------------------------------------------------


def run(args, env, check=True):
    p = subprocess.run([LETHE, *args], env=env, capture_output=True, text=True, timeout=300)
    if check and p.returncode != 0:
        raise AssertionError(f"lethe {args} exited {p.returncode}: {p.stderr}")
    return p


def test_cli_search_explain_and_revisions_show_what_superseded_what(tmp_path, cli_env):
    root = tmp_path / "p"
    mem = root / ".lethe" / "memory"
    write(mem / "2026-03-01.md", f"## 09:00 db port\n{OLD}\n")
    write(mem / "2026-03-09.md", f"## 10:30 db port\n{NEW}\n")
    r = ["--root", str(root)]
    assert "1 revision(s) detected" in run([*r, "index"], cli_env).stdout
    hits = json.loads(run([*r, "search", "which port does staging postgres use now", "--json"], cli_env).stdout)
    assert [h["id"] for h in hits[:2]] == [id_of(NEW), id_of(OLD)]
    assert hits[1]["superseded_by"] == [id_of(NEW)] and hits[1]["superseded_at"] == "2026-03-09T10:30:00"
    text = run([*r, "search", "which port does staging postgres use now"], cli_env).stdout
    assert f"(superseded on 2026-03-09 by {id_of(NEW)}: history, not the current fact)" in text
    ex = json.loads(run([*r, "explain", "which port does staging postgres use now", "--json"], cli_env).stdout)
    assert ex["present"] is True and ex["results"][1]["superseded_by"] == [id_of(NEW)] and ex["asks_time"] == ""
    head = run([*r, "explain", "how long has staging postgres used this port?"], cli_env).stdout.splitlines()[0]
    assert head.endswith("asks for: a duration (how long)")
    out = run([*r, "revisions", id_of(OLD)[:8]], cli_env).stdout
    assert out.index(id_of(OLD)) < out.index(id_of(NEW)) and "superseded" in out and "current" in out
    bad = run([*r, "revisions", "ffffffff"], cli_env, check=False)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "no memory with id" in bad.stderr
    un = json.loads(run([*r, "revisions", id_of(NEW), "--unlink", id_of(OLD), "--json"], cli_env).stdout)
    assert un["changed_files"] == [".lethe/memory/2026-03-09.md"] and len(un["versions"]) == 1
    con = duckdb.connect(str(root / ".lethe" / "index" / "lethe.duckdb"), read_only=True)
    assert con.execute("SELECT count(*) FROM revisions").fetchone()[0] == 0
    con.close()


def test_a_memory_dated_in_the_future_is_indexed_with_one_warning_and_never_detected_as_a_revision(project):
    write(project.memory_dir / "2026-01-05.md", f"# 2026-01-05\n\n## 09:00 db\n{OLD}\n")
    write(project.memory_dir / "2099-01-05.md", f"# 2099-01-05\n\n## 09:00 db\n{NEW}\n")
    write(project.memory_dir / "notes.md", "## db note\nStaging Postgres listens on port 5435.\n")  # no date at all
    r = project.index()
    future = [w for w in r.warnings if "in the future" in w]
    assert len(future) == 1 and "2099-01-05.md" in future[0] and "\n" not in future[0]
    assert project.con.execute("SELECT count(*) FROM entries").fetchone()[0] == 3   # every memory indexed
    assert links(project) == []   # neither the future nor the undated memory is ordered against the old one


def test_neighbour_pairs_are_the_nearest_older_memories_with_ties_by_position():
    import numpy as np

    from lethe_sql.revisions import NEIGHBOURS, neighbour_pairs

    assert NEIGHBOURS == 10
    day = np.datetime64("2026-03-01T00:00", "us")

    def unit(v):
        v = np.asarray(v, dtype=np.float32)
        return v / np.linalg.norm(v)

    # row 0 is new (the newest); rows 1-12 are older, all at one cosine to it (an exact
    # tie); row 13 is older and nearer; row 14 is older but below the cosine floor; row 15
    # has no date; row 16 is newer than row 0 and outside the pass, and row 0 is nearer to
    # it than any older memory it has, so row 0 joins its nearest older memories.
    vecs = [unit([1, 0, 0])] + [unit([0.8, 0.6, 0])] * 12 + [unit([0.95, 0.31, 0])]
    vecs += [unit([0, 0, 1]), unit([1, 0, 0]), unit([0.99, 0.1, 0])]
    mat = np.stack(vecs)
    when = np.array([day + np.timedelta64(20, "D")] + [day + np.timedelta64(i, "D") for i in range(1, 14)]
                    + [day, np.datetime64("9999-12-31", "us"), day + np.timedelta64(30, "D")], dtype="datetime64[us]")
    known = np.ones(len(vecs), bool)
    known[15] = False
    outside = np.ones(len(vecs), bool)
    outside[0] = False
    pairs = neighbour_pairs(mat, when, known, [0], outside)
    older = [(o, rank) for o, n, _, rank in pairs if n == 0]
    assert older == [(13, 0)] + [(i, i) for i in range(1, 10)]  # the nearest, then the tie by position
    assert [(o, n, rank) for o, n, _, rank in pairs if n != 0] == [(0, 16, 0)]
    cos = {(o, n): c for o, n, c, _ in pairs}
    assert cos[(13, 0)] == pytest.approx(0.95 / np.hypot(0.95, 0.31), abs=1e-6)


def test_a_question_naming_a_thing_is_not_a_question_naming_the_old_value():
    """Only an identifier with a digit names the older memory apart from the newer one."""
    from lethe_sql.revisions import named_apart

    old = "larkspur-web runs on Next.js 14 with the pages router."
    new = "Upgraded the storefront to Next 15 and the app router."
    assert not named_apart("Which Next.js release is the storefront on?", old, new)
    assert named_apart("Is the storefront still on 14?", old, new)
    assert named_apart("is the worker pool still on pg-stg-1?", "Worker pool is pg-stg-1.", "Worker pool moved to pg-stg-2.")
    assert named_apart("where is fact number 5123", "fact number 5123 about service s3", "fact number 5124 about service s3")
    # a name with a digit that the newer note has no other value for names the thing
    old, new = "Raw zips are archived in R2 bucket feed-raw.", "The archive bucket is feed-archive now."
    assert not named_apart("Which R2 bucket archives the raw zips?", old, new)
    assert named_apart("Is it still bucket feed-raw-2?", "Bucket is feed-raw-2.", "Bucket is feed-raw-3 now.")


def test_token_cover_is_the_lesser_mean_best_match_of_two_memories_tokens():
    import numpy as np

    from lethe_sql.revisions import token_cover

    a = np.array([[1.0, 0.0], [0.0, 1.0]])
    b = np.array([[1.0, 0.0]])
    assert token_cover(a, b) == pytest.approx(0.5)  # a's second token finds nothing in b; b is covered
    assert token_cover(b, a) == pytest.approx(0.5)
    c = np.array([[0.6, 0.8], [1.0, 0.0]])
    assert token_cover(a, c) == pytest.approx(min((1.0 + 0.8) / 2, (0.8 + 1.0) / 2))
    # weighted (pair_covers passes each token's IDF): a rare uncovered token weighs more
    assert token_cover(a, b, np.array([1.0, 3.0]), np.array([1.0])) == pytest.approx(0.25)


def test_a_pair_whose_tokens_cover_each_other_scores_higher():
    from lethe_sql.revisions import LINK_AT, probability, pair_features

    df = {"queue": 2, "retries": 2, "worker": 2}
    old = M("Worker retries failed jobs three times, then parks them.", datetime(2026, 3, 1), "10:00 retries")
    new = M("Jobs that fail are now retried five times before they are parked.", datetime(2026, 4, 1), "09:00 retry policy")
    low, high = (probability(pair_features(old, new, 0.7, 0, df, 50, cover)) for cover in (0.35, 0.6))
    assert low < LINK_AT < high


def test_length_features_count_the_words_of_each_note():
    import math

    from lethe_sql.revisions import FEATURES, pair_features

    old = M("Upload receipts go out through Postmark with the server token in POSTMARK_TOKEN.", datetime(2026, 6, 1))
    new = M("Receipts fine on Resend after two weeks.", datetime(2026, 6, 20))
    f = dict(zip(FEATURES, pair_features(old, new, 0.6, 0, {}, 40)))
    assert f["new_length"] == pytest.approx(math.log(8) / 5)            # 7 words
    assert f["length_ratio"] == pytest.approx(math.log(8 / 13) / 2)     # against 12


def test_a_short_note_after_a_long_one_scores_below_a_restatement_of_its_length():
    from lethe_sql.revisions import pair_features, probability

    df = {"receipts": 3, "resend": 2, "postmark": 2, "token": 2}
    old = M("Upload receipts go out through Postmark with the server token in POSTMARK_TOKEN, "
            "from logs@example.org, one email per accepted log.", datetime(2026, 6, 1), "10:00 Upload receipts")
    said = "Receipts go through Resend now, key in RESEND_API_KEY."
    short = M(said, datetime(2026, 6, 20), "09:00 Receipts via Resend")
    # the same words, as long as the note it follows: only the two length features differ
    long = M(" ".join([said] * 3), datetime(2026, 6, 20), "09:00 Receipts via Resend")
    p_short, p_long = (probability(pair_features(old, m, 0.7, 0, df, 60, 0.5)) for m in (short, long))
    assert p_short < p_long


@pytest.mark.parametrize("heading,text,report", [
    ("09:00 Resend", "A week on Resend: 212 receipts sent, no bounces. Nothing to change.", True),
    ("09:00 Timings", "Three nights since the commit-interval change: the job took 51, 49 and 50 min.", True),
    ("09:00 Mail", "FYI: three weeks of transactional mail through Brevo: 0.4% bounces.", True),
    ("09:00 MySQL 8.4 a month on", "Slow-query log flat, settlement still takes 50 s.", True),
    ("09:00 Waiver PDFs, one week in", "1,140 waivers rendered, p95 180 ms.", True),
    ("09:00 85% first week", "86 of 87 buses made it by pull-out.", True),
    ("09:00 Retention", "Two weeks of logs are kept now.", False),                 # a setting, no report
    ("09:00 Retention", "30 days of backups: the bucket keeps them in Coldline.", False),  # a span in digits
    ("09:00 Retention: one month", "Raw readings are dropped after a month.", False),
    ("09:00 Token lifetime", "Access tokens now last 15 minutes: the tablets kept logging out.", False),
])
def test_reports_elapsed_is_a_note_that_opens_with_how_long_something_ran(heading, text, report):
    from lethe_sql.revisions import reports_elapsed

    assert reports_elapsed(M(text, datetime(2026, 6, 9), heading)) is report


@pytest.mark.parametrize("heading,text,announces", [
    ("09:00 First night on the new timetable", "Every bus made pull-out; the planner held 3.18 MW.", False),
    ("09:00 Backups", "After the migration the dump takes 4 minutes; the cutover is done.", False),
    ("09:00 Payments", "Since the change the run has finished by 07:20 every Tuesday.", False),
    ("09:00 Payments move to Tuesday", "Graham wants the run off Friday.", True),
    ("09:00 Paging", "Critical alerts page through OnCall instead of PagerDuty.", True),
    ("09:00 Broker", "We migrated the queue to SQS on Monday.", True),
    ("09:00 Port", "Changed the staging port to 5434.", True),
])
def test_a_change_named_as_a_thing_or_event_announces_none(heading, text, announces):
    """"the new timetable", "after the migration", "since the change", "done": a note that
    reports on a change names it so as often as one that makes it; a verb of change or
    "now" / "instead" announces one."""
    from lethe_sql.revisions import announces_change

    assert announces_change(M(text, datetime(2026, 6, 9), heading)) is announces


@pytest.mark.parametrize("text,how_to", [
    ("To roll back: in Argo CD open turndown-api-prod, History and Rollback.", True),
    ("To add a page: create web/views/foo.templ, run templ generate.", True),
    ("  To re-file a failed movement: ringside-cli bcms refile --lot 41.", True),
    ("How to ship now: merge to main and CI runs `kamal deploy`.", True),
    ("How to tell whose sign-off week it is: Certificates > Pending shows it.", True),
    ("How we deploy now: CI runs `kamal deploy` on main.", False),     # a statement of how things are
    ("Deploys go through Argo CD now: GitHub Actions only builds.", False),
    ("Moved to Resend to cut costs: same from address.", False),     # "to" not at the opening
    ("To be safe we keep 7 days of logs.", False),                    # no colon: a statement
])
def test_instructs_is_a_note_that_opens_as_a_how_to(text, how_to):
    from lethe_sql.revisions import instructs

    assert instructs(M(text, datetime(2026, 6, 9))) is how_to


@pytest.mark.parametrize("current,follow_up,reason", [
    (("Upload receipts go out through Resend now (RESEND_API_KEY); Postmark is closed.", "10:00 Receipts via Resend"),
     ("A week on Resend: 212 receipts sent, no bounces, DKIM and SPF pass. Nothing to change.", "09:00 Resend, a week in"),
     "reports how a setting went, not a new version"),
    (("Prod deploys go through Argo CD now: app turndown-api-prod tracks the deploy repo.", "10:00 Argo CD"),
     ("To roll back: in Argo CD open turndown-api-prod, History and Rollback, pick the previous sync.",
      "09:00 Rolling back"),
     "a how-to that uses the setting, not a new version"),
])
def test_a_follow_up_that_uses_the_current_setting_is_no_new_version(current, follow_up, reason):
    from lethe_sql.revisions import classify

    df = {"resend": 2, "receipts": 2, "postmark": 1, "dkim": 1, "argo": 2, "rollback": 2, "prod": 3}
    old = M(current[0], datetime(2026, 5, 4, 10), current[1])
    new = M(follow_up[0], datetime(2026, 5, 12, 9), follow_up[1])
    v = classify(old, new, 0.8, 0, df, 40, 0.6)
    assert (v.revision, v.score, v.reason) == (False, 0.0, reason)


def test_pair_covers_reads_the_stored_token_vectors(project):
    from lethe_sql.revisions import pair_covers

    a, b, c = ("The worker retries failed jobs three times.", "Failed jobs are retried five times by the worker.",
               "Lunch is at noon on Fridays.")
    for t in (a, b, c):
        project.add(t)
    ia, ib, ic = (id_of(t) for t in (a, b, c))
    got = pair_covers(project.con, [(ia, ib), (ia, ic), (ia, "0" * 16)])
    assert set(got) == {(ia, ib), (ia, ic)}  # an id without token vectors has no cover
    assert 0 < got[(ia, ic)] < got[(ia, ib)] <= 1



def test_the_model_reads_each_feature_and_the_product_of_each_two():
    """``model_inputs``: the features in order, then f[i] * f[j] for i < j; the shipped
    constants (with and without ``token_cover``) have one weight per input."""
    from lethe_sql import revisions as R

    assert R.model_inputs([1.0, 2.0, 3.0]) == [1.0, 2.0, 3.0, 2.0, 3.0, 6.0]
    n = len(R.FEATURES)
    assert len(R._WEIGHTS) == len(R._MEAN) == len(R._SD) == n + n * (n - 1) // 2
    assert len(R._NO_COVER[2]) == (n - 1) + (n - 1) * (n - 2) // 2
