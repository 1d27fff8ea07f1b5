"""The commands on one project's memory: ``lethe init``, ``add``, ``index``, ``search``,
``explain``, ``restore``, ``status``, ``demo`` and ``serve``.

Plain functions; ``app.py`` registers them on the ``lethe`` app."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import List, Optional

import typer

from ..hits import hit_json, rerank_note
from ..settings import MAX_COUNT
from .common import JsonOut, errors, hit_lines, open_store, print_json, print_report, progress, state


def init(json_out: JsonOut = False) -> None:
    """Create .lethe/memory and .lethe/index in the project root."""
    with errors():
        from ..store import MemoryStore

        root = Path(state.root or os.getcwd()).expanduser().resolve()
        store = MemoryStore(root, create=True)
        store.init()
        with store:
            store.con  # creates and migrates the database
        if json_out:
            print_json({"root": str(root), "memory": str(store.memory_dir), "database": str(store.db_path)})
        else:
            typer.echo(f"initialised {store.lethe_dir}")


def add(
    text: str = typer.Argument(..., help="The memory to write; '-' reads it from standard input."),
    heading: Optional[str] = typer.Option(None, "--heading", help="Words to put after the timestamp heading."),
    supersedes: Optional[List[str]] = typer.Option(
        None, "--supersedes", metavar="ID",
        help="A memory this one replaces (repeat for several); the old one stays findable as history.",
    ),
    json_out: JsonOut = False,
) -> None:
    """Append a timestamped section to today's memory file and index it.

    Prints what happened: `added ID`, `added ID (revises OLD)` when it replaces an older
    memory (declared with --supersedes, or detected), or `duplicate of ID` when a memory
    with the same words exists (then nothing new is written)."""
    with errors():
        if text == "-":
            text = sys.stdin.read()
        with open_store() as store:
            result = store.add_memory(text, heading=heading, supersedes=supersedes or ())
        if json_out:
            print_json(result.as_dict())
        else:
            r = result.redacted
            typer.echo(result.message() + (f" ({r} secret(s)/private span(s) left out)" if r else ""))


def index(
    rebuild: bool = typer.Option(False, "--rebuild", help="Re-embed everything and rebuild the FTS tables."),
    json_out: JsonOut = False,
    no_register: bool = typer.Option(False, "--no-register", help="Do not add this project to the global registry."),
) -> None:
    """Index the memory folder incrementally (unchanged files are skipped)."""
    with errors():
        with open_store() as store, progress(not json_out) as cb:
            report = store.index(progress=cb, rebuild=rebuild)
        if not no_register:
            from ..registry import register_quietly

            report.warnings.extend(w for w in [register_quietly(store.root)[1]] if w)
        print_report(report, json_out, (
            f"indexed {report.files_indexed} file(s), {report.files_unchanged} unchanged, "
            f"{report.files_removed} removed, {report.files_skipped} skipped: "
            f"+{report.entries_added} -{report.entries_removed} entries, "
            f"{report.entries_total} in total ({report.seconds:.2f} s)"
            + (f"; {report.entries_absorbed} duplicate(s) absorbed (lethe dedupe --list)"
               if report.entries_absorbed else "")
            + (f"; {report.revisions_detected} revision(s) detected" if report.revisions_detected else "")
            + (f"; {report.entries_restored} memories an older near-duplicate rule had merged are back"
               if report.entries_restored else "")
            + (f"; {report.redacted} secret(s)/private span(s) kept out of the index" if report.redacted else "")
        ))


def search(
    query: str = typer.Argument(..., help="What to look for, in plain words."),
    top_k: Optional[int] = typer.Option(None, "--top-k", "-k", min=1, max=MAX_COUNT, help="How many results (default 10)."),
    mode: str = typer.Option(
        "default", "--mode",
        help="default (first stage, judge, learning), or one first-stage macro alone: hybrid, bm25, dense.",
    ),
    judge: Optional[str] = typer.Option(None, "--judge", help="auto, cross-encoder, late-interaction or none."),
    json_out: JsonOut = False,
    read_only: bool = typer.Option(False, "--read-only", help="Learn nothing from this search (searches always read the index read-only; what they learn is applied by the next write)."),
    all_projects: bool = typer.Option(False, "--all", help="Search every registered project (read-only; lethe projects list)."),
    projects: Optional[str] = typer.Option(None, "--projects", help="Search these registered projects: slugs or roots, comma-separated."),
) -> None:
    """Search this project's memory (or several projects' with --all / --projects)."""
    with errors():
        if all_projects or projects is not None:
            from .projects import federated_search

            return federated_search(query, all_projects=all_projects, projects=projects, top_k=top_k,
                                    judge=judge, json_out=json_out, mode=mode)
        with open_store(read_only=True, create=False) as store:  # many searches read at once; learning waits
            hits = store.search(query, top_k=top_k, mode=mode, judge=judge, learn=False if read_only else None)
        judge_name = hits[0].judge if hits else None
        if json_out:
            print_json([hit_json(h) for h in hits])
            return
        if not hits:
            typer.echo("no memories found")
            return
        for h in hits:
            typer.echo("\n".join(hit_lines(hit_json(h), h.text)))
        typer.echo(f"({rerank_note(judge_name)})")


def _fmt(x, spec: str = ".4f") -> str:
    return "-" if x is None else format(x, spec)


def explain(
    query: str = typer.Argument(..., help="The query to explain."),
    top_k: Optional[int] = typer.Option(None, "--top-k", "-k", min=1, max=MAX_COUNT, help="How many results (default 10)."),
    judge: Optional[str] = typer.Option(None, "--judge", help="auto, cross-encoder, late-interaction or none."),
    pool: bool = typer.Option(False, "--pool", help="Show the whole judged pool, not only the results."),
    json_out: JsonOut = False,
) -> None:
    """Show how each result was ranked: BM25, context BM25, dense, fused, suppression, judge, final.

    Runs the same pipeline as `lethe search` but learns nothing."""
    from ..cues import TIME_KINDS, analyze

    with errors():
        with open_store(read_only=True, create=False) as store:
            out = store.search_outcome(query, top_k=top_k, judge=judge, learn=False)
        rows = out.pool if pool else out.results
        rows = sorted(rows, key=lambda c: (c.final_rank or 10**9, c.judge_rank or 10**9, c.pool_rank))
        data = [
            {
                "final_rank": c.final_rank, "id": c.id,
                "bm25_rank": c.bm25_rank, "bm25_score": c.bm25_score,
                "dense_rank": c.dense_rank, "dense_score": c.dense_score,
                "ctx_rank": c.ctx_rank, "ctx_score": c.ctx_score,
                "fused": c.fused, "cluster": out.cue, "suppression": c.suppression, "adjusted": c.adjusted,
                "pool_rank": c.pool_rank, "judge_raw": c.judge_raw, "judge_score": c.judge_score,
                "judge_rank": c.judge_rank,
                "deep": c.deep, "source": c.source, "heading": c.heading,
                "superseded_by": list(c.superseded.heads) if c.superseded else [],
                "superseded_at": c.superseded.since.isoformat() if c.superseded and c.superseded.since else None,
            }
            for c in rows
        ]
        cues = analyze(query)
        if json_out:
            print_json({"query": query, "judge": out.judge, "cluster": out.cue, "deep": out.deep,
                         "rif": out.rif, "present": cues.present, "asks_time": cues.temporal, "notes": out.notes,
                         "results": data})
            return
        judged = f"   judged: {len(out.pool)} (deep pass: {'yes' if out.deep else 'no'})" if out.judge else ""
        tense = "present (current versions first)" if cues.present else "past (history ranked as is)"
        asks = f"   asks for: {TIME_KINDS[cues.temporal]}" if cues.temporal else ""
        typer.echo(f"judge: {out.judge or 'none'}{judged}   cluster: {out.cue}   RIF: {'on' if out.rif else 'off'}   "
                   f"question: {tense}{asks}")
        typer.echo(f"{'final':>5} {'bm25':>10} {'ctx bm25':>10} {'dense':>11} {'fused':>7} {'supp':>6} {'pool':>4} "
                   f"{'judge':>8} {'final score':>12}  memory")
        for d in data:
            b = f"{d['bm25_rank'] or '-'}:{_fmt(d['bm25_score'], '.2f')}"
            cb = f"{d['ctx_rank'] or '-'}:{_fmt(d['ctx_score'], '.2f')}"
            dn = f"{d['dense_rank'] or '-'}:{_fmt(d['dense_score'], '.3f')}"
            j = f"{d['judge_rank'] or '-'}:{_fmt(d['judge_score'], '.3f')}"
            where = (d["heading"] or d["source"] or "")[:40]
            sup = f"  [superseded by {', '.join(x[:8] for x in d['superseded_by'])}]" if d["superseded_by"] else ""
            typer.echo(f"{d['final_rank'] or '-':>5} {b:>10} {cb:>10} {dn:>11} {d['fused']:7.4f} {d['suppression']:6.3f} "
                       f"{d['pool_rank']:>4} {_fmt(d['judge_raw'], '.3f'):>8} {j:>12}  {where} ({d['id'][:8]}){sup}")


def restore(
    ids: List[str] = typer.Argument(..., help="Ids of apoptotic entries to bring back into search results."),
    json_out: JsonOut = False,
) -> None:
    """Bring apoptotic entries back (their files never lost them); ids that are not apoptotic are left alone."""
    with errors():
        from ..curate import restore_apoptotic

        with open_store(create=False) as store:
            restored = restore_apoptotic(store, ids)
        if json_out:
            print_json({"restored": restored, "requested": list(ids)})
        else:
            n = len(restored)
            typer.echo(f"restored {n} of {len(ids)} entr{'y' if len(ids) == 1 else 'ies'}")


def status(json_out: JsonOut = False) -> None:
    """Show what is indexed and which models are in use."""
    with errors():
        from ..store import MemoryStore, find_root

        root = find_root(state.root)
        built = (root / ".lethe" / "index" / "lethe.duckdb").exists()
        with MemoryStore(root, read_only=built, create=False) as store:  # reads, or creates the index
            info = store.status()
        if json_out:
            print_json(info)
            return
        typer.echo(f"root:       {info['root']}")
        typer.echo(f"database:   {info['database']} ({info['database_bytes'] / 2**20:.1f} MiB)")
        typer.echo(f"files:      {info['indexed_files']} indexed of {info['memory_files']} in .lethe/memory")
        typer.echo(f"entries:    {info['entries']} ({info['entries_with_vectors']} with vectors)")
        typer.echo(f"tiers:      {', '.join(f'{k} {v}' for k, v in info['tiers'].items()) or '-'}")
        emb = info["embedder"]
        typer.echo(f"embedder:   {emb.get('name', '')} from {emb.get('origin', '')}" if "missing" not in emb else f"embedder:   MISSING: {emb['missing']}")
        rr = info.get("reranker")
        typer.echo(f"reranker:   {rr['name']} from {rr['origin']}" if rr else "reranker:   no cross-encoder installed")
        typer.echo(f"judge:      {info.get('judge') or 'none'}")


def demo(
    top_k: int = typer.Option(3, "--top-k", "-k", min=1, help="Results per query."),
    keep: Optional[Path] = typer.Option(None, "--keep", help="Build the demo project here instead of a temporary folder."),
    json_out: JsonOut = False,
) -> None:
    """Index the bundled sample memory folder and run a few searches."""
    with errors():
        from ..demo import run_demo

        report = run_demo(top_k=top_k, keep=keep, echo=(lambda line: None) if json_out else typer.echo)
        if json_out:
            print_json(report)


def serve(
    stop: bool = typer.Option(False, "--stop", help="Ask the running service to exit."),
    show: bool = typer.Option(False, "--status", help="Say whether the service runs, and where."),
    json_out: JsonOut = False,
) -> None:
    """Run the service that keeps lethe warm (models loaded) for this user, in the foreground.

    You rarely need this: the first `lethe` command that finds no service starts one in
    the background, and it exits after LETHE_SERVE_IDLE seconds (600) without a request.
    It runs one command at a time and never keeps a database open between commands.
    LETHE_SERVE=0 turns it off. --json applies to --status and --stop."""
    with errors():
        from . import service

        if stop or show:
            info = service.status()
            if stop:
                info["stopped"] = service.stop()
            if json_out:
                print_json(info)
            elif stop:
                typer.echo("stopped the lethe service" if info["stopped"] else "no lethe service was running")
            else:
                typer.echo(f"lethe service {'running' if info['running'] else 'not running'} ({info['socket']})")
            return
        raise typer.Exit(service.main())


