"""``lethe tui`` (and ``lethe`` alone in a terminal): browse, search and curate memory.

A Textual app over ``tui_data.Backend``, which opens the index only for the moment it
needs it (read-only for reading, read-write for one curation). Every call runs in a
worker thread; its result is shown when it is still the latest one asked for. Errors
(``LetheError``: the index locked, missing, corrupt) are shown on the message line.

Imported only by the ``tui`` command: Textual is not loaded by other commands.
"""

from __future__ import annotations

import asyncio
import warnings
from datetime import date
from pathlib import Path
from typing import Callable

from rich.table import Table
from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import DataTable, Footer, Input, OptionList, SelectionList, Static
from textual.widgets.option_list import Option

from .errors import LetheError
from .tui_data import Backend, Listing, Row, Scope, parse_since

DEBOUNCE_S = 0.2

KEYS = """\
[b]Search box[/b]
  type        search as you type (learns nothing); empty box: recent
  down, enter go to the results           esc  clear the box
[b]Results[/b]
  up, down    move (pgup pgdn home end; up on the first: the box)
  enter       open: the whole text, its file, its revision chain
  e           explain the ranking, stage by stage
  f, u        forget it / undo the last forget (both ask first)
  s           mark it as superseding another memory (asks first)
  x           remove one of its revision links (asks first)
  r, h        restore an apoptotic memory (asks) / list hidden ones
  a, p        scope: this project, all, chosen / choose projects
  d           date filter: since YYYY-MM-DD, 7d, 2w
  /, esc      back to the search box      ctrl+r  refresh
[b]Anywhere[/b]
  ?, f1       this help    esc  close a screen    ctrl+q  quit"""


def _short(text: str | None, width: int) -> str:
    one = " ".join((text or "").split())
    return one if len(one) <= width else one[: max(width - 1, 0)] + "…"


def _when(row: Row) -> str:
    return f"{row.created_at:%Y-%m-%d %H:%M}" if row.created_at else "undated".ljust(16)


def _where(row: Row) -> str:
    name = Path(row.source).name if row.source else "?"
    where = f"{name} › {row.heading}" if row.heading else name
    return f"{row.project}: {where}" if row.project else where


def superseded_mark(row: Row) -> str:
    if not row.superseded_by:
        return ""
    when = f" {row.superseded_at:%Y-%m-%d}" if row.superseded_at else ""
    return f"superseded{when} by {', '.join(i[:8] for i in row.superseded_by)}"


def row_prompt(row: Row, width: int = 76) -> Text:
    """Two lines: rank, date, where, marks / the superseded note and the text."""
    head = Text()
    head.append(f"{row.rank:>2} " if row.rank else "   ", style="bold")
    head.append(_when(row), style="cyan")
    tag = " [hidden]" if row.apoptotic else (" [superseded]" if row.superseded_by else "")
    head.append("  " + _short(_where(row), width - 21 - len(tag)))
    if tag:
        head.append(tag, style="yellow" if row.superseded_by and not row.apoptotic else "red")
    body = Text("   ")
    mark = superseded_mark(row)
    if mark:
        body.append(mark + " · ", style="yellow")
    body.append(_short(row.text, width - 3 - len(mark) - (3 if mark else 0)), style="dim")
    return head + Text("\n") + body


# -- small screens ---------------------------------------------------------------------


class ConfirmScreen(ModalScreen[bool]):
    """A yes/no question: y confirms, n or esc cancels."""

    BINDINGS = [Binding("y", "answer(True)", "yes"), Binding("n", "answer(False)", "no"),
                Binding("escape", "answer(False)", "cancel")]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Static(self.question, id="question")
            yield Static("[b]y[/b] yes    [b]n[/b] / [b]esc[/b] no", classes="hint")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,question_mark,q,f1", "close", "close")]

    def compose(self) -> ComposeResult:
        with VerticalScroll(classes="dialog", id="help"):
            yield Static(KEYS)

    def action_close(self) -> None:
        self.dismiss(None)


class PromptScreen(ModalScreen["str | None"]):
    """One line of input: enter gives it, esc cancels."""

    BINDINGS = [Binding("escape", "cancel", "cancel")]

    def __init__(self, title: str, value: str = "") -> None:
        super().__init__()
        self.title_text, self.value = title, value

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Static(self.title_text)
            yield Input(value=self.value, id="prompt")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.dismiss(event.value)

    def action_cancel(self) -> None:
        self.dismiss(None)


