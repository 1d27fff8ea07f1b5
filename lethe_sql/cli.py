"""The ``lethe`` command line."""

from __future__ import annotations

import json
import os
import sys
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import List, Optional

import typer

from . import __version__
from .errors import LetheError, UsageError

ENV_HELP = """Environment: LETHE_EMBED_MODEL (dir or .onnx of the bi-encoder), LETHE_EMBED_TOKENIZER,
LETHE_CACHE (model cache, default ~/.cache/lethe-sql), LETHE_LOCK_TIMEOUT (seconds to wait for a
locked database, default 10), LETHE_MAX_FILE_BYTES (largest memory file indexed, default 16 MiB),
LETHE_THREADS (onnxruntime threads)."""

app = typer.Typer(
    name="lethe",
    help="Long-term memory for coding agents, in DuckDB.\n\n"
    "Memories are markdown sections in .lethe/memory/*.md; the index is .lethe/index/lethe.duckdb.\n\n"
    + ENV_HELP,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


class State:
    root: Optional[Path] = None


state = State()


def _err(msg: str) -> None:
    typer.echo(f"lethe: {msg}", err=True)


def _show_warning(message, category, filename, lineno, file=None, line=None):  # noqa: ARG001
    _err(f"warning: {message}")


@contextmanager
def _errors():
    """Turn LetheErrors into one clean line and the right exit status."""
    warnings.showwarning = _show_warning
    try:
        yield
    except LetheError as exc:
        _err(f"error: {exc}")
        raise typer.Exit(exc.exit_code) from None


def _root() -> Path:
    from .store import find_root

    return find_root(state.root)


def _store(read_only: bool = False, create: bool = True):
    from .store import MemoryStore

    return MemoryStore(_root(), read_only=read_only, create=create)


def _print_json(obj) -> None:
    typer.echo(json.dumps(obj, indent=2, default=str, ensure_ascii=False))


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


@app.command()
def init(json_out: bool = typer.Option(False, "--json", help="Print the result as JSON.")) -> None:
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
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Append a timestamped section to today's memory file and index it."""
    with _errors():
        if text == "-":
            text = sys.stdin.read()
        with _store() as store:
            entry_id = store.add(text, heading=heading)
        if json_out:
            _print_json({"id": entry_id})
        else:
            typer.echo(f"added {entry_id}")


@app.command()
def index(
    rebuild: bool = typer.Option(False, "--rebuild", help="Re-embed everything and rebuild the FTS tables."),
    json_out: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Index the memory folder incrementally (unchanged files are skipped)."""
    with _errors():
        with _store() as store, _progress(not json_out) as cb:
            report = store.index(progress=cb, rebuild=rebuild)
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
            )


def _snippet(text: str, width: int = 300) -> str:
    one = " ".join(text.split())
    return one if len(one) <= width else one[: width - 1] + "…"


@app.command()
def search(
    query: str = typer.Argument(..., help="What to look for, in plain words."),
    top_k: int = typer.Option(10, "--top-k", "-k", min=1, max=1000, help="How many results."),
    mode: str = typer.Option("hybrid", "--mode", help="hybrid (BM25 + dense, RRF), bm25 or dense."),
    json_out: bool = typer.Option(False, "--json", help="Print a JSON list of results."),
    read_only: bool = typer.Option(False, "--read-only", help="Open the index read-only (changes nothing)."),
) -> None:
    """Search this project's memory."""
    with _errors():
        with _store(read_only=read_only, create=False) as store:
            hits = store.search(query, top_k=top_k, mode=mode)
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
                        "reranked": False,
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
            typer.echo(f"    {_snippet(h.text)}")
        typer.echo("(not reranked: no cross-encoder installed)")


@app.command()
def status(json_out: bool = typer.Option(False, "--json", help="Print the status as JSON.")) -> None:
    """Show what is indexed and which models are in use."""
    with _errors():
        with _store(create=False) as store:
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
        typer.echo("reranker:   none installed (results are not reranked)")


@app.command()
def demo(
    top_k: int = typer.Option(3, "--top-k", "-k", min=1, help="Results per query."),
    keep: Optional[Path] = typer.Option(None, "--keep", help="Build the demo project here instead of a temporary folder."),
) -> None:
    """Index the bundled sample memory folder and run a few searches."""
    with _errors():
        from .demo import run_demo

        run_demo(top_k=top_k, keep=keep, echo=typer.echo)


from .cli_models import models_app  # noqa: E402
app.add_typer(models_app, name="models")


def main() -> None:
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
