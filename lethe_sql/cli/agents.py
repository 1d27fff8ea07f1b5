"""Agent-facing commands: ``lethe expand``, ``lethe mine``, ``lethe hook ...``, ``lethe install codex``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import List, Optional

import typer

from ..errors import UsageError
from ..expand import expand_entries
from .common import JsonOut, err, errors, open_store, print_json, print_report, progress, root

hook_app = typer.Typer(
    help="Agent hooks (Claude Code plugin, Codex notify): each reads its JSON payload and never fails the agent.",
    no_args_is_help=True,
)
install_app = typer.Typer(help="Wire lethe into a coding agent.", no_args_is_help=True)


# -- expand ------------------------------------------------------------------------------


def expand(
    ids: List[str] = typer.Argument(..., help="Entry ids (as `lethe search` prints them) or unambiguous prefixes."),
    json_out: JsonOut = False,
) -> None:
    """Print whole memories with their source file and heading."""
    with errors():
        with open_store(read_only=True, create=False) as store:
            rows = expand_entries(store.con, ids)
        if json_out:
            print_json(rows)
            return
        for i, d in enumerate(rows):
            if i:
                typer.echo("")
            where = d["source"] or "?"
            if d["heading"]:
                where += f" › {d['heading']}"
            extra = ", ".join(x for x in (d["created_at"], d["session_id"] and f"session {d['session_id']}") if x)
            typer.echo(f"== {d['id']}  {where}" + (f"  ({extra})" if extra else ""))
            if d.get("note"):
                typer.echo(f"   ({d['note']})")
            typer.echo(d["content"])


# -- mine --------------------------------------------------------------------------------


def mine_command(
    paths: Optional[List[Path]] = typer.Argument(
        None, help="Transcript files or folders (*.jsonl). Default: discover Claude Code and Codex sessions."
    ),
    any_project: bool = typer.Option(
        False, "--any-project", help="With auto-discovery, mine sessions from every working directory, not only this project."
    ),
    json_out: JsonOut = False,
) -> None:
    """Mine agent transcripts into memories: one per user + assistant exchange.

    Auto-discovery reads $CLAUDE_CONFIG_DIR/projects/*/*.jsonl (default ~/.claude) and
    $CODEX_HOME/sessions/**/*.jsonl (default ~/.codex), keeping sessions run inside this
    project. Each session becomes .lethe/memory/transcripts/<agent>-<session>.md; a manifest
    makes re-runs mine only what is new."""
    with errors():
        from ..agents.mine import mine

        with open_store() as store, progress(not json_out) as cb:
            report = mine(store, paths or [], any_project=any_project, progress=cb)
        print_report(report, json_out, (
            f"mined {report.files} transcript(s) ({report.files_unchanged} unchanged): "
            f"{report.added} new exchange(s), {report.skipped} skipped, {report.redacted} redaction(s); "
            f"+{report.entries_added} entries"
            + (f", {report.entries_absorbed} near-duplicate(s) collapsed" if report.entries_absorbed else "")
        ))


# -- hooks -------------------------------------------------------------------------------


def _payload(arg: str | None) -> dict:
    raw = arg if arg is not None else ("" if sys.stdin.isatty() else sys.stdin.read())
    if not raw.strip():
        return {}
    try:
        data = json.loads(raw)
    except ValueError:
        raise UsageError("the hook payload is not JSON") from None
    if not isinstance(data, dict):
        raise UsageError("the hook payload is not a JSON object")
    return data


def _hook(run) -> None:
    """Hooks never break the agent: any problem is one line on stderr, exit 0."""
    try:
        out = run()
    except Exception as exc:  # noqa: BLE001
        err(f"hook: {exc}")
        return
    if out:
        typer.echo(out)


def _hook_recording(record, payload: str | None, wait: bool) -> None:
    """A hook that records the agent's turn (``record(payload, wait=...)`` returns what it
    did) and reports that on stderr, printing nothing for the agent."""

    def run():
        err(f"hook: {record(_payload(payload), wait=wait)}")
        return ""

    _hook(run)


@hook_app.command("session-start")
def hook_session_start() -> None:
    """Claude Code SessionStart: create today's memory file, print recent memories (daily files and mined transcripts) as context."""
    from ..agents.hooks import session_start

    _hook(lambda: session_start(_payload(None)))


@hook_app.command("prompt")
def hook_prompt() -> None:
    """Claude Code UserPromptSubmit: print the memories relevant to the prompt as context, or nothing.

    Read-only search (never the write lock, learns nothing); only memories scoring at least
    prompt_min_score, never superseded or forgotten ones, none twice in a session, within the
    session's budget (context_tokens, shared with session-start; prompt_tokens a prompt).
    Slash commands and very short prompts get nothing."""
    from ..agents.hooks import prompt

    _hook(lambda: prompt(_payload(None)))


@hook_app.command("pre-compact")
def hook_pre_compact(
    wait: bool = typer.Option(False, "--wait", help="Reindex before returning instead of in the background."),
) -> None:
    """Claude Code PreCompact: record what the session was doing (its last exchanges) in today's file, then reindex."""
    from ..agents.hooks import pre_compact

    _hook_recording(pre_compact, None, wait)


