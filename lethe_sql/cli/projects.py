"""``lethe projects`` (the global registry), ``lethe search --all/--projects`` and ``lethe sql``.

Registered on the ``lethe`` app in ``lethe_sql/cli/app.py``; heavy imports stay inside the
commands so ``lethe --help`` stays fast.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Optional

import typer

from ..hits import hit_json, rerank_note
from .common import JsonOut, errors, hit_lines, print_json, state

projects_app = typer.Typer(
    help="The global registry of projects ($LETHE_HOME/projects.json, default ~/.lethe): "
    "what `lethe search --all` and `lethe sql --all` cover. `lethe index` registers its project "
    "unless --no-register, auto_register = false in .lethe/config.toml, or LETHE_DISABLE_GLOBAL_REGISTRY=1.",
    no_args_is_help=True,
)



@projects_app.command("list")
def projects_list(json_out: JsonOut = False) -> None:
    """List registered projects: slug, root, registration time, whether the index exists."""
    with errors():
        from ..registry import Registry

        reg = Registry()
        rows = [p.as_dict() | {"indexed": p.db_path.is_file(), "exists": Path(p.root).is_dir()} for p in reg.projects()]
        if json_out:
            print_json(rows)
            return
        if not rows:
            typer.echo(f"no projects registered in {reg.path}")
            return
        width = max(len(r["slug"]) for r in rows)
        for r in rows:
            flag = "" if r["indexed"] else ("  (missing)" if not r["exists"] else "  (not indexed)")
            typer.echo(f"{r['slug']:<{width}}  {r['root']}  {r['registered_at']}{flag}")


@projects_app.command("add")
def projects_add(
    path: Path = typer.Argument(..., help="A project root (a folder holding .lethe/)."),
    json_out: JsonOut = False,
) -> None:
    """Register a project root."""
    with errors():
        from ..registry import Registry

        p, new = Registry().add(path)
        if json_out:
            print_json(p.as_dict() | {"added": new})
        else:
            typer.echo(f"{'registered' if new else 'already registered'}: {p.slug} {p.root}")


@projects_app.command("remove")
def projects_remove(
    slug_or_path: str = typer.Argument(..., help="The project's slug or root."),
    json_out: JsonOut = False,
) -> None:
    """Unregister a project (its files and index are left alone)."""
    with errors():
        from ..registry import Registry

        p = Registry().remove(slug_or_path)
        if json_out:
            print_json(p.as_dict() | {"removed": True})
        else:
            typer.echo(f"removed {p.slug} {p.root}")


@projects_app.command("prune")
def projects_prune(json_out: JsonOut = False) -> None:
    """Drop registered projects whose root (or its .lethe folder) no longer exists."""
    with errors():
        from ..registry import Registry

        gone = Registry().prune()
        if json_out:
            print_json([p.as_dict() for p in gone])
        else:
            typer.echo(f"pruned {len(gone)} project(s)" + "".join(f"\n  {p.slug} {p.root}" for p in gone))


def names(projects: Optional[str]) -> list[str] | None:
    if projects is None:
        return None
    names = [n.strip() for n in projects.split(",") if n.strip()]
    if not names:
        from ..errors import UsageError

        raise UsageError("--projects needs a comma-separated list of slugs or roots")
    return names


def select_projects(all_projects: bool, projects: Optional[str]):
    from ..errors import UsageError
    from ..registry import Registry

    if all_projects and projects is not None:
        raise UsageError("use either --all or --projects, not both")
    return Registry().select(None if all_projects else names(projects))


def _settings():
    from ..settings import load_settings
    from ..store import find_root

    root = find_root(state.root)
    return load_settings(root if (root / ".lethe").is_dir() else None)


def federated_search(query: str, *, all_projects: bool, projects: Optional[str], top_k, judge,
                     json_out: bool, mode: str) -> None:
    """``lethe search QUERY --all | --projects a,b`` (called from the search command)."""
    import warnings

    from .. import federation
    from ..errors import UsageError

    if mode != "default":
        raise UsageError("--mode applies to one project; cross-project search runs the default pipeline")
    selected = select_projects(all_projects, projects)
    s = _settings()
    out = federation.search(selected, query, settings=s, top_k=top_k, judge=judge)
    for slug, why in out.skipped:
        warnings.warn(f"project {slug} skipped: {why}", UserWarning, stacklevel=2)
    if json_out:
        print_json([hit_json(r, out.judge) for r in out.results])
        return
    if not out.results:
        typer.echo("no memories found")
    for h in out.results:
        typer.echo("\n".join(hit_lines(hit_json(h, out.judge), h.text)))
    typer.echo(f"({rerank_note(out.judge)}; searched {len(out.projects)} project(s): "
               f"{', '.join(p.slug for p in out.projects)})")


# -- lethe sql ---------------------------------------------------------------------

# The union views; each is generated per attached alias by federation.union_all.
MEMORY_COLUMNS = ("id, source, heading, position, session_id, created_at, tier, affinity, "
                  "retrieval_count, last_retrieval_step, text, content")


def session_statements(projects, *, attach: bool = True) -> list[str]:
    """The statements `lethe sql` runs before handing over: ATTACH each project
    READ_ONLY under its slug, then the union views ``all_projects``, ``all_memories``
    (no vectors) and ``all_entries`` (with ``embedding``), each with a ``project`` column."""
    import sqlglot
    from sqlglot import exp

    from ..federation import DIALECT, attach_sql, union_all

    aliases = [p.slug for p in projects]
    out = [attach_sql(str(p.db_path), p.slug) + ";" for p in projects] if attach else []
    rows = exp.values(
        [exp.tuple_(exp.Literal.string(p.slug), exp.Literal.string(p.root)) for p in projects],
        alias="t", columns=["project", "root"],
    )
    out.append(f"CREATE OR REPLACE VIEW all_projects AS {exp.select('*').from_(rows).sql(dialect=DIALECT)};")
    mem = union_all(f"SELECT __project__ AS project, {MEMORY_COLUMNS} FROM entries", aliases)
    out.append(f"CREATE OR REPLACE VIEW all_memories AS {mem};")
    ent = union_all(f"SELECT __project__ AS project, {MEMORY_COLUMNS}, embedding FROM entries", aliases)
    out.append(f"CREATE OR REPLACE VIEW all_entries AS {ent};")
    for s in out:  # every statement is valid DuckDB SQL as sqlglot reads it
        sqlglot.parse_one(s.rstrip(";"), dialect=DIALECT)
    return out


def find_duckdb_cli() -> str | None:
    """The `duckdb` executable: beside this Python (the duckdb-cli package), else on PATH."""
    here = Path(sys.executable).parent / "duckdb"
    if here.is_file() and os.access(here, os.X_OK):
        return str(here)
    return shutil.which("duckdb")


def sql_command(
    all_projects: bool = typer.Option(False, "--all", help="Attach every registered project."),
    projects: Optional[str] = typer.Option(None, "--projects", help="Comma-separated slugs or roots to attach."),
    print_only: bool = typer.Option(False, "--print", help="Print the statements instead of opening a session."),
    json_out: JsonOut = False,
) -> None:
    """Open an interactive DuckDB session with projects attached READ_ONLY and union views.

    Each project is attached under its slug (SELECT * FROM payments.lethe_memories works); the
    views all_projects(project, root), all_memories (entries without vectors) and all_entries
    (with embedding) union them with a project column. Without --all or --projects: this project.
    SQL piped on standard input runs non-interactively. With --json, query results print as JSON
    (the duckdb client's -json mode), and --print prints {"projects": [...], "statements": [...]}."""
    with errors():
        import warnings

        from ..errors import LetheError, UsageError
        from ..federation import Federation

        if not all_projects and projects is None:
            from ..registry import Project
            from ..store import find_root

            root = find_root(state.root)
            if not (root / ".lethe").is_dir():
                raise UsageError(f"{root} is not a lethe project; use --all or --projects, or run it in a project")
            from ..registry import Registry

            known = Registry().find(str(root)) if Registry().path.exists() else None
            selected = [known or Project("main_project" if root.name in ("", "/") else _slug_for(root), str(root), "")]
        else:
            selected = select_projects(all_projects, projects)
        with Federation(selected) as fed:  # the same checks as search: skip what cannot be read
            usable = list(fed.projects)
            for w in fed.warnings:
                warnings.warn(w, UserWarning, stacklevel=2)
        if not usable:
            raise LetheError("no project could be attached")
        statements = session_statements(usable)
        if print_only:
            if json_out:
                print_json({"projects": [p.slug for p in usable], "statements": statements})
            else:
                typer.echo("\n".join(statements))
            return
        exe = find_duckdb_cli()
        if exe is None:
            raise LetheError("the duckdb command-line client is not installed (pip install duckdb-cli==1.5.5), "
                             "or use --print and run the statements in any DuckDB 1.5 client")
        rc = subprocess.call([exe, *(["-json"] if json_out else []), "-cmd", "\n".join(statements)])
        raise typer.Exit(rc)


def _slug_for(root: Path) -> str:
    from ..registry import make_slug

    return make_slug(root, set())
