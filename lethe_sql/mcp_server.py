"""``lethe mcp``: the store as an MCP server over stdio (the ``mcp`` package, 2.x).

Tools (with MCP tool annotations):

* ``add_memory(text, heading=None, supersedes=[])``: append a memory to today's file and
  index it (not read-only, not destructive: nothing is ever overwritten); private spans
  and secrets are scrubbed first (``privacy.py``). Says what happened: ``added``,
  ``revises`` (with the ids it supersedes) or ``duplicate`` (of ``id``).
* ``search_memories(query, scope="project"|"all", top_k=8)``: read-only. Searches
  open the index read-only, so an MCP search learns nothing (RIF) and never holds
  the write lock the agent hooks need.
* ``get_memory(ids)``: read-only; whole entries by id or unambiguous prefix.
* ``list_projects()``: read-only; the global registry (``lethe projects``).
* ``list_memories(since=None, limit=20)``: read-only; the newest memories, superseded ones marked.
* ``forget_memory(ids=[], query=None, dry_run=False)``: destructive; forgets memories for
  good (``lethe forget``); ``undo_forget()`` takes the last forget back.

The server opens the project's store only for the length of one call, keeping the
embedder loaded between calls.
"""

from __future__ import annotations

from pathlib import Path

from .errors import LetheError

INSTRUCTIONS = (
    "Long-term memory of this software project (lethe). Search it before answering questions about "
    "earlier work or decisions, cite what you use by source and heading, and add durable facts "
    "(decisions, paths, commands, numbers) with add_memory. Never store secrets."
)


def build_server(root: Path, *, embedder=None):
    from mcp.server.mcpserver import MCPServer
    from mcp_types import ToolAnnotations

    from .cli_agent import expand_entries
    from .store import MemoryStore

    root = Path(root).expanduser().resolve()
    server = MCPServer(name="lethe", instructions=INSTRUCTIONS)
    cache: dict = {"embedder": embedder}

    def _embedder():
        if cache["embedder"] is None:
            from lethe_sql.udfs.embed import Embedder

            cache["embedder"] = Embedder()
        return cache["embedder"]

    def _store(read_only: bool):
        return MemoryStore(root, embedder=_embedder(), read_only=read_only, create=not read_only)

    from mcp.server.mcpserver.exceptions import ToolError

    def _fail(exc: Exception):
        raise ToolError(str(exc)) from None  # reaches the client as an is_error result with this text

    @server.tool(
        name="add_memory",
        description="Remember a durable fact for this project (a decision, path, command, number). Appends a "
                    "timestamped section to today's memory file and indexes it; returns its id.",
        annotations=ToolAnnotations(title="Add a memory", readOnlyHint=False, destructiveHint=False,
                                    idempotentHint=False, openWorldHint=False),
    )
    def add_memory(text: str, heading: str | None = None, supersedes: list[str] | None = None) -> dict:
        try:
            with _store(False) as store:
                return store.add_memory(text, heading=heading, supersedes=supersedes or ()).as_dict()
        except LetheError as exc:
            _fail(exc)

    @server.tool(
        name="search_memories",
        description="Search long-term memory. scope='project' searches this project, scope='all' every "
                    "registered project. Returns ranked entries with id, source, heading and content.",
        annotations=ToolAnnotations(title="Search memories", readOnlyHint=True, destructiveHint=False,
                                    idempotentHint=True, openWorldHint=False),
    )
    def search_memories(query: str, scope: str = "project", top_k: int = 8) -> list[dict]:
        if scope not in ("project", "all"):
            _fail(ValueError("scope must be 'project' or 'all'"))
        top_k = max(1, min(int(top_k), 50))
        try:
            if scope == "all":
                from . import federation
                from .registry import Registry

                out = federation.search(Registry().select(None), query, embedder=_embedder(), top_k=top_k)
                return [federation.as_dict(r, out.judge) for r in out.results]
            with _store(True) as store:
                hits = store.search(query, top_k=top_k)
        except LetheError as exc:
            _fail(exc)
        return [
            {"rank": h.rank, "id": h.id, "score": h.score, "source": h.source, "heading": h.heading,
             "created_at": h.created_at.isoformat() if h.created_at else None, "content": h.content,
             "superseded_by": list(h.superseded_by),
             "superseded_at": h.superseded_at.isoformat() if h.superseded_at else None}
            for h in hits
        ]

    @server.tool(
        name="get_memory",
        description="Whole memory entries by id (or unambiguous id prefix), with source file and heading.",
        annotations=ToolAnnotations(title="Get memories", readOnlyHint=True, destructiveHint=False,
                                    idempotentHint=True, openWorldHint=False),
    )
    def get_memory(ids: list[str]) -> list[dict]:
        try:
            with _store(True) as store:
                return expand_entries(store.con, ids)
        except LetheError as exc:
            _fail(exc)

    @server.tool(
        name="list_memories",
        description="The newest memories of this project, newest first; superseded ones name what replaced them. "
                    "since: a date (YYYY-MM-DD).",
        annotations=ToolAnnotations(title="List memories", readOnlyHint=True, destructiveHint=False,
                                    idempotentHint=True, openWorldHint=False),
    )
    def list_memories(since: str | None = None, limit: int = 20) -> list[dict]:
        from datetime import date

        try:
            day = date.fromisoformat(since) if since else None
        except ValueError:
            _fail(ValueError(f"since wants a date as YYYY-MM-DD, not {since!r}"))
        try:
            with _store(True) as store:
                return store.list_memories(since=day, limit=max(1, min(int(limit), 500)))
        except LetheError as exc:
            _fail(exc)

    @server.tool(
        name="forget_memory",
        description="Forget memories for good (the user asked to): by ids, or every memory holding all the words "
                    "of query. Sections lethe wrote are removed from their files, a person's sections tombstoned. "
                    "dry_run=true only lists them.",
        annotations=ToolAnnotations(title="Forget memories", readOnlyHint=False, destructiveHint=True,
                                    idempotentHint=True, openWorldHint=False),
    )
    def forget_memory(ids: list[str] | None = None, query: str | None = None, dry_run: bool = False) -> dict:
        try:
            with _store(False) as store:
                return store.forget(ids or (), query=query, dry_run=dry_run).as_dict()
        except LetheError as exc:
            _fail(exc)

    @server.tool(
        name="undo_forget",
        description="Take the last forget back: the memories it removed or tombstoned are indexed again.",
        annotations=ToolAnnotations(title="Undo the last forget", readOnlyHint=False, destructiveHint=False,
                                    idempotentHint=False, openWorldHint=False),
    )
    def undo_forget() -> dict:
        try:
            with _store(False) as store:
                return store.undo_forget().as_dict()
        except LetheError as exc:
            _fail(exc)

    @server.tool(
        name="list_projects",
        description="The projects registered for cross-project search (scope='all').",
        annotations=ToolAnnotations(title="List projects", readOnlyHint=True, destructiveHint=False,
                                    idempotentHint=True, openWorldHint=False),
    )
    def list_projects() -> list[dict]:
        from .registry import Registry

        try:
            return [p.as_dict() for p in Registry().projects()]
        except LetheError as exc:
            _fail(exc)

    return server


def serve(root: Path) -> None:
    build_server(root).run("stdio")
