"""The ``lethe`` app: its global options and every command, registered in the order ``lethe --help`` lists them.

The commands live one module per group beside this one and share ``common.py``; none of
them imports this module.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from .. import __version__
from . import agents, bench, config, curate, dedup, doctor, memory, models, projects, rif, tui
from ..client import dash_text
from .common import LetheGroup, state

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
    from ..config import apply_model_paths  # embed_model / rerank_model from .lethe/config.toml

    apply_model_paths(root)


for _command in (memory.init, memory.add, memory.index, memory.search, memory.explain, memory.restore,
                 memory.status, memory.demo, memory.serve):
    app.command()(_command)
app.command("doctor")(doctor.doctor_command)
app.command("bench", **bench.SETTINGS)(bench.bench_command)
app.command("dedupe")(dedup.dedupe_command)
app.command("forget")(curate.forget_command)
app.command("list")(curate.list_command)
app.command("revisions")(curate.revisions_command)
app.command("expand")(agents.expand)
app.command("enrich")(agents.enrich_command)
app.command("mcp")(agents.mcp_command)
app.command("mine")(agents.mine_command)
app.command("sql")(projects.sql_command)
app.command("tui")(tui.tui_command)
app.add_typer(rif.rif_app, name="rif")
app.add_typer(models.models_app, name="models")
app.add_typer(agents.hook_app, name="hook")
app.add_typer(agents.install_app, name="install")
app.add_typer(projects.projects_app, name="projects")
app.add_typer(config.config_app, name="config")


# Command-line words that open with a dash and a space are text, never options.
#
# A memory is often a bullet point: ``lethe add "- use pnpm, not npm"``. Click reads any
# word that opens with a dash as an option and stops with "No such option: -". No option
# of ``lethe`` has a space after its dash, so such a word is text: ``text_args`` moves it
# behind a ``--`` at the end of the line (where the parser reads only arguments), unless it
# is the value of the option before it (``--heading "- notes"``). A line that already holds
# a ``--`` is left as typed. (Here, not in a module of its own: it reads the app's options,
# and no other module of the CLI imports the app.)
def text_args(argv: list[str]) -> list[str]:
    """``argv`` with its dash-and-space words behind a ``--`` (the comment above)."""
    if "--" in argv or not any(dash_text(a) for a in argv):
        return argv
    valued = _valued_options(argv)
    move = [k for k, a in enumerate(argv) if dash_text(a) and not (k and argv[k - 1] in valued)]
    if not move:
        return argv
    moved = set(move)
    return [a for k, a in enumerate(argv) if k not in moved] + ["--"] + [argv[k] for k in move]


def _valued_options(argv: list[str]) -> set[str]:
    """The names of the options that take a value, of ``lethe`` and of each (sub)command
    that ``argv`` names."""
    import typer.main

    cmd = typer.main.get_command(app)  # typer's own copy of click: read by attribute
    out: set[str] = set()

    def take(c) -> None:
        for p in c.params:
            if p.param_type_name == "option" and not p.is_flag and not p.count:
                out.update(p.opts)
                out.update(p.secondary_opts)

    take(cmd)
    for a in argv:
        sub = getattr(cmd, "commands", {}).get(a)
        if sub is not None:
            cmd = sub
            take(cmd)
    return out


def main() -> None:
    # `lethe` alone in a terminal opens the UI; with a pipe it prints the help, as before
    if len(sys.argv) == 1 and sys.stdin.isatty() and sys.stdout.isatty():
        app(args=["tui"])
    else:
        app()
