"""The terminal UI (`lethe tui`), driven by Textual's pilot at 80x24 against real stores:
real DuckDB files, the real FTS extension and the real embedder."""

import asyncio
import os
import select
import subprocess
import sys
import textwrap
from datetime import date, datetime

import duckdb
import pytest

from conftest import BIN, write

LETHE = str(BIN / "lethe")
OLD = "Staging Postgres listens on port 5433."
NEW = "Staging Postgres listens on port 5434."
DEPLOYS = "We deploy on Tuesdays and Thursdays."
CONTINUOUS = "Deploys happen on every merge to main."
LUNCH = "Team lunch is at noon on Fridays in the big room."


def id_of(text):
    from lethe_sql.markdown import content_id

    return content_id(text)


@pytest.fixture()
def mem(project):
    """A project with a detected revision (5433 -> 5434), two memories about deploys and one
    memory lethe wrote (`store.add`); indexed, then closed: the UI opens what it needs."""
    write(project.memory_dir / "2026-03-01.md", f"# 2026-03-01\n## 09:00 db port\n{OLD}\n## 10:00 deploys\n{DEPLOYS}\n")
    write(project.memory_dir / "2026-03-09.md", f"## 10:30 db port\n{NEW}\n")
    write(project.memory_dir / "2026-03-20.md", f"## 09:00 continuous deploys\n{CONTINUOUS}\n")
    report = project.index()
    assert report.revisions_detected == 1
    project.add(LUNCH, when=datetime(2026, 3, 12, 12, 0))
    project.close()
    return project


def make_app(store, embedder, **kw):
    from lethe_sql.tui import LetheApp
    from lethe_sql.tui_data import Backend

    return LetheApp(Backend(store.root, embedder=embedder), **kw)


def drive(app, scenario, size=(80, 24)):
    """Run ``scenario(app, pilot)`` in the app, headless, once the first listing is shown."""

    async def go():
        async with app.run_test(size=size) as pilot:
            await settle(app, pilot)
            await scenario(app, pilot)

    asyncio.run(go())


async def settle(app, pilot):
    await app.settle()
    await pilot.pause()


async def type_query(app, pilot, text):
    """Clear the search box and type ``text`` into it (empty: the recent memories)."""
    box = app.query_one("#query")
    box.focus()
    if box.value:
        await pilot.press("escape")
    await pilot.press(*text)
    await settle(app, pilot)


def shown(app):
    """The results list as rendered: one string per option."""
    opts = app.query_one("#results")
    return [str(opts.get_option_at_index(i).prompt) for i in range(opts.option_count)]


def text_of(widget):
    """What a Static shows, as plain text (a Rich table rendered without wrapping)."""
    import io

    from rich.console import Console

    content = widget.content
    if isinstance(content, str):
        return content
    console = Console(width=300, file=io.StringIO(), record=True, color_system=None)
    console.print(content)
    return "\n".join(line.rstrip() for line in console.export_text().splitlines())


def db_rows(store, sql, params=()):
    con = duckdb.connect(str(store.db_path), read_only=True)
    try:
        return con.execute(sql, list(params)).fetchall()
    finally:
        con.close()


# -- searching -------------------------------------------------------------------------


def test_search_as_you_type_orders_results_and_marks_the_superseded_one(mem, embedder):
    app = make_app(mem, embedder)
    before = db_rows(mem, "SELECT value FROM meta WHERE key = 'search_step'")

    async def scenario(app, pilot):
        assert app.query_one("#results").region.height >= 12        # 80x24 leaves room for the list
        await type_query(app, pilot, "which port does staging postgres use now?")
        rows = app.listing.rows
        assert [r.id for r in rows[:2]] == [id_of(NEW), id_of(OLD)]
        assert rows[0].superseded_by == () and rows[1].superseded_by == (id_of(NEW),)
        assert rows[1].superseded_at == datetime(2026, 3, 9, 10, 30)
        lines = shown(app)
        assert lines[0].startswith(" 1 2026-03-09 10:30  2026-03-09.md › 10:30 db port") and "superseded" not in lines[0]
        assert lines[1].startswith(" 2 2026-03-01 09:00  2026-03-01.md › 09:00 db port [superseded]")
        assert f"superseded 2026-03-09 by {id_of(NEW)[:8]}" in lines[1] and "Staging Postgres listens" in lines[1]
        assert app.message == f"{len(rows)} results"
        # idle, the UI holds no connection: another process could write the index now
        con = duckdb.connect(str(mem.db_path))
        con.close()

    drive(app, scenario)
    # the searches learned nothing
    assert db_rows(mem, "SELECT value FROM meta WHERE key = 'search_step'") == before
    assert db_rows(mem, "SELECT count(*) FROM query_log") == [(0,)]


