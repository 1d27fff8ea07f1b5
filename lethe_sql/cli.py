"""The ``lethe`` command line."""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import List, Optional

import typer

from . import __version__
from .cli_output import JsonOut, LetheGroup
from .cli_output import err as _err  # noqa: F401  (the sub-apps print through these names)
from .cli_output import errors as _errors
from .cli_output import print_json as _print_json
from .settings import MAX_COUNT

ENV_HELP = (
    'Environment: LETHE_EMBED_MODEL (dir or .onnx of the bi-encoder), LETHE_EMBED_TOKENIZER, '
    'LETHE_RERANK_MODEL (dir or .onnx of a cross-encoder), LETHE_HF_ENDPOINT (where `lethe models pull` '
    'downloads from), LETHE_CACHE (model cache, default ~/.cache/lethe-sql), LETHE_LOCK_TIMEOUT (seconds a '
    'command waits its turn for the index, default 60), LETHE_SERVE (0: no background service), '
    'LETHE_SERVE_IDLE (seconds before an idle service exits, default 600), LETHE_MAX_FILE_BYTES (largest memory file indexed, default '
    '16 MiB), LETHE_THREADS (onnxruntime threads, 0: one per core). Every search setting (top_k, depth, '
    'k_shallow, k_deep, judge, rerank_threshold, rif, n_clusters, rif_rate, rif_reinforce, rif_max, rif_lambda, '
    'rif_alpha, ...) can be set in .lethe/config.toml (`lethe config list`) or as LETHE_<NAME>, e.g. '
    'LETHE_JUDGE=none; the environment wins over the file; a value that does not fit is one line and exit '
    'status 2. LETHE_HOME (global registry folder, default ~/.lethe), '
    'LETHE_DISABLE_GLOBAL_REGISTRY=1 (`lethe index` registers nothing), LETHE_AUTO_REGISTER (true/false, '
    'overrides auto_register). '
).strip()

app = typer.Typer(
    name="lethe",
    help="Long-term memory for coding agents, in DuckDB.\n\n"
    "Memories are markdown sections in .lethe/memory/*.md; the index is .lethe/index/lethe.duckdb.\n\n"
    + ENV_HELP,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=LetheGroup,
)


class State:
    root: Optional[Path] = None


state = State()


def _root() -> Path:
    from .store import find_root

    return find_root(state.root)


#: set by ``lethe serve``: it hands commands a store it keeps open between them while busy
STORES = None


def _store(read_only: bool = False, create: bool = True):
    if STORES is not None:
        return STORES(_root(), read_only=read_only, create=create)
    from .store import MemoryStore

    return MemoryStore(_root(), read_only=read_only, create=create)


@contextmanager
def _progress(enabled: bool):
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


def _version(value: bool) -> None:
    if value:
        typer.echo(f"lethe-sql {__version__}")
        raise typer.Exit()