class PickScreen(ModalScreen["str | None"]):
    """Pick one of ``choices`` (id, label), or type an id (``typed``): enter picks, esc cancels."""

    BINDINGS = [Binding("escape", "cancel", "cancel")]

    def __init__(self, title: str, choices: list[tuple[str, Text | str]], typed: bool = False) -> None:
        super().__init__()
        self.title_text, self.choices, self.typed = title, choices, typed

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog", id="pick"):
            yield Static(self.title_text)
            yield OptionList(*[Option(label, id=i) for i, label in self.choices], id="choices")
            if self.typed:
                yield Input(placeholder="or type an id (4+ hex digits) and press enter", id="typed")

    def on_mount(self) -> None:
        if not self.choices and self.typed:
            self.query_one("#typed", Input).focus()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self.dismiss(event.option.id)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        if event.value.strip():
            self.dismiss(event.value.strip())

    def action_cancel(self) -> None:
        self.dismiss(None)


class ProjectsScreen(ModalScreen["tuple[str, ...] | None"]):
    """Choose registered projects: space toggles, enter applies, esc cancels."""

    BINDINGS = [Binding("enter", "apply", "apply", priority=True), Binding("escape", "cancel", "cancel")]

    def __init__(self, projects: list, chosen: tuple[str, ...]) -> None:
        super().__init__()
        self.projects, self.chosen = projects, chosen

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog", id="projects"):
            yield Static("Search these projects ([b]space[/b] toggles, [b]enter[/b] applies, [b]esc[/b] cancels)")
            yield SelectionList[str](*[(f"{p.slug}  {p.root}", p.slug, p.slug in self.chosen) for p in self.projects],
                                     id="chooser")

    def action_apply(self) -> None:
        picked = tuple(self.query_one("#chooser", SelectionList).selected)
        self.dismiss(tuple(p.slug for p in self.projects if p.slug in picked))

    def action_cancel(self) -> None:
        self.dismiss(None)


# -- the memory and its explanation ----------------------------------------------------


class MemoryScreen(Screen):
    """One whole memory: header, file, text, revision chain."""

    BINDINGS = [
        Binding("escape,q,backspace", "back", "back"),
        Binding("e", "act('explain')", "explain"),
        Binding("f", "act('forget')", "forget"),
        Binding("s", "act('supersede')", "supersedes"),
        Binding("x", "act('unlink')", "unlink"),
        Binding("r", "act('restore')", "restore", show=False),
        Binding("question_mark,f1", "app.help", "help", show=False),
    ]

    def __init__(self, detail: dict, row: Row) -> None:
        super().__init__()
        self.detail, self.row = detail, row

    def compose(self) -> ComposeResult:
        yield Static(Text(" " + _short(self.detail.get("heading") or self.row.source or self.row.id, 78),
                          style="bold"), classes="title")
        with VerticalScroll(id="memory"):
            yield Static(self.render_detail(), id="detail")
        yield Footer()

    def render_detail(self) -> Text:
        d, row = self.detail, self.row
        t = Text()
        when = f"{d['created_at']:%Y-%m-%d %H:%M}" if d.get("created_at") else "undated"
        t.append(f"id {d['id']} · {when} · tier {d['tier']}" + (f" · project {d['project']}" if d.get("project") else ""))
        t.append("\n")
        for f in d["files"] or [str(row.path)]:
            t.append("file ", style="bold")
            t.append(f + "\n")
        versions = d["versions"]
        me = next((v for v in versions if v["id"] == d["id"]), None)
        if me and me["superseded_by"]:
            t.append(f"superseded by {', '.join(me['superseded_by'])}: history, not the current fact\n", style="yellow")
        if d["tier"] == "apoptotic":
            t.append("hidden from search (apoptotic); r restores it\n", style="red")
        t.append("─" * 78 + "\n", style="dim")
        t.append(d["content"].rstrip() + "\n")
        t.append("─" * 78 + "\n", style="dim")
        if len(versions) <= 1:
            t.append("no other versions (no revision links)\n", style="dim")
            return t
        t.append("versions, oldest first\n", style="bold")
        for v in versions:
            at = (v["created_at"] or "undated")[:16].replace("T", " ")
            state = "current   " if v["current"] else "superseded"
            style = "bold" if v["id"] == d["id"] else ""
            t.append(f"  {state} {v['id'][:8]}  {at}  {_short(v['heading'] or v['source'] or '?', 35)}\n", style=style)
            for s in v["supersedes"]:
                how = f"{s['origin']}: {s['reason']}" if s.get("reason") else s["origin"]
                t.append(f"      supersedes {s['id'][:8]} ({_short(how, 49)})\n", style="dim")
        return t

    def action_back(self) -> None:
        self.app.pop_screen()

    def action_act(self, what: str) -> None:
        self.app.act(what, self.row)