def test_typing_is_debounced_and_enter_searches_at_once(mem, embedder):
    app = make_app(mem, embedder)

    async def scenario(app, pilot):
        first = app.searches
        app.debounce_s = 600.0            # no timer fires during this test: only Enter searches
        app.query_one("#query").focus()
        await pilot.press(*"staging postgres")
        assert app.searches == first and app.busy          # typed, not searched yet
        await pilot.press("enter")
        await settle(app, pilot)
        assert app.searches == first + 1
        assert app.listing.query == "staging postgres" and app.listing.rows
        assert app.focused is app.query_one("#results")

    drive(app, scenario)


def test_navigate_open_a_memory_and_explain_it(mem, embedder):
    from lethe_sql.tui import ExplainScreen, MemoryScreen

    app = make_app(mem, embedder, query="which port does staging postgres use now?")

    async def scenario(app, pilot):
        assert [r.id for r in app.listing.rows[:2]] == [id_of(NEW), id_of(OLD)]
        await pilot.press("down")                       # from the box to the results
        assert app.focused is app.query_one("#results") and app.current_row().id == id_of(NEW)
        await pilot.press("down")
        assert app.current_row().id == id_of(OLD)
        await pilot.press("enter")
        await settle(app, pilot)
        assert isinstance(app.screen, MemoryScreen)
        detail = text_of(app.screen.query_one("#detail"))
        assert OLD in detail and "## 09:00 db port" in detail
        assert str(mem.memory_dir / "2026-03-01.md") in detail
        assert f"superseded by {id_of(NEW)}" in detail
        assert f"superseded {id_of(OLD)[:8]}" in detail and f"current    {id_of(NEW)[:8]}" in detail
        assert f"supersedes {id_of(OLD)[:8]} (detected" in detail

        await pilot.press("e")
        assert isinstance(app.screen, ExplainScreen)
        stages = text_of(app.screen.query_one("#stages"))
        for stage in ("bm25", "ctx bm25", "dense", "fused", "suppression", "pool rank", "judge", "final"):
            assert stage in stages
        table = app.screen.query_one("#all")
        assert table.row_count == len(app.listing.rows)
        assert table.cursor_row == 1                      # the memory explained, among all results
        assert table.get_row_at(1)[0] == "2" and id_of(OLD)[:8] in table.get_row_at(1)[-1]
        assert text_of(app.screen.query_one("#explain-head")).startswith("late-interaction judge · ")
        await pilot.press("escape")
        await pilot.press("escape")
        assert not isinstance(app.screen, (MemoryScreen, ExplainScreen))
        await pilot.press("up", "up")                      # up on the first result: back to the box
        assert app.focused is app.query_one("#query")

    drive(app, scenario)


def test_a_warning_is_shown_on_the_message_line(mem, embedder):
    app = make_app(mem, embedder)

    async def scenario(app, pilot):
        app.query_one("#query").value = "staging postgres port " * 100        # over 2,000 characters
        await pilot.press("enter")
        await settle(app, pilot)
        assert app.listing.rows
        assert app.message.endswith("· warning: query of 2199 characters truncated to 2000")

    drive(app, scenario)


def test_explain_needs_a_search(mem, embedder):
    app = make_app(mem, embedder)

    async def scenario(app, pilot):
        assert app.listing.query == "" and app.listing.rows
        await pilot.press("down", "e")
        assert app.message.startswith("explain needs a search")

    drive(app, scenario)


# -- curating --------------------------------------------------------------------------


