"""``lethe tui``: the terminal UI (``lethe_sql/tui.py``), also what ``lethe`` alone opens in a terminal.

Registered on the ``lethe`` app in ``lethe_sql/cli/app.py``; Textual is imported only when the
command runs, so other commands and ``lethe --help`` never load it.
"""

from __future__ import annotations

import sys
from typing import Optional

import typer

from .common import errors, root


def tui_command(
    query: Optional[str] = typer.Option(None, "--query", "-q", help="Start with this search."),
    all_projects: bool = typer.Option(False, "--all", help="Start with every registered project in scope."),
    projects: Optional[str] = typer.Option(
        None, "--projects", help="Start with these registered projects in scope: slugs or roots, comma-separated."),
    since: Optional[str] = typer.Option(
        None, "--since", help="Only memories dated on or after this day (YYYY-MM-DD, or 7d, 2w)."),
) -> None:
    """Browse, search and curate memory in a full-screen terminal UI (`lethe` alone in a terminal opens it too).

    Searches as you type and learns nothing; opens a memory with its file and revisions; explains a ranking; forgets (and undoes), marks or removes revision links and restores apoptotic memories, each after asking. The index is opened only for each read or change, never held. `?` lists the keys."""
    with errors():
        from ..errors import UsageError
        from ..tui_data import Backend, Scope, parse_since

        if not (sys.stdin.isatty() and sys.stdout.isatty()):
            raise UsageError("lethe tui needs a terminal; in scripts use `lethe search`, `lethe list` or `lethe explain`")
        if all_projects and projects is not None:
            raise UsageError("use either --all or --projects, not both")
        scope = Scope("all") if all_projects else Scope()
        if projects is not None:
            from .projects import names

            scope = Scope("subset", tuple(p.slug for p in _registry_select(_names(projects))))
        backend = Backend(root())
        day = parse_since(since) if since else None
        # the first listing starts now, in a thread, while Textual loads
        prefetch = backend.prefetch(query or "", scope, day)
        from ..tui import run

        run(backend.root, query=query or "", scope=scope, since=day, prefetch=prefetch, backend=backend)


def _registry_select(names):
    from ..registry import Registry

    return Registry().select(names)
