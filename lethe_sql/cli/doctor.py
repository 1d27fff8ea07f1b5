"""``lethe doctor``: the checks of ``lethe_sql.doctor``, printed, with the fixes."""

from __future__ import annotations

import sys
from dataclasses import asdict

import typer

from .. import __version__
from ..doctor import failed, run_checks
from .common import JsonOut, print_json, state


def doctor_command(json_out: JsonOut = False) -> None:
    """Check the installation: lethe on PATH, the models, this project's index, the Claude Code
    plugin and the Codex config; each problem comes with the command that fixes it. Exit
    status 1 when something lethe needs is missing (optional things are warnings)."""
    checks = run_checks(state.root)
    bad = failed(checks)
    if json_out:
        print_json({"ok": not bad, "version": __version__, "checks": [asdict(c) for c in checks]})
    else:
        typer.echo(f"lethe doctor (lethe-sql {__version__}, Python {sys.version.split()[0]})")
        for c in checks:
            typer.echo(f"{c.status:<5} {c.title:<14} {c.detail}")
            if c.fix and c.status != "ok":
                typer.echo(f"{'':20} fix: {c.fix}")
        warns = sum(c.status == "warn" for c in checks)
        typer.echo(f"{len(bad)} needed check{'s' if len(bad) != 1 else ''} failed" if bad
                   else "everything lethe needs works" + (f" ({warns} optional warning{'s' if warns != 1 else ''})"
                                                          if warns else ""))
    if bad:
        raise typer.Exit(1)