def test_forget_asks_then_the_memory_leaves_search_and_its_file_and_undo_brings_it_back(mem, embedder):
    from lethe_sql.tui import ConfirmScreen

    lunch_file = mem.memory_dir / "2026-03-12.md"
    assert LUNCH in lunch_file.read_text()
    app = make_app(mem, embedder, query="when is team lunch")

    async def scenario(app, pilot):
        assert app.listing.rows[0].id == id_of(LUNCH)
        await pilot.press("down", "f")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("n")                          # no: nothing changes
        await settle(app, pilot)
        assert LUNCH in lunch_file.read_text() and app.listing.rows[0].id == id_of(LUNCH)

        await pilot.press("f", "y")
        await settle(app, pilot)
        assert app.message.startswith(f"forgot 1 memory in 1 file(s): {id_of(LUNCH)[:8]}")
        assert id_of(LUNCH) not in [r.id for r in app.listing.rows]      # reflected at once
        assert LUNCH not in lunch_file.read_text()                      # lethe wrote it: removed
        await type_query(app, pilot, "")                                 # and not among the recent ones
        assert id_of(LUNCH) not in [r.id for r in app.listing.rows]

        await pilot.press("down", "u")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("y")
        await settle(app, pilot)
        assert app.message.startswith(f"restored 1 memory in 1 file(s): {id_of(LUNCH)[:8]}")
        assert LUNCH in lunch_file.read_text()
        assert id_of(LUNCH) in [r.id for r in app.listing.rows]
        await type_query(app, pilot, "when is team lunch")
        assert app.listing.rows[0].id == id_of(LUNCH)

    drive(app, scenario)


def test_mark_supersedes_then_remove_the_link(mem, embedder):
    from lethe_sql.tui import ConfirmScreen, PickScreen

    links = lambda: db_rows(mem, "SELECT old_id, new_id, origin FROM revisions ORDER BY 1, 2")  # noqa: E731
    assert (id_of(DEPLOYS), id_of(CONTINUOUS), "declared") not in links()
    app = make_app(mem, embedder, query="when do we deploy")

    async def scenario(app, pilot):
        ids = [r.id for r in app.listing.rows]
        assert id_of(CONTINUOUS) in ids and id_of(DEPLOYS) in ids
        await pilot.press("down", *["down"] * ids.index(id_of(CONTINUOUS)))
        assert app.current_row().id == id_of(CONTINUOUS)
        await pilot.press("s")
        assert isinstance(app.screen, PickScreen)
        choices = app.screen.query_one("#choices")
        at = [choices.get_option_at_index(i).id for i in range(choices.option_count)].index(id_of(DEPLOYS))
        choices.highlighted = at
        await pilot.press("enter")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("y")
        await settle(app, pilot)
        assert (id_of(DEPLOYS), id_of(CONTINUOUS), "declared") in links()
        assert f"supersedes={id_of(DEPLOYS)}" in (mem.memory_dir / "2026-03-20.md").read_text()
        old = next(r for r in app.listing.rows if r.id == id_of(DEPLOYS))
        assert old.superseded_by == (id_of(CONTINUOUS),)                  # reflected at once

        assert app.current_row().id == id_of(CONTINUOUS)
        await pilot.press("x")
        await settle(app, pilot)
        assert isinstance(app.screen, PickScreen)
        await pilot.press("enter", "y")
        await settle(app, pilot)
        assert (id_of(DEPLOYS), id_of(CONTINUOUS), "declared") not in links()
        assert "supersedes=" not in (mem.memory_dir / "2026-03-20.md").read_text()
        assert app.message.startswith(f"unlinked {id_of(CONTINUOUS)[:8]} and {id_of(DEPLOYS)[:8]}")

    drive(app, scenario)


def test_restore_an_apoptotic_memory(mem, embedder):
    from lethe_sql.tui import ConfirmScreen

    con = duckdb.connect(str(mem.db_path))
    con.execute("UPDATE entries SET tier = 'apoptotic' WHERE id = ?", [id_of(DEPLOYS)])
    con.close()
    app = make_app(mem, embedder, query="when do we deploy")

    async def scenario(app, pilot):
        assert id_of(DEPLOYS) not in [r.id for r in app.listing.rows]    # search leaves it out
        await pilot.press("down", "r")
        assert "is not apoptotic" in app.message
        await pilot.press("h")                                            # the hidden ones
        await settle(app, pilot)
        assert [r.id for r in app.listing.rows] == [id_of(DEPLOYS)] and "[hidden]" in shown(app)[0]
        await pilot.press("r")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("y")
        await settle(app, pilot)
        assert app.message == f"restored {id_of(DEPLOYS)[:8]}: back in search"
        assert app.listing.rows == []
        await pilot.press("h")
        await settle(app, pilot)
        assert id_of(DEPLOYS) in [r.id for r in app.listing.rows]

    drive(app, scenario)
    assert db_rows(mem, "SELECT tier FROM entries WHERE id = ?", [id_of(DEPLOYS)]) == [("naive",)]