class ExplainScreen(Screen):
    """The per-stage table of ``lethe explain`` for one result, and for all of them."""

    BINDINGS = [Binding("escape,q,backspace", "back", "back"),
                Binding("question_mark,f1", "app.help", "help", show=False)]

    def __init__(self, listing: Listing, row: Row) -> None:
        super().__init__()
        self.listing, self.row = listing, row

    def candidates(self) -> list:
        out = self.listing.outcome
        return sorted(out.results, key=lambda c: (c.final_rank or 10**9, c.pool_rank))

    def compose(self) -> ComposeResult:
        from .cues import analyze

        out = self.listing.outcome
        judged = f" · {len(out.pool)} judged{' (deep)' if out.deep else ''}" if out.judge else ""
        extra = (f" · cluster {out.cue} · RIF {'on' if out.rif else 'off'}" if hasattr(out, "cue")
                 else f" · {len(out.projects)} project(s)")
        tense = ("a question about the present: current versions first" if analyze(self.listing.query).present
                 else "a question about the past: history ranked as is")
        yield Static(Text(" explain " + _short(repr(self.listing.query), 68), style="bold"), classes="title")
        head = Text(f"{out.judge or 'no'} judge{judged}{extra}\n{tense}\n")
        head.append(_short(_where(self.row), 64), style="bold")
        head.append(f" ({self.row.id[:8]})")
        yield Static(head, id="explain-head")
        yield Static(self.stages(), id="stages")
        table = DataTable(id="all", cursor_type="row", zebra_stripes=True)
        yield table
        yield Footer()

    def _key(self, c) -> bool:
        return c.id == self.row.id and getattr(c, "project", None) in (None, "", self.row.project)

    def stages(self) -> Table:
        c = next((c for c in self.listing.outcome.pool if self._key(c)), None)
        t = Table(box=None, padding=(0, 1), show_edge=False)
        for name, justify in (("stage", "left"), ("rank", "right"), ("score", "right")):
            t.add_column(name, justify=justify)
        if c is None:
            t.add_row("not in the judged pool", "", "")
            return t
        f = lambda x, spec: "-" if x is None else format(x, spec)  # noqa: E731
        t.add_row("bm25", f(c.bm25_rank, "d"), f(c.bm25_score, ".2f"))
        t.add_row("ctx bm25", f(c.ctx_rank, "d"), f(c.ctx_score, ".2f"))
        t.add_row("dense", f(c.dense_rank, "d"), f(c.dense_score, ".3f"))
        t.add_row("fused", "", f(c.fused, ".4f"))
        t.add_row("suppression", "", f(c.suppression, ".3f"))
        t.add_row("pool rank", f(c.pool_rank, "d"), "")
        t.add_row("judge", f(c.judge_rank, "d"), f(c.judge_raw, ".3f"))
        t.add_row("final", f(c.final_rank, "d"), f(c.judge_score if self.listing.outcome.judge else c.adjusted, ".3f"))
        return t

    def on_mount(self) -> None:
        table = self.query_one("#all", DataTable)
        table.add_columns("final", "bm25", "ctx bm25", "dense", "fused", "supp", "pool", "judge", "final score",
                          "memory")
        f = lambda x, spec: "-" if x is None else format(x, spec)  # noqa: E731
        mine = 0
        for i, c in enumerate(self.candidates()):
            if self._key(c):
                mine = i
            proj = getattr(c, "project", "")
            table.add_row(
                str(c.final_rank or "-"), f"{c.bm25_rank or '-'}:{f(c.bm25_score, '.2f')}",
                f"{c.ctx_rank or '-'}:{f(c.ctx_score, '.2f')}", f"{c.dense_rank or '-'}:{f(c.dense_score, '.3f')}",
                f(c.fused, ".4f"), f(c.suppression, ".3f"), str(c.pool_rank), f(c.judge_raw, ".3f"),
                f"{c.judge_rank or '-'}:{f(c.judge_score, '.3f')}",
                (f"{proj}: " if proj else "") + f"{_short(c.heading or c.source or '', 36)} ({c.id[:8]})",
            )
        table.move_cursor(row=mine)
        table.focus()

    def action_back(self) -> None:
        self.app.pop_screen()


