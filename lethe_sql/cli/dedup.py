"""``lethe dedupe``: merge duplicate memories (same words), list and restore what was merged."""

from __future__ import annotations

from typing import Optional

import typer

from .common import JsonOut, errors, open_store, print_json

TEXT_WIDTH = 200


def _short(text: str | None, width: int = TEXT_WIDTH) -> str:
    one = " ".join((text or "").split())
    return one if len(one) <= width else one[: width - 1] + "…"


def dedupe_command(
    dry_run: bool = typer.Option(False, "--dry-run", help="Show the pairs that would merge; change nothing."),
    list_absorbed: bool = typer.Option(False, "--list", help="List the memories absorbed so far, and what holds each."),
    restore: Optional[str] = typer.Option(
        None, "--restore", metavar="ID",
        help="Bring an absorbed memory back (re-indexed, and never absorbed again).",
    ),
    json_out: JsonOut = False,
) -> None:
    """Merge duplicate memories across the whole store.

    Duplicates have the same words in the same order, ignoring case, punctuation and
    a/an/the; texts that differ in a number, name, path, negation or any other word are
    never merged. Of each group the oldest is kept.

    The others are absorbed: out of search, listed by --list, back with --restore ID.

    Memory files are never changed. New memories are checked on write too (setting dedup)."""
    from ..errors import UsageError

    with errors():
        if list_absorbed and restore:
            raise UsageError("--list and --restore do not go together")
        if (list_absorbed or restore) and dry_run:
            raise UsageError("--dry-run applies to a dedupe pass, not to --list or --restore")
        if list_absorbed:
            _list(json_out)
        elif restore:
            _restore(restore, json_out)
        else:
            _pass(dry_run, json_out)


def _list(json_out: bool) -> None:
    from .. import dedup

    with open_store(read_only=True, create=False) as store:
        rows = dedup.list_absorbed(store.con)
    if json_out:
        print_json(rows)
        return
    if not rows:
        typer.echo("nothing has been absorbed")
        return
    for r in rows:
        typer.echo(f"{r['id']} -> {r['into_id']}  {r['source'] or '?'}")
        typer.echo(f"    {_short(r['text'], 100)}")
    typer.echo(f"{len(rows)} absorbed; `lethe dedupe --restore ID` brings one back")


def _restore(ident: str, json_out: bool) -> None:
    from .. import dedup

    with open_store(create=False) as store:
        out = dedup.restore(store, ident)
    if json_out:
        print_json(out)
    else:
        typer.echo(f"restored {out['id']} (was absorbed into {out['was_in']}); it will not be absorbed again")


def _pass(dry_run: bool, json_out: bool) -> None:
    import time

    from .. import dedup

    with open_store(read_only=dry_run, create=False) as store:
        t0 = time.perf_counter()
        pairs = dedup.plan(store.con)
        n = 0 if dry_run else dedup.apply_plan(store.con, pairs)
        seconds = time.perf_counter() - t0
        total = store.con.execute("SELECT count(*) FROM entries").fetchone()[0]
    if json_out:
        print_json(
            {
                "dry_run": dry_run,
                "absorbed": n,
                "entries_total": total,
                "seconds": round(seconds, 3),
                "pairs": [
                    {
                        "kept": p.kept,
                        "absorbed": p.absorbed,
                        "kept_text": _short(p.kept_text),
                        "absorbed_text": _short(p.absorbed_text),
                    }
                    for p in pairs
                ],
            }
        )
        return
    for p in pairs:
        typer.echo(f"keep {p.kept}: {_short(p.kept_text, 80)}")
        typer.echo(f"     {'would absorb' if dry_run else 'absorbed'} {p.absorbed}: {_short(p.absorbed_text, 80)}")
    if dry_run:
        typer.echo(f"{len(pairs)} duplicate(s) (dry run: nothing changed)")
    else:
        typer.echo(f"absorbed {n} duplicate(s); {total} entries remain ({seconds:.2f} s)")