def test_lethe_restore_brings_back_only_apoptotic_entries(mem, cli_env):
    con = duckdb.connect(str(mem.db_path))
    con.execute("UPDATE entries SET tier = 'apoptotic', affinity = 0.1 WHERE id = ?", [id_of(DEPLOYS)])
    con.close()
    p = subprocess.run([LETHE, "--root", str(mem.root), "restore", id_of(DEPLOYS), id_of(NEW)],
                       capture_output=True, text=True, env=cli_env)
    assert p.returncode == 0 and p.stdout.strip() == "restored 1 of 2 entries"
    assert db_rows(mem, "SELECT tier, affinity FROM entries WHERE id = ?", [id_of(DEPLOYS)]) == [("naive", 0.5)]


# -- scope, recent memories, dates, help --------------------------------------------------


def test_scope_this_project_all_projects_and_a_chosen_subset(mem, embedder, tmp_path, monkeypatch):
    from lethe_sql import MemoryStore
    from lethe_sql.registry import Registry
    from lethe_sql.tui import ExplainScreen, MemoryScreen, ProjectsScreen

    monkeypatch.setenv("LETHE_HOME", str(tmp_path / "home"))
    other = MemoryStore(tmp_path / "billing", embedder=embedder)
    write(other.memory_dir / "2026-03-03.md", "## 14:00 billing db\nThe billing Postgres listens on port 6432.\n")
    other.index()
    other.close()
    mine, _ = Registry().add(mem.root)
    theirs, _ = Registry().add(other.root)
    app = make_app(mem, embedder, query="postgres port")

    async def scenario(app, pilot):
        assert {r.project for r in app.listing.rows} == {None}
        assert "6432" not in "".join(r.text for r in app.listing.rows)
        await pilot.press("down", "a")
        await settle(app, pilot)
        assert app.scope.kind == "all" and "all projects" in text_of(app.query_one("#title"))
        assert {r.project for r in app.listing.rows} == {mine.slug, theirs.slug}
        billing = next(r for r in app.listing.rows if r.project == theirs.slug)
        assert "6432" in billing.text and str(other.root) == billing.root
        assert any(line.split(None, 3)[3].startswith(f"{theirs.slug}: 2026-03-03.md") for line in shown(app))
        at = app.listing.rows.index(billing)
        app.query_one("#results").highlighted = at
        await pilot.press("enter")                              # a memory of the other project
        await settle(app, pilot)
        assert isinstance(app.screen, MemoryScreen)
        assert str(other.memory_dir / "2026-03-03.md") in text_of(app.screen.query_one("#detail"))
        await pilot.press("escape", "e")                        # and how the union ranked it
        assert isinstance(app.screen, ExplainScreen) and app.screen.query_one("#all").cursor_row == at
        assert "· 2 project(s)" in text_of(app.screen.query_one("#explain-head"))
        await pilot.press("escape", "a")                        # no subset chosen yet: back here
        await settle(app, pilot)
        assert app.scope.kind == "project"

        await pilot.press("p")
        await settle(app, pilot)
        assert isinstance(app.screen, ProjectsScreen)
        chooser = app.screen.query_one("#chooser")
        chooser.highlighted = [p.slug for p in app.screen.projects].index(theirs.slug)
        await pilot.press("space", "enter")
        await settle(app, pilot)
        assert app.scope.kind == "subset" and app.scope.slugs == (theirs.slug,)
        assert {r.project for r in app.listing.rows} == {theirs.slug}
        assert f"projects: {theirs.slug}" in text_of(app.query_one("#title"))
        await pilot.press("a")                                  # subset -> this project
        await settle(app, pilot)
        assert app.scope.kind == "project"

    drive(app, scenario)