@app.callback()
def main_callback(
    root: Optional[Path] = typer.Option(
        None, "--root", help="Project root (default: the nearest folder at or above the current one holding .lethe/)."
    ),
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    state.root = root
    from .config_cli import apply_model_paths  # embed_model / rerank_model from .lethe/config.toml

    apply_model_paths(root)


@app.command()
def init(json_out: JsonOut = False) -> None:
    """Create .lethe/memory and .lethe/index in the project root."""
    with _errors():
        from .store import MemoryStore

        root = Path(state.root or os.getcwd()).expanduser().resolve()
        store = MemoryStore(root, create=True)
        store.init()
        with store:
            store.con  # creates and migrates the database
        if json_out:
            _print_json({"root": str(root), "memory": str(store.memory_dir), "database": str(store.db_path)})
        else:
            typer.echo(f"initialised {store.lethe_dir}")


@app.command()
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
    with _errors():
        if text == "-":
            text = sys.stdin.read()
        with _store() as store:
            result = store.add_memory(text, heading=heading, supersedes=supersedes or ())
        if json_out:
            _print_json(result.as_dict())
        else:
            r = result.redacted
            typer.echo(result.message() + (f" ({r} secret(s)/private span(s) left out)" if r else ""))


@app.command()
def index(
    rebuild: bool = typer.Option(False, "--rebuild", help="Re-embed everything and rebuild the FTS tables."),
    json_out: JsonOut = False,
    no_register: bool = typer.Option(False, "--no-register", help="Do not add this project to the global registry."),
) -> None:
    """Index the memory folder incrementally (unchanged files are skipped)."""
    with _errors():
        with _store() as store, _progress(not json_out) as cb:
            report = store.index(progress=cb, rebuild=rebuild)
        if not no_register:
            from .registry import register_quietly

            report.warnings.extend(w for w in [register_quietly(store.root)[1]] if w)
        for w in report.warnings:
            _err(f"warning: {w}")
        if json_out:
            _print_json(report.as_dict())
        else:
            typer.echo(
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
            )


def _snippet(text: str, width: int = 300) -> str:
    one = " ".join(text.split())
    return one if len(one) <= width else one[: width - 1] + "…"


def _rerank_note(judge: str | None) -> str:
    if judge == "cross-encoder":
        return "reranked by the cross-encoder"
    if judge == "late-interaction":
        return "reranked by late interaction over token vectors (no cross-encoder installed)"
    return "not reranked: no judge available"


@app.command()
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
    with _errors():
        if all_projects or projects is not None:
            from .cli_projects import federated_search

            return federated_search(query, all_projects=all_projects, projects=projects, top_k=top_k,
                                    judge=judge, json_out=json_out, mode=mode)
        with _store(read_only=True, create=False) as store:  # many searches read at once; learning waits
            hits = store.search(query, top_k=top_k, mode=mode, judge=judge, learn=False if read_only else None)
        judge_name = hits[0].judge if hits else None
        if json_out:
            _print_json(
                [
                    {
                        "rank": h.rank,
                        "id": h.id,
                        "score": h.score,
                        "source": h.source,
                        "heading": h.heading,
                        "created_at": h.created_at.isoformat() if h.created_at else None,
                        "content": h.content,
                        "bm25_rank": h.bm25_rank,
                        "dense_rank": h.dense_rank,
                        "reranked": h.reranked,
                        "judge": h.judge,
                        "note": _rerank_note(h.judge),
                        "superseded_by": list(h.superseded_by),
                        "superseded_at": h.superseded_at.isoformat() if h.superseded_at else None,
                    }
                    for h in hits
                ]
            )
            return
        if not hits:
            typer.echo("no memories found")
            return
        for h in hits:
            where = h.source or "?"
            if h.heading:
                where += f" › {h.heading}"
            typer.echo(f"{h.rank:>2}. [{h.score:.4f}] {where}  ({h.id})")
            if h.superseded_by:
                typer.echo(f"    {superseded_note(h.superseded_by, h.superseded_at)}")
            typer.echo(f"    {_snippet(h.text)}")
        typer.echo(f"({_rerank_note(judge_name)})")


def superseded_note(by, at) -> str:
    """The line every result view prints for a superseded memory."""
    when = f" on {at:%Y-%m-%d}" if at else ""
    return f"(superseded{when} by {', '.join(by)}: history, not the current fact)"


def _fmt(x, spec: str = ".4f") -> str:
    return "-" if x is None else format(x, spec)


@app.command()
def explain(
    query: str = typer.Argument(..., help="The query to explain."),
    top_k: Optional[int] = typer.Option(None, "--top-k", "-k", min=1, max=MAX_COUNT, help="How many results (default 10)."),
    judge: Optional[str] = typer.Option(None, "--judge", help="auto, cross-encoder, late-interaction or none."),
    pool: bool = typer.Option(False, "--pool", help="Show the whole judged pool, not only the results."),
    json_out: JsonOut = False,
) -> None:
    """Show how each result was ranked: BM25, context BM25, dense, fused, suppression, judge, final.

    Runs the same pipeline as `lethe search` but learns nothing."""
    from .cues import analyze

    with _errors():
        with _store(read_only=True, create=False) as store:
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
        if json_out:
            _print_json({"query": query, "judge": out.judge, "cluster": out.cue, "deep": out.deep,
                         "rif": out.rif, "present": analyze(query).present, "notes": out.notes, "results": data})
            return
        judged = f"   judged: {len(out.pool)} (deep pass: {'yes' if out.deep else 'no'})" if out.judge else ""
        tense = "present (current versions first)" if analyze(query).present else "past (history ranked as is)"
        typer.echo(f"judge: {out.judge or 'none'}{judged}   cluster: {out.cue}   RIF: {'on' if out.rif else 'off'}   "
                   f"question: {tense}")
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


rif_app = typer.Typer(help="Retrieval-induced forgetting: what the store has learned.", no_args_is_help=True)
app.add_typer(rif_app, name="rif")


@rif_app.command("reset")
def rif_reset(json_out: JsonOut = False) -> None:
    """Forget everything learned: suppression, query clusters, query log, tiers and affinity."""
    with _errors():
        from .learn import reset

        with _store(create=False) as store:
            counts = reset(store.con)
        if json_out:
            _print_json({"cleared": counts})
        else:
            typer.echo(f"cleared {counts['suppression']} suppression rows, {counts['centroids']} clusters, "
                       f"{counts['queries']} logged queries; tiers and affinity reset")


@rif_app.command("status")
def rif_status(json_out: JsonOut = False) -> None:
    """Show the learned state: search step, clusters, suppression, tiers."""
    with _errors():
        with _store(create=False) as store:  # a writer: what searches deferred is applied first
            con = store.con
            info = {
                "search_step": int(con.execute("SELECT value FROM meta WHERE key='search_step'").fetchone()[0]),
                "logged_queries": con.execute("SELECT count(*) FROM query_log").fetchone()[0],
                "clusters": con.execute("SELECT count(*) FROM rif_centroids").fetchone()[0],
                "suppressed_pairs": con.execute("SELECT count(*) FROM rif_suppression").fetchone()[0],
                "tiers": dict(con.execute("SELECT tier, entries FROM lethe_lifecycle ORDER BY tier").fetchall()),
                "n_clusters_setting": store.settings.n_clusters,
            }
        if json_out:
            _print_json(info)
            return
        for k, v in info.items():
            typer.echo(f"{k + ':':<20}{v}")


@app.command()
def restore(
    ids: List[str] = typer.Argument(..., help="Ids of apoptotic entries to bring back into search results."),
    json_out: JsonOut = False,
) -> None:
    """Bring apoptotic entries back (their files never lost them); ids that are not apoptotic are left alone."""
    with _errors():
        from .curate import restore_apoptotic

        with _store(create=False) as store:
            restored = restore_apoptotic(store, ids)
        if json_out:
            _print_json({"restored": restored, "requested": list(ids)})
        else:
            n = len(restored)
            typer.echo(f"restored {n} of {len(ids)} entr{'y' if len(ids) == 1 else 'ies'}")


@app.command()
def status(json_out: JsonOut = False) -> None:
    """Show what is indexed and which models are in use."""
    with _errors():
        from .store import MemoryStore, find_root

        root = find_root(state.root)
        built = (root / ".lethe" / "index" / "lethe.duckdb").exists()
        with MemoryStore(root, read_only=built, create=False) as store:  # reads, or creates the index
            info = store.status()
        if json_out:
            _print_json(info)
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


@app.command()
def demo(
    top_k: int = typer.Option(3, "--top-k", "-k", min=1, help="Results per query."),
    keep: Optional[Path] = typer.Option(None, "--keep", help="Build the demo project here instead of a temporary folder."),
    json_out: JsonOut = False,
) -> None:
    """Index the bundled sample memory folder and run a few searches."""
    with _errors():
        from .demo import run_demo

        report = run_demo(top_k=top_k, keep=keep, echo=(lambda line: None) if json_out else typer.echo)
        if json_out:
            _print_json(report)


@app.command()
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
    with _errors():
        from . import service

        if stop or show:
            info = service.status()
            if stop:
                info["stopped"] = service.stop()
            if json_out:
                _print_json(info)
            elif stop:
                typer.echo("stopped the lethe service" if info["stopped"] else "no lethe service was running")
            else:
                typer.echo(f"lethe service {'running' if info['running'] else 'not running'} ({info['socket']})")
            return
        raise typer.Exit(service.main())


from .cli_models import models_app  # noqa: E402
app.add_typer(models_app, name="models")

from .doctor import doctor_command  # noqa: E402
app.command("doctor")(doctor_command)


from lethe_sql.bench.cli import bench_command  # noqa: E402

app.command("bench")(bench_command)


from .cli_dedup import dedupe_command  # noqa: E402
app.command("dedupe")(dedupe_command)


from .cli_curate import forget_command, list_command, revisions_command  # noqa: E402
app.command("forget")(forget_command)
app.command("list")(list_command)
app.command("revisions")(revisions_command)


from .cli_agent import enrich_command, expand, hook_app, install_app, mcp_command, mine_command  # noqa: E402
app.command("expand")(expand)
app.command("enrich")(enrich_command)
app.command("mcp")(mcp_command)
app.command("mine")(mine_command)
app.add_typer(hook_app, name="hook")
app.add_typer(install_app, name="install")


from .cli_projects import projects_app, sql_command  # noqa: E402
app.add_typer(projects_app, name="projects")
app.command("sql")(sql_command)

from .config_cli import config_app  # noqa: E402
app.add_typer(config_app, name="config")

from .cli_tui import tui_command  # noqa: E402
app.command("tui")(tui_command)


def main() -> None:
    # `lethe` alone in a terminal opens the UI; with a pipe it prints the help, as before
    if len(sys.argv) == 1 and sys.stdin.isatty() and sys.stdout.isatty():
        app(args=["tui"])
    else:
        app()


if __name__ == "__main__":  # pragma: no cover
    main()
