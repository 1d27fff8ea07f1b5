"""What every ``lethe`` command shares: how it prints its data, its errors and ``--json``,
which store it opens, and how it shows a search hit.

The one place that declares the ``--json`` option (``JsonOut``, the same help everywhere),
prints JSON (``print_json``) and turns a ``LetheError`` into what the user sees
(``errors``): one line ``lethe: error: MESSAGE`` on stderr, or, when the command line
asked for ``--json``, one JSON document on stdout::

    {"error": {"message": "MESSAGE", "kind": "not_a_project"}}

with the same exit status (2 for a usage error, 1 otherwise). A command line click cannot
parse (an unknown option, a value out of range) is answered the same way under ``--json``
(kind ``usage``, status 2): see ``LetheGroup``.

The store a command opens (``store()``: the project under ``--root``, or the one ``lethe
serve`` keeps open between commands, ``STORES``), the progress bar of long commands
(``progress``) and the text form of a search hit (``hit_lines``; its JSON form is
``lethe_sql.hits.hit_json``, the one shape the CLI, the MCP server and cross-project search
print) live here too.

Standard library and typer only: every command imports this module; it imports no command.
"""

from __future__ import annotations

import json
import sys
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Optional

import typer
from typer.core import TyperGroup

from ..errors import LetheError, asked_for_json, error_object

try:  # typer 0.2x parses with its own copy of click: its errors derive from TyperException
    from typer import TyperException as _ParseError
except ImportError:  # pragma: no cover - older typer, on click
    from click import ClickException as _ParseError

JSON_HELP = ('Print the result as JSON on stdout; an error then is JSON too: '
             '{"error": {"message": ..., "kind": ...}}.')

#: the ``--json`` option of every command that prints data: ``json_out: JsonOut = False``
JsonOut = Annotated[bool, typer.Option("--json", help=JSON_HELP, show_default=False)]

#: whether the command line running now asked for ``--json``; set by ``LetheGroup`` before it
#: parses anything (a process, or the service, runs one command line at a time)
_asked = {"json": False}


def wants_json() -> bool:
    """Whether the command running now was asked for ``--json``."""
    return _asked["json"]


def print_json(obj) -> None:
    typer.echo(json.dumps(obj, indent=2, default=str, ensure_ascii=False))


def err(msg: str) -> None:
    typer.echo(f"lethe: {msg}", err=True)


def print_report(report, json_out: bool, text: str) -> None:
    """A command's report (``warnings``, ``as_dict()``): its warnings on stderr, then the
    report as JSON or the line of text."""
    for w in report.warnings:
        err(f"warning: {w}")
    if json_out:
        print_json(report.as_dict())
    else:
        typer.echo(text)


def report_error(message: str, kind: str) -> None:
    """Say an error the way the command line asked: JSON on stdout, else one line on stderr."""
    if wants_json():
        print_json(error_object(message, kind))
    else:
        err(f"error: {message}")


def _show_warning(message, category, filename, lineno, file=None, line=None):  # noqa: ARG001
    err(f"warning: {message}")


@contextmanager
def errors():
    """Turn LetheErrors into one clean line (or the JSON error) and the right exit status."""
    warnings.showwarning = _show_warning
    try:
        yield
    except LetheError as exc:
        report_error(str(exc), exc.kind)
        raise typer.Exit(exc.exit_code) from None


class LetheGroup(TyperGroup):
    """The ``lethe`` command group: notes whether the command line asked for ``--json`` before
    anything is parsed, so that an error raised while parsing the rest (an unknown option, a
    value out of range, a missing argument) is JSON too."""

    def parse_args(self, ctx, args: list[str]) -> list[str]:
        _asked["json"] = asked_for_json(args)
        return super().parse_args(ctx, args)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except _ParseError as exc:
            if not wants_json():
                raise
            code = getattr(exc, "exit_code", 1)
            print_json(error_object(exc.format_message(), "usage" if code == 2 else "error"))
            sys.stdout.flush()
            raise typer.Exit(code) from None


# -- the project and its store -------------------------------------------------------------


class State:
    root: Optional[Path] = None


#: the global options of the command line running now (``--root``), set by the app's callback
state = State()


def root() -> Path:
    """The project root: ``--root``, else the nearest folder at or above the current one holding .lethe/."""
    from ..store import find_root

    return find_root(state.root)


#: set by ``lethe serve``: it hands commands a store it keeps open between them while busy
STORES = None


def open_store(read_only: bool = False, create: bool = True):
    if STORES is not None:
        return STORES(root(), read_only=read_only, create=create)
    from ..store import MemoryStore

    return MemoryStore(root(), read_only=read_only, create=create)


@contextmanager
def progress(enabled: bool):
    """A progress callback: a rich bar when stdout is a terminal, else silent."""
    if not enabled or not sys.stdout.isatty():
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    with Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(), transient=True
    ) as bar:
        tasks: dict[str, int] = {}

        def cb(stage: str, done: int, total: int) -> None:
            if stage not in tasks:
                tasks[stage] = bar.add_task(stage, total=total)
            bar.update(tasks[stage], completed=done, total=total)

        yield cb


# -- search hits as text ---------------------------------------------------------------------


def snippet(text: str, width: int = 300) -> str:
    one = " ".join(text.split())
    return one if len(one) <= width else one[: width - 1] + "…"


def superseded_note(by, at) -> str:
    """The line every result view prints for a superseded memory."""
    when = f" on {str(at)[:10]}" if at else ""  # a datetime, or its ISO text
    return f"(superseded{when} by {', '.join(by)}: history, not the current fact)"


def hit_lines(hit: dict, text: str) -> list[str]:
    """The text form of one search hit (``lethe_sql.hits.hit_json``'s dict, and the entry's
    indexed text): rank, score, project (cross-project search), source and heading, id, a
    superseded note, and a snippet of the text."""
    where = hit["source"] or "?"
    if hit["heading"]:
        where += f" › {hit['heading']}"
    project = f"{hit['project']}: " if "project" in hit else ""
    lines = [f"{hit['rank']:>2}. [{hit['score']:.4f}] {project}{where}  ({hit['id']})"]
    if hit["superseded_by"]:
        lines.append(f"    {superseded_note(hit['superseded_by'], hit['superseded_at'])}")
    lines.append(f"    {snippet(text)}")
    return lines