# -- the main screen -------------------------------------------------------------------


class QueryInput(Input):
    """The search box: down goes to the results, esc clears it."""

    BINDINGS = [Binding("down", "app.focus_results", "results"), Binding("escape", "clear", "clear", show=False)]

    def action_clear(self) -> None:
        self.value = ""


class ResultList(OptionList):
    """The results; letters are commands here (in the search box they are the query)."""

    BINDINGS = [
        Binding("e", "app.act('explain')", "explain"),
        Binding("f", "app.act('forget')", "forget"),
        Binding("u", "app.undo", "undo"),
        Binding("s", "app.act('supersede')", "supersedes", show=False),
        Binding("x", "app.act('unlink')", "unlink", show=False),
        Binding("r", "app.act('restore')", "restore", show=False),
        Binding("a", "app.scope", "scope"),
        Binding("p", "app.choose_projects", "projects", show=False),
        Binding("d", "app.since", "since", show=False),
        Binding("h", "app.hidden", "hidden", show=False),
        Binding("slash,escape", "app.focus_query", "search", show=False),
        Binding("question_mark", "app.help", "help"),
        Binding("j", "cursor_down", show=False),
        Binding("k", "cursor_up", show=False),
    ]

    def action_cursor_up(self) -> None:
        if self.highlighted in (None, 0):
            self.app.action_focus_query()
        else:
            super().action_cursor_up()