@hook_app.command("stop")
def hook_stop(
    wait: bool = typer.Option(False, "--wait", help="Reindex before returning instead of in the background."),
) -> None:
    """Claude Code Stop: append a summary of the last exchange to today's file, then reindex."""
    from ..agents.hooks import stop

    _hook_recording(stop, None, wait)


@hook_app.command("codex-notify")
def hook_codex_notify(
    payload: Optional[str] = typer.Argument(None, help="The JSON payload Codex passes (default: standard input)."),
    wait: bool = typer.Option(False, "--wait", help="Reindex before returning instead of in the background."),
) -> None:
    """Codex notify: record a summary of the completed turn, then reindex."""
    from ..agents.hooks import codex_notify

    _hook_recording(codex_notify, payload, wait)


@hook_app.command("reindex")
def hook_reindex() -> None:
    """Index the project unless another reindex is running (single flight; used by the hooks)."""
    from ..agents.hooks import single_flight_index

    _hook(lambda: ("reindexed" if single_flight_index(root()) else ""))


# -- install -----------------------------------------------------------------------------


@install_app.command("codex")
def install_codex_command(
    uninstall: bool = typer.Option(False, "--uninstall", help="Remove lethe's blocks and skills."),
    no_skills: bool = typer.Option(False, "--no-skills", help="Only edit config.toml."),
    no_mcp: bool = typer.Option(False, "--no-mcp", help="Do not register `lethe mcp` as an MCP server."),
    json_out: JsonOut = False,
) -> None:
    """Add lethe to Codex: a notify hook and the `lethe mcp` server in $CODEX_HOME/config.toml
    (between marker comments) and the recall skills in $CODEX_HOME/skills/ (default CODEX_HOME: ~/.codex)."""
    with errors():
        from ..agents.install import install_codex

        report = install_codex(uninstall=uninstall, skills=not no_skills, mcp=not no_mcp)
        if json_out:
            print_json(report.as_dict())
            return
        verb = "removed lethe from" if uninstall else ("updated" if report.changed else "already up to date:")
        typer.echo(f"{verb} {report.config}")
        for s in report.skills:
            typer.echo(f"skill: {s}")
        for n in report.notes:
            typer.echo(f"note: {n}")


# -- enrich ------------------------------------------------------------------------------


def enrich_command(
    model: str = typer.Option("claude-haiku-4-5", "--model", help="Anthropic model that writes the enrichment."),
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="Enrich at most this many entries (newest first)."),
    concurrency: int = typer.Option(4, "--concurrency", min=1, max=32, help="Requests in flight at once."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask before a run expected to cost more than $0.25."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Only count the entries and estimate the cost."),
    json_out: JsonOut = False,
) -> None:
    """Optional: index an Anthropic model's gist, questions, entities and dates beside each entry.

    Needs ANTHROPIC_API_KEY.

    Cached by (content hash, model): re-runs pay only for new entries. Entries are sent as
    indexed, i.e. with private spans and secrets already removed."""
    with errors():
        from ..agents.enrich import CONFIRM_USD, enrich, estimate_usd, make_client, pending

        with open_store(create=False) as store:
            if dry_run:
                todo, done = pending(store.con, model, limit)
                est = round(estimate_usd([t for _, t in todo], model), 4)
                info = {"model": model, "pending": len(todo), "cached": done, "estimated_usd": est}
                if json_out:
                    print_json(info)
                else:
                    typer.echo(f"{len(todo)} entr{'y' if len(todo) == 1 else 'ies'} to enrich with {model} "
                               f"({done} already done): about ${est:.2f}")
                return
            client = make_client()

            def confirm(rep) -> bool:
                if yes:
                    return True
                if not sys.stdin.isatty():
                    raise UsageError(
                        f"enriching {rep.pending} entries with {model} would cost about ${rep.estimated_usd:.2f} "
                        f"(more than ${CONFIRM_USD:.2f}); rerun with --yes to go ahead")
                return typer.confirm(
                    f"Enrich {rep.pending} entries with {model} for about ${rep.estimated_usd:.2f}?", default=False)

            with progress(not json_out) as cb:
                report = enrich(store, model=model, limit=limit, concurrency=concurrency, client=client,
                                confirm=confirm, progress=cb)
        print_report(report, json_out,
                     f"enriched {report.enriched} of {report.pending} entr{'y' if report.pending == 1 else 'ies'} "
                     f"with {model} ({report.cached} cached, {report.failed} failed): "
                     f"{report.input_tokens} + {report.output_tokens} tokens, about ${report.cost_usd:.2f}")


# -- mcp ---------------------------------------------------------------------------------


def mcp_command() -> None:
    """Serve this project's memory to MCP clients over stdio (JSON-RPC: no --json needed).

    Tools: add_memory, search_memories, get_memory, list_memories, forget_memory, undo_forget,
    list_projects; each with an input and an output schema. Ctrl-C ends it (status 130)."""
    with errors():
        try:
            from ..agents.mcp_server import serve
        except ImportError as exc:
            raise UsageError(f"`lethe mcp` needs the mcp package (pip install 'mcp>=2'): {exc}") from None
        raise typer.Exit(serve(root()))