def test_empty_box_lists_recent_memories_and_a_date_filter_applies(mem, embedder):
    from lethe_sql.tui import PromptScreen

    app = make_app(mem, embedder)

    async def scenario(app, pilot):
        assert [r.id for r in app.listing.rows] == [id_of(CONTINUOUS), id_of(LUNCH), id_of(NEW), id_of(DEPLOYS),
                                                    id_of(OLD)]
        assert app.message == "5 recent memories"
        assert "[superseded]" in shown(app)[4] and shown(app)[0].startswith("   2026-03-20 09:00")
        await pilot.press("down", "d")
        assert isinstance(app.screen, PromptScreen)
        await pilot.press(*"2026-03-10", "enter")
        await settle(app, pilot)
        assert app.since == date(2026, 3, 10)
        assert [r.id for r in app.listing.rows] == [id_of(CONTINUOUS), id_of(LUNCH)]
        assert "since 2026-03-10" in text_of(app.query_one("#title"))
        await type_query(app, pilot, "staging postgres port")        # the filter applies to searches too
        assert app.listing.rows and {r.id for r in app.listing.rows} <= {id_of(CONTINUOUS), id_of(LUNCH)}
        await pilot.press("down", "d", *["backspace"] * 10, *"bad", "enter")
        await settle(app, pilot)
        assert app.message.startswith("error: a date filter is YYYY-MM-DD") and app.since == date(2026, 3, 10)
        await pilot.press("d", *["backspace"] * 10, "enter")     # empty: any date
        await settle(app, pilot)
        assert app.since is None and [r.id for r in app.listing.rows[:2]] == [id_of(NEW), id_of(OLD)]

    drive(app, scenario)


def test_help_on_question_mark_and_a_question_mark_in_the_box_is_text(mem, embedder):
    from lethe_sql.tui import HelpScreen

    app = make_app(mem, embedder)

    async def scenario(app, pilot):
        status = app.query_one("#status")
        await pilot.press("down", "question_mark")
        assert isinstance(app.screen, HelpScreen)
        keys = text_of(app.screen.query_one("Static"))
        for word in ("forget", "undo", "explain", "scope", "supersed", "restore", "date filter", "quit"):
            assert word in keys
        assert max(len(line) for line in keys.splitlines()) <= 70          # fits the 80-column dialog
        status.update("")
        app.action_refresh()                # results and status arriving under a dialog (a timer, ...)
        await settle(app, pilot)
        assert isinstance(app.screen, HelpScreen) and text_of(status).startswith("5 memories")
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)
        await pilot.press("escape")                                         # back to the box
        await pilot.press(*"why?")
        assert app.query_one("#query").value == "why?" and not isinstance(app.screen, HelpScreen)
        await pilot.press("f1")
        assert isinstance(app.screen, HelpScreen)

    drive(app, scenario)


def test_status_line_counts_entries_and_files_changed_since_the_index(mem, embedder):
    app = make_app(mem, embedder)

    async def scenario(app, pilot):
        status = text_of(app.query_one("#status"))
        assert status.startswith("5 memories · judge late-interaction · all-MiniLM-L6-v2")
        assert status.endswith("index up to date")
        write(mem.memory_dir / "2026-03-21.md", "## 10:00 new\nNot indexed yet.\n")
        await pilot.press("ctrl+r")
        await settle(app, pilot)
        assert "1 file(s) changed since the last index" in text_of(app.query_one("#status"))

    drive(app, scenario)


# -- what goes wrong, said in one line ------------------------------------------------------