class LetheApp(App):
    """The terminal UI. ``backend`` is a ``tui_data.Backend``; ``prefetch`` a future of the
    first listing, started before Textual loaded (``run``)."""

    TITLE = "lethe"
    ENABLE_COMMAND_PALETTE = False
    CSS = """
    Screen { layout: vertical; }
    .title { height: 1; background: $primary; color: $text; }
    #query { height: 3; }
    #results { height: 1fr; border: none; padding: 0; }
    #message { height: 1; padding: 0 1; }
    #status { height: 1; padding: 0 1; background: $panel; color: $text-muted; }
    #memory { height: 1fr; padding: 0 1; }
    #explain-head { height: auto; padding: 0 1; }
    #stages { height: auto; padding: 0 1; }
    #all { height: 1fr; }
    .dialog { width: 76; height: auto; max-height: 20; border: thick $accent; background: $surface; padding: 0 1; }
    #help { height: auto; max-height: 22; }
    #choices { height: auto; max-height: 12; }
    #chooser { height: auto; max-height: 14; }
    ModalScreen { align: center middle; }
    .hint { color: $text-muted; }
    """
    BINDINGS = [
        Binding("ctrl+q", "quit", "quit", priority=True),
        Binding("f1", "help", "help"),
        Binding("ctrl+r,f5", "refresh", "refresh", show=False),
    ]

    def __init__(self, backend: Backend, *, query: str = "", scope: Scope = Scope(), since: date | None = None,
                 prefetch=None) -> None:
        super().__init__()
        self.backend = backend
        self.initial_query = query
        self.scope = scope
        self.chosen: tuple[str, ...] = scope.slugs
        self.since = since
        self.hidden = False
        self.listing: Listing | None = None
        self.status_info: dict | None = None
        self.message = ""
        self.undo_root: str | None = None
        self.searches = 0              # listings fetched (tests: the debounce)
        self._prefetch = prefetch
        self._gen = 0
        self._busy = 0
        self._debounce = None
        self._settled: asyncio.Event | None = None
        self._files_seen = None
        self._asked = query            # the box's value the latest listing was asked for
        self.debounce_s = DEBOUNCE_S
        self._warnings: list[str] = []  # what backend calls warned about (a long query cut, ...)
        self._showwarning = None

    # -- layout -------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        # kept as attributes: App.query_one looks in the screen on top, which may be a dialog
        self.title_bar = Static(id="title", classes="title")
        self.box = QueryInput(value=self.initial_query, placeholder="search memory (empty: recent memories)",
                              id="query")
        self.results = ResultList(id="results")
        self.message_line = Static(id="message")
        self.status_bar = Static("status: reading the index…", id="status")
        yield from (self.title_bar, self.box, self.results, self.message_line, self.status_bar, Footer())

    def on_mount(self) -> None:
        # a warning printed to the terminal would be lost under the screen: show it on the message line
        self._showwarning, warnings.showwarning = warnings.showwarning, self._collect_warning
        self._settled = asyncio.Event()
        self.box.focus()
        self._title()
        # the status is read once the first listing is on screen: it does not compete with it
        if self._prefetch is not None:
            fut, self._prefetch = self._prefetch, None
            self._listing_job(fut.result, then=self.refresh_status)
        else:
            self._listing_job(self._listing_call(), then=self.refresh_status)
        self._files_seen = self._files_signature()
        self.set_interval(3.0, self._watch_files)

    def on_unmount(self) -> None:
        if self._showwarning is not None:
            warnings.showwarning = self._showwarning

    def _collect_warning(self, message, category, filename, lineno, file=None, line=None) -> None:  # noqa: ARG002
        text = str(message).strip().splitlines()
        self._warnings.append(text[0] if text else category.__name__)

    # -- waiting (tests) ------------------------------------------------------------
    async def settle(self) -> None:
        """Wait until no search is pending or running and no call is busy."""
        while self._busy or self._debounce is not None:
            self._settled.clear()
            await self._settled.wait()

    @property
    def busy(self) -> bool:
        return bool(self._busy or self._debounce is not None)

    # -- running backend calls ------------------------------------------------------
    def job(self, fn: Callable, done: Callable, *, failed: Callable[[str], None] | None = None) -> None:
        """Run ``fn()`` in a thread; then ``done(result)`` or ``failed(message)`` here."""
        self._busy += 1

        def finish(ok: bool, value) -> None:
            try:
                if ok:
                    done(value)
                else:
                    (failed or self.show_error)(value)
                if self._warnings:
                    said = "; ".join(dict.fromkeys(self._warnings))
                    self._warnings.clear()
                    self.say(f"{self.message} · warning: {said}" if self.message else f"warning: {said}", "yellow")
            finally:
                self._busy -= 1
                self._settled.set()

        def work() -> None:
            try:
                result = fn()
            except LetheError as exc:
                ok, result = False, str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            except Exception as exc:  # noqa: BLE001 - one line on screen, never a crash
                text = str(exc).strip().splitlines()
                ok, result = False, f"{type(exc).__name__}: {text[0] if text else ''}"
            else:
                ok = True
            try:
                self.call_from_thread(finish, ok, result)
            except RuntimeError:  # the app has exited
                pass

        self.run_worker(work, thread=True, exit_on_error=False, group="lethe")

    def show_error(self, msg: str) -> None:
        self.say(f"error: {msg}", "red")

    def say(self, msg: str, style: str = "") -> None:
        self.message = msg
        self.message_line.update(Text(_short(msg, 78), style=style))

    # -- the listing ------------------------------------------------------------------
    @property
    def query_text(self) -> str:
        return self.box.value

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id != "query" or (self._debounce is None and event.value == self._asked):
            return  # (the box's first value: already asked for)
        if self._debounce is not None:
            self._debounce.stop()
        self._gen += 1  # what is on screen is no longer what the box asks for
        self._debounce = self.set_timer(self.debounce_s, self._debounced)

    def _debounced(self) -> None:
        self._debounce = None
        self.refresh_listing()
        self._settled.set()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id != "query":
            return
        if self._debounce is not None:
            self._debounce.stop()
            self._debounce = None
            self.refresh_listing()
        self.action_focus_results()

    def refresh_listing(self, note: str | None = None) -> None:
        self._listing_job(self._listing_call(), note)

    def _listing_call(self) -> Callable[[], Listing]:
        """What the box, scope, date filter and hidden switch ask for, as a backend call."""
        q, scope, since, hidden = self.query_text, self.scope, self.since, self.hidden
        self._asked = q
        if hidden:
            return lambda: self.backend.recent(scope, since, hidden=True)
        if q.strip():
            return lambda: self.backend.search(q, scope, since)
        return lambda: self.backend.recent(scope, since)

    def _listing_job(self, fn: Callable, note: str | None = None, then: Callable | None = None) -> None:
        """Fetch a listing; ``note`` (what a curation did) stays on the message line; ``then``
        runs once it is on screen (or its error is)."""
        self._gen += 1
        gen = self._gen
        self.searches += 1
        if note is None:
            self.say("searching…" if self.query_text.strip() else "reading…", "dim")

        def done(listing: Listing) -> None:
            if gen == self._gen:
                self.show_listing(listing, note)
            self._after_paint(then)

        def failed(msg: str) -> None:
            if gen == self._gen:
                self.listing = None
                self.results.clear_options()
                self.show_error(msg)
            self._after_paint(then)

        self.job(fn, done, failed=failed)

    def _after_paint(self, fn: Callable | None) -> None:
        """Run ``fn`` once the screen has been drawn (busy until then: ``settle`` waits)."""
        if fn is None:
            return
        self._busy += 1

        def go() -> None:
            try:
                fn()
            finally:
                self._busy -= 1
                self._settled.set()

        self.call_after_refresh(go)

    def show_listing(self, listing: Listing, note: str | None = None) -> None:
        results = self.results
        keep = self.current_row()
        self.listing = listing
        width = max(40, results.scrollable_content_region.width - 1) if results.size.width else 76
        results.clear_options()
        results.add_options([Option(row_prompt(r, width), id=f"{i}") for i, r in enumerate(listing.rows)])
        if listing.rows:
            ids = [(r.project, r.id) for r in listing.rows]
            at = ids.index((keep.project, keep.id)) if keep and (keep.project, keep.id) in ids else 0
            results.highlighted = min(at, len(listing.rows) - 1)
        self._title()
        n = len(listing.rows)
        if listing.hidden:
            what = f"{n} hidden (apoptotic) memor{'y' if n == 1 else 'ies'}; r restores, h goes back"
        elif listing.query:
            what = f"{n} result{'s' if n != 1 else ''}" if n else "no memories found"
            if listing.outcome is not None and getattr(listing.outcome, "judge", None) is None and n:
                what += " (not reranked: no judge available)"
        else:
            what = f"{n} recent memor{'y' if n == 1 else 'ies'}" if n else "no memories yet"
        notes = "; ".join(listing.notes)
        if note:
            self.say(note, "green")
            return
        self.say(what + (f" · {notes}" if notes else ""), "yellow" if notes else "")

    def current_row(self) -> Row | None:
        if self.listing is None:
            return None
        i = self.results.highlighted
        return self.listing.rows[i] if i is not None and 0 <= i < len(self.listing.rows) else None

    def _title(self) -> None:
        bits = [f" lethe · {_short(str(self.backend.root), 30)}", self.scope.label()]
        if self.since:
            bits.append(f"since {self.since:%Y-%m-%d}")
        if self.hidden:
            bits.append("hidden memories")
        self.title_bar.update(Text(_short(" · ".join(bits), 79), style="bold"))

    # -- the status line ----------------------------------------------------------------
    def refresh_status(self) -> None:
        def done(info: dict) -> None:
            self.status_info = info
            self.status_bar.update(status_line(info))

        def failed(msg: str) -> None:
            self.status_info = None
            self.status_bar.update(Text(_short(f"status: {msg}", 78), style="red"))

        self.job(self.backend.status, done, failed=failed)

    def _files_signature(self):
        from .ingest import memory_files

        mem = self.backend.root / ".lethe" / "memory"
        out = []
        for p in memory_files(mem):
            try:
                st = p.stat()
                out.append((str(p), st.st_size, st.st_mtime))
            except OSError:
                pass
        db = self.backend.root / ".lethe" / "index" / "lethe.duckdb"
        for f in (db, Path(str(db) + ".wal")):
            try:
                out.append((str(f), f.stat().st_size, f.stat().st_mtime))
            except OSError:
                pass
        return tuple(out)

    def _watch_files(self) -> None:
        """Memory files or the index changed (another process wrote): read the status again."""
        sig = self._files_signature()
        if sig != self._files_seen and not self._busy:
            self._files_seen = sig
            self.refresh_status()

    # -- actions ------------------------------------------------------------------------
    def action_focus_query(self) -> None:
        self.box.focus()

    def action_focus_results(self) -> None:
        results = self.results
        results.focus()
        if results.option_count and results.highlighted is None:
            results.highlighted = 0

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        if event.option_list.id == "results":
            event.stop()
            self.act("open")

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def action_refresh(self) -> None:
        self.refresh_listing()
        self.refresh_status()

    def action_scope(self) -> None:
        order = ["project", "all"] + (["subset"] if self.chosen else [])
        nxt = order[(order.index(self.scope.kind) + 1) % len(order)] if self.scope.kind in order else "project"
        self.set_scope(Scope(nxt, self.chosen if nxt == "subset" else ()))

    def set_scope(self, scope: Scope) -> None:
        self.scope = scope
        self._title()
        self.refresh_listing()

    def action_choose_projects(self) -> None:
        def chosen(slugs) -> None:
            if slugs is None:
                return
            self.chosen = tuple(slugs)
            self.set_scope(Scope("subset", self.chosen) if self.chosen else Scope())

        def got(projects: list) -> None:
            if not projects:
                self.show_error("no projects registered (`lethe index` in a project registers it)")
                return
            self.push_screen(ProjectsScreen(projects, self.chosen), chosen)

        self.job(self.backend.projects, got)

    def action_since(self) -> None:
        def set_since(text) -> None:
            if text is None:
                return
            try:
                self.since = parse_since(text)
            except LetheError as exc:
                self.show_error(str(exc))
                return
            self._title()
            self.refresh_listing()

        now = f"{self.since:%Y-%m-%d}" if self.since else ""
        self.push_screen(PromptScreen("Only memories dated on or after (YYYY-MM-DD, 7d, 2w; empty: any date):", now),
                         set_since)

    def action_hidden(self) -> None:
        self.hidden = not self.hidden
        self._title()
        self.refresh_listing()

    def action_undo(self) -> None:
        root = self.undo_root or str(self.backend.root)

        def yes(ok: bool) -> None:
            if ok:
                self.job(lambda: self.backend.undo(root), undone)

        def undone(report) -> None:
            self.undo_root = None
            n = len(report.ids)
            self.after_change(f"restored {n} memor{'y' if n == 1 else 'ies'} in {len(report.files)} file(s): "
                              f"{', '.join(i[:8] for i in report.ids)}")

        self.push_screen(ConfirmScreen(f"Undo the last forget in {root}?"), yes)

    def action_act(self, what: str) -> None:
        self.act(what)

    def act(self, what: str, row: Row | None = None) -> None:
        """An action on ``row`` (default: the highlighted result)."""
        row = row or self.current_row()
        if row is None:
            self.say("no memory selected", "yellow")
            return
        getattr(self, f"_{what}")(row)

    def _open(self, row: Row) -> None:
        self.job(lambda: self.backend.memory(row), lambda d: self.push_screen(MemoryScreen(d, row)))

    def _explain(self, row: Row) -> None:
        listing = self.listing
        if listing is None or listing.outcome is None or row not in listing.rows:
            self.say("explain needs a search: type a query, then e on a result", "yellow")
            return
        self.push_screen(ExplainScreen(listing, row))

    def _forget(self, row: Row) -> None:
        def yes(ok: bool) -> None:
            if ok:
                self.job(lambda: self.backend.forget(row), forgotten)

        def forgotten(report) -> None:
            self.undo_root = row.root
            n = len(report.ids)
            if isinstance(self.screen, MemoryScreen):
                self.pop_screen()
            self.after_change(f"forgot {n} memor{'y' if n == 1 else 'ies'} in {len(report.files)} file(s): "
                              f"{', '.join(i[:8] for i in report.ids)}; u undoes")

        self.push_screen(ConfirmScreen(
            f"Forget {_short(_where(row), 50)} ({row.id[:8]})?\nIt leaves search and its file (a section you wrote "
            "keeps its words and gets a forgotten marker). u undoes."), yes)

    def _supersede(self, row: Row) -> None:
        others = [r for r in (self.listing.rows if self.listing else []) if r.root == row.root and r.id != row.id]
        choices = [(r.id, Text(f"{r.id[:8]}  {_when(r)}  {_short(_where(r), 44)}")) for r in others]

        def picked(old: str | None) -> None:
            if not old:
                return
            self.push_screen(ConfirmScreen(
                f"{row.id[:8]} ({_short(row.heading or '', 30)}) supersedes {old[:8]}?\nThe older one stays findable "
                "as history; a marker goes into the newer one's section."),
                lambda ok: ok and self.job(lambda: self.backend.link(row.root, row.id, old),
                                           self._edited(f"{row.id[:8]} now supersedes {old[:8]}")))

        self.push_screen(PickScreen(f"{row.id[:8]} supersedes which memory? (enter picks, esc cancels)", choices,
                                    typed=True), picked)

    def _edited(self, message: str):
        """What a link change reports when done: ``message`` and the memory files it edited."""
        def done(files: list[str]) -> None:
            self.after_change(message + (f" (edited {', '.join(files)})" if files else ""))
        return done

    def _unlink(self, row: Row) -> None:
        def got(detail: dict) -> None:
            me = next((v for v in detail["versions"] if v["id"] == row.id), None)
            linked = ([s["id"] for s in me["supersedes"]] + list(me["superseded_by"])) if me else []
            if not linked:
                self.say(f"{row.id[:8]} has no revision links", "yellow")
                return
            meta = {v["id"]: v for v in detail["versions"]}
            choices = []
            for other in linked:
                v = meta.get(other, {})
                how = "supersedes" if other in [s["id"] for s in me["supersedes"]] else "is superseded by"
                choices.append((other, Text(f"{row.id[:8]} {how} {other[:8]}  {_short(v.get('heading') or '', 40)}")))

            def picked(other: str | None) -> None:
                if not other:
                    return
                self.push_screen(ConfirmScreen(
                    f"Remove the revision link between {row.id[:8]} and {other[:8]}?\nFor good: a detected link gets "
                    "a distinct marker, a declared one loses its supersedes marker."),
                    lambda ok: ok and self.job(lambda: self.backend.unlink(row.root, row.id, other),
                                               self._edited(f"unlinked {row.id[:8]} and {other[:8]}")))

            self.push_screen(PickScreen("Remove which link? (enter picks, esc cancels)", choices), picked)

        self.job(lambda: self.backend.memory(row), got)

    def _restore(self, row: Row) -> None:
        if not row.apoptotic:
            self.say(f"{row.id[:8]} is not apoptotic: nothing to restore (h lists hidden memories)", "yellow")
            return

        def done(ids: list[str]) -> None:
            if isinstance(self.screen, MemoryScreen):
                self.pop_screen()
            self.after_change(f"restored {row.id[:8]}: back in search" if ids
                              else f"{row.id[:8]} was not apoptotic any more")

        self.push_screen(ConfirmScreen(f"Restore {row.id[:8]} ({_short(_where(row), 40)}) into search?"),
                         lambda ok: ok and self.job(lambda: self.backend.restore(row), done))

    def after_change(self, note: str) -> None:
        """A curation changed the store: say what it did, list and read the status again."""
        self.say(note, "green")
        self.refresh_listing(note)
        self.refresh_status()
        self._files_seen = self._files_signature()


def status_line(info: dict) -> Text:
    emb = info.get("embedder") or {}
    model = emb.get("name") or ("embedder MISSING" if "missing" in emb else "?")
    rr = info.get("reranker")
    stale = info.get("stale", 0)
    t = Text()
    t.append(f"{info['entries']} memories · judge {info.get('judge') or 'none'} · {model}"
             + (f" + {rr['name']}" if rr else "") + " · ")
    if stale:
        t.append(f"{stale} file(s) changed since the last index (lethe index)", style="yellow")
    else:
        t.append("index up to date", style="green")
    return t


def run(root: Path, *, query: str = "", scope: Scope = Scope(), since: date | None = None, prefetch=None,
        backend: Backend | None = None) -> None:
    backend = backend or Backend(root)
    try:
        LetheApp(backend, query=query, scope=scope, since=since, prefetch=prefetch).run()
    finally:
        backend.close()  # a forget or link in progress finishes before the process exits
