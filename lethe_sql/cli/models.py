"""``lethe models``: which models are installed, and ``lethe models pull`` for the reranker."""

from __future__ import annotations

import sys
from contextlib import contextmanager

import typer

from .common import JsonOut, errors, print_json

models_app = typer.Typer(
    help="List the models lethe uses (embedder, reranker) and download the reranker.\n\n"
    "Environment: LETHE_EMBED_MODEL, LETHE_RERANK_MODEL (a folder holding model.onnx and "
    "tokenizer.json, or a .onnx file with tokenizer.json beside it), LETHE_EMBED_TOKENIZER (the "
    "embedder's tokenizer.json, whichever way its model was found), LETHE_CACHE (model cache, "
    "default ~/.cache/lethe-sql), HF_HOME (Hugging Face cache, searched for the reranker), "
    "LETHE_HF_ENDPOINT (where `pull` downloads from, default https://huggingface.co).",
    no_args_is_help=False,
)


def _size(src) -> int:
    total = 0
    for p in (src.onnx_path, src.tokenizer_path):
        try:
            total += p.stat().st_size
        except OSError:
            pass
    return total


def _describe(role: str, src) -> dict:
    return {
        "role": role,
        "installed": True,
        "name": src.name,
        "origin": src.origin,
        "path": str(src.onnx_path),
        "tokenizer": str(src.tokenizer_path),
        "tokenizer_origin": src.tokenizer_from,
        "size": _size(src),
    }


def model_report() -> list[dict]:
    """One dict per model role: installed or not, name, origin, path, size (bytes)."""
    from lethe_sql.udfs.models import (
        EMBED_MODEL_NAME,
        RERANK_MODEL_NAME,
        ModelMissing,
        rerank_cache_dir,
        resolve_embedder,
        resolve_reranker,
    )

    rows = []
    try:
        rows.append(_describe("embedder", resolve_embedder()))
    except ModelMissing as exc:
        rows.append({"role": "embedder", "installed": False, "name": EMBED_MODEL_NAME, "origin": None,
                     "path": None, "tokenizer": None, "tokenizer_origin": None, "size": 0, "problem": str(exc)})
    missing = {"role": "reranker", "installed": False, "name": RERANK_MODEL_NAME, "origin": None,
               "path": None, "tokenizer": None, "tokenizer_origin": None, "size": 0}
    try:
        src = resolve_reranker()
    except ModelMissing as exc:
        rows.append({**missing, "problem": str(exc)})
    else:
        if src is None:
            rows.append({**missing, "problem": "not installed (searches are not reranked); run `lethe models pull`, "
                         f"or put model.onnx and tokenizer.json in {rerank_cache_dir()}"})
        else:
            rows.append(_describe("reranker", src))
    return rows


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


@models_app.callback(invoke_without_command=True)
def models(
    ctx: typer.Context,
    json_out: JsonOut = False,
) -> None:
    """List each model role (embedder, reranker): installed or not, name, origin, path, size."""
    if ctx.invoked_subcommand is not None:
        return
    with errors():
        rows = model_report()
        if json_out:
            print_json(rows)
            return
        for r in rows:
            if r["installed"]:
                typer.echo(f"{r['role']:<9} {r['name']}  installed ({_mib(r['size'])})")
                typer.echo(f"          from {r['origin']}")
                typer.echo(f"          {r['path']}")
                typer.echo(f"          tokenizer {r['tokenizer']}")
                if r["tokenizer_origin"] != r["origin"]:
                    typer.echo(f"          tokenizer from {r['tokenizer_origin']}")
            else:
                typer.echo(f"{r['role']:<9} {r['name']}  NOT INSTALLED: {r['problem']}")


@contextmanager
def _download_bar(enabled: bool):
    if not enabled or not sys.stdout.isatty():
        yield None
        return
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

    with Progress(
        TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(), TimeRemainingColumn(),
        transient=True,
    ) as bar:
        task = bar.add_task("reranker", total=None)

        def cb(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total or None)

        yield cb


@models_app.command()
def pull(
    force: bool = typer.Option(False, "--force", help="Download again even if the reranker is in the cache."),
    json_out: JsonOut = False,
) -> None:
    """Download the reranker (cross-encoder ms-marco-MiniLM-L-6-v2, ONNX) into the lethe cache."""
    with errors():
        from lethe_sql.udfs.models import _reranker_in, pull_reranker, rerank_cache_dir

        already = not force and _reranker_in(rerank_cache_dir(), "cache") is not None
        with _download_bar(not json_out) as cb:
            src = pull_reranker(progress=cb, force=force)
        info = {**_describe("reranker", src), "downloaded": not already}
        if json_out:
            print_json(info)
        elif already:
            typer.echo(f"reranker {src.name} already installed in {src.onnx_path.parent} (use --force to download again)")
        else:
            typer.echo(f"downloaded reranker {src.name} ({_mib(info['size'])}) to {src.onnx_path.parent}")