def test_a_locked_index_is_a_message_not_a_crash(mem, embedder, monkeypatch):
    monkeypatch.setenv("LETHE_LOCK_TIMEOUT", "0.2")
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import duckdb, sys
            con = duckdb.connect({str(mem.db_path)!r})
            print('locked', flush=True)
            sys.stdin.read()
        """)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        app = make_app(mem, embedder, query="staging postgres port")

        async def scenario(app, pilot):
            assert app.message.startswith("error: ") and "is locked by" in app.message
            assert f"(PID {holder.pid})" in app.message
            assert text_of(app.query_one("#status")).startswith("status: ") and app.listing is None
            holder.stdin.close()
            holder.wait(timeout=30)
            await pilot.press("ctrl+r")                     # the writer is gone: it works again
            await settle(app, pilot)
            assert app.listing.rows and app.message.endswith("results")

        drive(app, scenario)
    finally:
        if holder.poll() is None:
            holder.stdin.close()
            holder.wait(timeout=30)


def test_a_missing_or_corrupt_index_is_a_message(project, embedder, tmp_path):
    write(project.memory_dir / "2026-03-01.md", f"## 09:00 db port\n{OLD}\n")
    project.close()
    assert not project.db_path.exists()
    app = make_app(project, embedder)

    async def missing(app, pilot):
        assert app.message == f"error: {project.root} has no index yet; run `lethe index` there first"
        await type_query(app, pilot, "port")
        assert app.message.startswith("error: ") and "has no index yet" in app.message
        assert app.query_one("#results").option_count == 0

    drive(app, missing)
    project.db_path.write_bytes(b"this is not a duckdb file" * 100)
    app = make_app(project, embedder, query="port")

    async def corrupt(app, pilot):
        # an error, or (where the store repairs a corrupt index) a warning: a message either way
        assert "not a readable DuckDB database" in app.message

    drive(app, corrupt)

    from lethe_sql.tui import LetheApp
    from lethe_sql.tui_data import Backend

    app = LetheApp(Backend(tmp_path / "nowhere", embedder=embedder))

    async def no_project(app, pilot):
        assert "has no .lethe folder; run `lethe init` there first" in app.message

    drive(app, no_project)


# -- pure pieces ----------------------------------------------------------------------------


def test_parse_since():
    from lethe_sql.errors import UsageError
    from lethe_sql.tui_data import parse_since

    today = date(2026, 3, 20)
    assert parse_since("", today) is None and parse_since("  ", today) is None
    assert parse_since("2026-03-01", today) == date(2026, 3, 1)
    assert parse_since("7d", today) == date(2026, 3, 13) and parse_since("2w", today) == date(2026, 3, 6)
    with pytest.raises(UsageError, match="YYYY-MM-DD"):
        parse_since("yesterday", today)


# -- the command ------------------------------------------------------------------------------


def test_lethe_alone_with_a_pipe_prints_the_help_and_tui_says_it_needs_a_terminal(tmp_path, cli_env):
    alone = subprocess.run([LETHE], stdin=subprocess.DEVNULL, capture_output=True, text=True, env=cli_env)
    helped = subprocess.run([LETHE, "--help"], capture_output=True, text=True, env=cli_env)
    assert alone.returncode == 2 and "Usage: lethe" in alone.stdout
    assert alone.stdout.rstrip("\n") == helped.stdout.rstrip("\n")
    assert " tui " in alone.stdout
    tui = subprocess.run([LETHE, "--root", str(tmp_path), "tui"], stdin=subprocess.DEVNULL, capture_output=True,
                         text=True, env=cli_env)
    assert tui.returncode == 2
    assert tui.stderr.strip().splitlines() == [
        "lethe: error: lethe tui needs a terminal; in scripts use `lethe search`, `lethe list` or `lethe explain`"]


@pytest.mark.slow
def test_lethe_alone_in_a_terminal_opens_the_ui(mem, cli_env):
    """A real process on a pseudo-terminal: `lethe` with no arguments draws the UI, ctrl+q quits."""
    import fcntl
    import pty
    import struct
    import termios
    import time

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    env = dict(cli_env, TERM="xterm-256color")
    proc = subprocess.Popen([LETHE], cwd=mem.root, stdin=slave, stdout=slave, stderr=slave, env=env,
                            start_new_session=True)
    os.close(slave)
    seen = b""
    deadline = time.monotonic() + 120
    try:
        while b"recent memories" not in seen and time.monotonic() < deadline and proc.poll() is None:
            ready, _, _ = select.select([master], [], [], 1.0)
            if ready:
                try:
                    seen += os.read(master, 65536)
                except OSError:
                    break
        assert b"recent memories" in seen, seen[-2000:]
        assert b"this project" in seen                       # the title line
        os.write(master, b"\x11")                            # ctrl+q
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
