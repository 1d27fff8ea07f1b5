"""Curation commands: ``lethe forget``, ``lethe list``, ``lethe revisions``."""

from __future__ import annotations

import sys
from datetime import date
from typing import List, Optional

import typer

from .common import JsonOut, errors, open_store, print_json, snippet



def _date(value: str | None) -> date | None:
    from ..errors import UsageError

    if value is None:
        return None
    try:
        return date.fromisoformat(value.strip())
    except ValueError:
        raise UsageError(f"--since wants a date as YYYY-MM-DD, not {value!r}") from None


def forget_command(
    ids: Optional[List[str]] = typer.Argument(None, help="Ids (or prefixes of 4+ hex digits) of the memories to forget."),
    query: Optional[str] = typer.Option(
        None, "--query", "-q", help="Forget every memory that holds all the words of this query (stopwords aside)."
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="Show what would be forgotten; change nothing."),
    undo: bool = typer.Option(False, "--undo", help="Undo the last forget."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask before forgetting what --query matched."),
    json_out: JsonOut = False,
) -> None:
    """Forget memories for good: out of search now, after `lethe index --rebuild` and after `lethe mine`.

    A section lethe wrote (`lethe add`, the hooks, `lethe mine`) is removed from its file;
    a section you wrote keeps its words and gets a `<!-- lethe forgotten -->` line.
    Duplicates of a forgotten memory go with it. `lethe forget --undo` takes the last
    forget back (what it removed is kept in .lethe/trash, never committed)."""
    from ..errors import UsageError

    with errors():
        if undo and (ids or query or dry_run):
            raise UsageError("--undo takes no ids, --query or --dry-run")
        with open_store(create=False) as store:
            if undo:
                report = store.undo_forget()
            else:
                if query is not None and not dry_run and not yes:
                    preview = store.forget(ids or (), query=query, dry_run=True)
                    if not sys.stdin.isatty():
                        raise UsageError(
                            f"--query matches {len(preview.ids)} memories; look with --dry-run, then rerun with --yes")
                    _print_report(preview, json_out=False)
                    if not typer.confirm(f"Forget these {len(preview.ids)} memories?", default=False):
                        raise typer.Exit(1)
                report = store.forget(ids or (), query=query, dry_run=dry_run)
        if json_out:
            print_json(report.as_dict())
        else:
            _print_report(report, json_out=False, undone=undo)


def _print_report(report, *, json_out: bool, undone: bool = False) -> None:
    if undone:
        typer.echo(f"restored {len(report.ids)} memor{'y' if len(report.ids) == 1 else 'ies'} "
                   f"in {len(report.files)} file(s): {', '.join(report.ids)}")
        return
    for f in report.forgotten:
        where = f"{f.source} › {f.heading}" if f.heading else f.source
        verb = {"removed": "remove", "tombstoned": "tombstone"}[f.action] if report.dry_run else f.action
        typer.echo(f"{verb:>10} {f.id}  {where}" + (f"\n           {f.text}" if f.text else ""))
    n = len(report.ids)
    if report.dry_run:
        typer.echo(f"would forget {n} memor{'y' if n == 1 else 'ies'} (dry run: nothing changed)")
    else:
        typer.echo(f"forgot {n} memor{'y' if n == 1 else 'ies'} in {len(report.files)} file(s); "
                   "`lethe forget --undo` takes it back")


def list_command(
    since: Optional[str] = typer.Option(None, "--since", help="Only memories dated on or after this day (YYYY-MM-DD)."),
    limit: int = typer.Option(20, "--limit", "-n", min=1, max=100000, help="How many (default 20)."),
    json_out: JsonOut = False,
) -> None:
    """List the newest memories, marking those a newer memory superseded."""
    with errors():
        with open_store(read_only=True, create=False) as store:
            rows = store.list_memories(since=_date(since), limit=limit)
        if json_out:
            print_json(rows)
            return
        if not rows:
            typer.echo("no memories" + (f" since {since}" if since else ""))
            return
        for r in rows:
            when = (r["created_at"] or "undated")[:16].replace("T", " ")
            where = r["heading"] or r["source"] or "?"
            mark = f"  [superseded by {r['superseded_by']}]" if r["superseded_by"] else ""
            typer.echo(f"{r['id']}  {when:<16}  {snippet(where, 50)}{mark}")
            typer.echo(f"    {snippet(r['text'], 160)}")


def revisions_command(
    ident: str = typer.Argument(..., metavar="ID", help="A memory id (or prefix)."),
    unlink: Optional[str] = typer.Option(None, "--unlink", metavar="OTHER", help="Remove the link between ID and OTHER."),
    supersedes: Optional[str] = typer.Option(
        None, "--supersedes", metavar="OLD", help="Declare that ID supersedes OLD (a marker in ID's section)."),
    json_out: JsonOut = False,
) -> None:
    """Show the versions of a memory (its revision chain), oldest first; fix a link.

    Links are detected when a memory is indexed, or declared with `lethe add --supersedes`
    or a `<!-- lethe supersedes=ID -->` line. --unlink removes a wrong one for good (a
    `distinct=` marker, or the `supersedes=` marker taken out); --supersedes adds one."""
    from ..errors import UsageError

    with errors():
        if unlink and supersedes:
            raise UsageError("--unlink and --supersedes do not go together")
        with open_store(read_only=not (unlink or supersedes), create=False) as store:
            changed: list[str] = []
            if unlink:
                changed = store.unlink(ident, unlink)
            elif supersedes:
                changed = store.link(ident, supersedes)
            rows = store.revisions(ident)
        if json_out:
            print_json({"changed_files": changed, "versions": rows})
            return
        for f in changed:
            typer.echo(f"edited {f}")
        if len(rows) == 1:
            typer.echo(f"{rows[0]['id']} has no other versions")
            return
        for r in rows:
            when = (r["created_at"] or "undated")[:16].replace("T", " ")
            state = "current   " if r["current"] else "superseded"
            typer.echo(f"{state} {r['id']}  {when}  {snippet(r['heading'] or r['source'] or '?', 50)}")
            typer.echo(f"    {snippet(r['text'], 160)}")
            for s in r["supersedes"]:
                typer.echo(f"    supersedes {s['id']} ({s['origin']}: {s['reason']})")
