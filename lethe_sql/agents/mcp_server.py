"""``lethe mcp``: the store as an MCP server over stdio (the ``mcp`` package, 2.x).

Tools (with MCP tool annotations; every parameter is described, bounded and typed in the
input schema, every result is a JSON object described by the tool's output schema):

* ``add_memory(text, heading=None, supersedes=None)``: append a memory to today's file and
  index it (not read-only, not destructive: nothing is ever overwritten); private spans
  and secrets are scrubbed first (``privacy.py``). Says what happened: ``added``,
  ``revises`` (with the ids it supersedes) or ``duplicate`` (of ``id``).
* ``search_memories(query, scope="project"|"all", top_k=8)``: read-only; ``{"results": [...],
  "judge": ...}``. Searches open the index read-only, so an MCP search learns nothing (RIF)
  and never holds the write lock the agent hooks need.
* ``get_memory(ids)``: read-only; ``{"memories": [...]}``, whole entries by id or unambiguous prefix.
* ``list_projects()``: read-only; ``{"projects": [...]}``, the global registry (``lethe projects``).
* ``list_memories(since=None, limit=20)``: read-only; ``{"memories": [...]}``, the newest
  memories, superseded ones marked.
* ``forget_memory(ids=None, query=None, dry_run=False)``: destructive; forgets memories for
  good (``lethe forget``); ``undo_forget()`` takes the last forget back.

Errors come back as tool errors whose text is one line: lethe's own message, or, for
arguments the input schema rejects, a sentence naming the argument and what it takes
(``top_k must be a whole number between 1 and 50``), never the validator's report.

The server opens the project's store only for the length of one call, keeping the
embedder loaded between calls. Ctrl-C (SIGINT) while it waits ends it with status 130
and no traceback.
"""

from __future__ import annotations

import os
import signal
import threading
from contextlib import contextmanager
from datetime import date
from pathlib import Path
from typing import Annotated, Any, Literal, Optional

from pydantic import Field, ValidationError
from typing_extensions import NotRequired, TypedDict

from ..errors import LetheError

INSTRUCTIONS = (
    "Long-term memory of this software project (lethe). Search it before answering questions about "
    "earlier work or decisions, cite what you use by source and heading, and add durable facts "
    "(decisions, paths, commands, numbers) with add_memory. Never store secrets."
)

#: bounds every tool's input schema states (and the server enforces)
MAX_TOP_K = 50
MAX_LIMIT = 500
MAX_IDS = 100

# -- parameters ---------------------------------------------------------------------------

MemoryId = Annotated[str, Field(min_length=1, description="A memory id, or an unambiguous prefix of one.")]
Ids = Annotated[list[MemoryId], Field(min_length=1, max_length=MAX_IDS,
                                      description=f"Memory ids (or unambiguous prefixes), 1 to {MAX_IDS}.")]
Text = Annotated[str, Field(min_length=1, description="The fact to remember, in plain words (markdown is kept). "
                            "Secrets and <private> spans are removed before anything is written.")]
Heading = Annotated[Optional[str], Field(description="A few words for the section heading, after its timestamp.")]
Supersedes = Annotated[Optional[list[MemoryId]], Field(
    max_length=MAX_IDS, description="Ids of older memories this one replaces; they stay findable as history.")]
Query = Annotated[str, Field(min_length=1, description="What to look for, in plain words.")]
Scope = Annotated[Literal["project", "all"], Field(
    description="'project': this project's memory; 'all': every registered project (see list_projects).")]
TopK = Annotated[int, Field(ge=1, le=MAX_TOP_K, description=f"How many results, 1 to {MAX_TOP_K}.")]
Since = Annotated[Optional[date], Field(description="Only memories dated on or after this day (YYYY-MM-DD).")]
Limit = Annotated[int, Field(ge=1, le=MAX_LIMIT, description=f"How many memories, 1 to {MAX_LIMIT}.")]
ForgetIds = Annotated[Optional[list[MemoryId]], Field(
    max_length=MAX_IDS, description=f"Ids (or prefixes of 4+ hex digits) of the memories to forget, at most {MAX_IDS}.")]
ForgetQuery = Annotated[Optional[str], Field(
    min_length=1, description="Forget every memory holding all the words of this query (stopwords aside).")]
DryRun = Annotated[bool, Field(description="true: only list what would be forgotten; change nothing.")]

# -- results ------------------------------------------------------------------------------


class AddResult(TypedDict):
    """What add_memory did."""

    id: Annotated[str, Field(description="The memory's id (for a duplicate: the memory that holds these words).")]
    status: Annotated[Literal["added", "revises", "duplicate"], Field(
        description="added; revises (added, and it supersedes the ids in revises); duplicate (nothing new written).")]
    revises: Annotated[list[str], Field(description="Ids of the memories this one supersedes.")]
    duplicate_of: Annotated[Optional[str], Field(description="For a duplicate, the memory holding these words.")]
    redacted: Annotated[int, Field(description="Secrets and private spans left out.")]
    written: Annotated[bool, Field(description="Whether a section was written to today's memory file.")]


class SearchHit(TypedDict):
    rank: int
    id: str
    score: float
    source: Annotated[Optional[str], Field(description="The memory file, relative to the project root.")]
    heading: Optional[str]
    created_at: Annotated[Optional[str], Field(description="ISO 8601 time the memory was written.")]
    content: str
    bm25_rank: Annotated[Optional[int], Field(description="Its rank in the BM25 list; null when not in it.")]
    dense_rank: Annotated[Optional[int], Field(description="Its rank in the dense list; null when not in it.")]
    reranked: bool
    judge: Optional[str]
    note: Annotated[str, Field(description="What reranked it, in words.")]
    superseded_by: Annotated[list[str], Field(
        description="The current versions of this memory; empty when it is current.")]
    superseded_at: Optional[str]
    project: NotRequired[Annotated[str, Field(description="scope='all': the project's slug.")]]
    root: NotRequired[Annotated[str, Field(description="scope='all': the project's root folder.")]]


class SearchResults(TypedDict):
    """Ranked memories, best first."""

    results: list[SearchHit]
    judge: Annotated[Optional[str], Field(description="What reranked the results: cross-encoder, late-interaction "
                                          "or null (first stage only).")]


class Occurrence(TypedDict):
    source: str
    heading: Optional[str]


class Memory(TypedDict):
    id: str
    source: Optional[str]
    heading: Optional[str]
    created_at: Optional[str]
    session_id: Optional[str]
    tier: str
    content: Annotated[str, Field(description="The section as written (markdown).")]
    text: Annotated[str, Field(description="The text that is indexed.")]
    occurs_in: list[Occurrence]
    note: NotRequired[Annotated[str, Field(description="Set when the id asked for was merged into this memory.")]]


class Memories(TypedDict):
    memories: list[Memory]


class ListedMemory(TypedDict):
    id: str
    created_at: Optional[str]
    source: Optional[str]
    heading: Optional[str]
    text: str
    superseded_by: Annotated[Optional[str], Field(description="The memory that replaced this one; null when current.")]
    superseded_at: Optional[str]
    tier: str


class MemoryList(TypedDict):
    """The newest memories first."""

    memories: list[ListedMemory]


class Forgotten(TypedDict):
    id: str
    source: str
    heading: Optional[str]
    action: Annotated[Literal["removed", "tombstoned", "restored"], Field(
        description="removed (a section lethe wrote), tombstoned (a section a person wrote), or restored "
                    "(undo_forget).")]
    text: str


class ForgetResult(TypedDict):
    dry_run: bool
    ids: Annotated[list[str], Field(description="The memories forgotten (or restored, for undo_forget), sorted.")]
    files: list[str]
    undo: Annotated[Optional[str], Field(description="The trash record undo_forget uses.")]
    forgotten: list[Forgotten]


class ProjectInfo(TypedDict):
    slug: str
    root: str
    registered_at: str


class Projects(TypedDict):
    projects: list[ProjectInfo]


# -- errors -------------------------------------------------------------------------------

_NUMBER_ERRORS = {"greater_than_equal", "less_than_equal", "greater_than", "less_than", "int_parsing", "int_type",
                  "int_from_float", "finite_number"}
_TYPE_NAMES = {"string": "a string", "integer": "a whole number", "boolean": "true or false", "array": "a list",
               "number": "a number"}


def _prop(schema: dict, name: str) -> dict:
    """The JSON schema of argument ``name``, with an Optional's null branch folded away."""
    prop = dict((schema.get("properties") or {}).get(name) or {})
    for branch in prop.pop("anyOf", []):
        if branch.get("type") != "null":
            prop = {**branch, **prop}
    ref = prop.get("$ref", "")
    if ref.startswith("#/$defs/"):
        prop = {**schema.get("$defs", {}).get(ref.rsplit("/", 1)[1], {}), **prop}
    return prop


def _bounds(lo, hi) -> str:
    if lo is not None and hi is not None:
        return f"between {lo} and {hi}"
    return f"at least {lo}" if lo is not None else f"at most {hi}"


def argument_problem(schema: dict, err: dict) -> str:
    """One validation error of pydantic's as a phrase naming the argument: what it takes."""
    loc = [str(p) for p in err.get("loc", ())]
    name = loc[0] if loc else "the arguments"
    kind = err.get("type", "")
    prop = _prop(schema, name)
    item = len(loc) > 1
    if kind == "missing":
        return f"{name} is required"
    if "enum" in prop or "const" in prop or kind in ("literal_error", "enum"):
        choices = prop.get("enum") or [prop.get("const")]
        return f"{name} must be " + " or ".join(repr(c) for c in choices)
    if item:
        items = prop.get("items") or {}
        what = _TYPE_NAMES.get(items.get("type", ""), "a valid value")
        return f"every item of {name} must be " + ("a non-empty string" if items.get("minLength") else what)
    if prop.get("type") == "integer" and kind in _NUMBER_ERRORS | {"bool_type"}:
        return f"{name} must be a whole number {_bounds(prop.get('minimum'), prop.get('maximum'))}"
    if prop.get("type") == "array" and kind in ("too_short", "too_long"):
        return f"{name} must list {_bounds(prop.get('minItems'), prop.get('maxItems'))} items"
    if kind == "string_too_short":
        return f"{name} must not be empty"
    if kind == "string_too_long":
        return f"{name} must be at most {prop.get('maxLength')} characters"
    if prop.get("format") == "date":
        return f"{name} must be a date as YYYY-MM-DD"
    if prop.get("type") in _TYPE_NAMES:
        what = _TYPE_NAMES[prop["type"]]
        return f"{name} must be {what}" + (" of strings" if prop["type"] == "array" else "")
    return f"{name} has a value this tool does not take"


def validation_sentence(schema: dict, exc: ValidationError) -> str:
    """The whole report of a ValidationError as one line, one phrase per argument."""
    seen: dict[str, str] = {}
    for err in exc.errors():
        phrase = argument_problem(schema, err)
        seen.setdefault(str(err.get("loc", ("",))[0]), phrase)
    return "; ".join(seen.values()) or "the arguments do not fit this tool"


def _server_class():
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError

    class LetheMCPServer(MCPServer):
        """MCPServer whose tool errors are one clean line: the SDK prefixes every message with
        ``Error executing tool NAME:`` and hands argument errors over as pydantic's report
        (with a link to its docs); here the first becomes lethe's own message and the second
        a sentence built from the tool's input schema."""

        async def call_tool(self, name: str, arguments: dict[str, Any], context=None):
            try:
                return await super().call_tool(name, arguments, context)
            except UnexpectedToolError:
                raise
            except ToolError as exc:
                cause = exc.__cause__
                if isinstance(cause, ValidationError):
                    tool = self._tool_manager.get_tool(name)
                    raise ToolError(validation_sentence(tool.parameters if tool else {}, cause)) from cause
                if isinstance(cause, ToolError):
                    raise ToolError(str(cause)) from cause
                raise

    return LetheMCPServer


def build_server(root: Path, *, embedder=None):
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp_types import ToolAnnotations

    from ..expand import expand_entries
    from ..hits import hit_json
    from ..store import MemoryStore

    root = Path(root).expanduser().resolve()
    server = _server_class()(name="lethe", instructions=INSTRUCTIONS, log_level="WARNING")
    server.lifeline = life = Lifeline()
    cache: dict = {"embedder": embedder}

    def _embedder():
        if cache["embedder"] is None:
            from lethe_sql.udfs.embed import Embedder

            cache["embedder"] = Embedder()
        return cache["embedder"]

    def _store(read_only: bool):
        return MemoryStore(root, embedder=_embedder(), read_only=read_only, create=not read_only)

    @contextmanager
    def _call():
        """Around each tool call: a LetheError reaches the client as an is_error result with
        its one-line text; Ctrl-C waits for the call to finish (``Lifeline``)."""
        with life.call():
            try:
                yield
            except LetheError as exc:
                raise ToolError(str(exc)) from None

    def _annotations(title: str, *, read_only: bool, destructive: bool = False, idempotent: bool) -> ToolAnnotations:
        return ToolAnnotations(title=title, readOnlyHint=read_only, destructiveHint=destructive,
                               idempotentHint=idempotent, openWorldHint=False)

    @server.tool(
        name="add_memory",
        description="Remember a durable fact for this project (a decision, path, command, number). Appends a "
                    "timestamped section to today's memory file and indexes it; returns its id and whether it "
                    "was added, revises older memories, or duplicates one.",
        annotations=_annotations("Add a memory", read_only=False, idempotent=False),
    )
    def add_memory(text: Text, heading: Heading = None, supersedes: Supersedes = None) -> AddResult:
        with _call(), _store(False) as store:
            return store.add_memory(text, heading=heading, supersedes=supersedes or ()).as_dict()

    @server.tool(
        name="search_memories",
        description="Search long-term memory. scope='project' searches this project, scope='all' every "
                    "registered project. Returns ranked entries with id, source, heading and content; a "
                    "superseded one names its current versions. Learns nothing from the search.",
        annotations=_annotations("Search memories", read_only=True, idempotent=True),
    )
    def search_memories(query: Query, scope: Scope = "project", top_k: TopK = 8) -> SearchResults:
        with _call():
            if scope == "all":
                from .. import federation
                from ..registry import Registry

                out = federation.search(Registry().select(None), query, embedder=_embedder(), top_k=top_k)
                return {"results": [hit_json(c, out.judge) for c in out.results], "judge": out.judge}
            with _store(True) as store:
                hits = store.search(query, top_k=top_k)
        return {"results": [hit_json(h) for h in hits], "judge": hits[0].judge if hits else None}

    @server.tool(
        name="get_memory",
        description="Whole memory entries by id (or unambiguous id prefix), with source file and heading.",
        annotations=_annotations("Get memories", read_only=True, idempotent=True),
    )
    def get_memory(ids: Ids) -> Memories:
        with _call(), _store(True) as store:
            return {"memories": expand_entries(store.con, ids)}

    @server.tool(
        name="list_memories",
        description="The newest memories of this project, newest first; a superseded one names the memory "
                    "that replaced it.",
        annotations=_annotations("List memories", read_only=True, idempotent=True),
    )
    def list_memories(since: Since = None, limit: Limit = 20) -> MemoryList:
        with _call(), _store(True) as store:
            return {"memories": store.list_memories(since=since, limit=limit)}

    @server.tool(
        name="forget_memory",
        description="Forget memories for good (the user asked to): by ids, or every memory holding all the words "
                    "of query. Sections lethe wrote are removed from their files, a person's sections tombstoned. "
                    "dry_run=true only lists them; undo_forget takes the last forget back.",
        annotations=_annotations("Forget memories", read_only=False, destructive=True, idempotent=True),
    )
    def forget_memory(ids: ForgetIds = None, query: ForgetQuery = None, dry_run: DryRun = False) -> ForgetResult:
        with _call(), _store(False) as store:
            return store.forget(ids or (), query=query, dry_run=dry_run).as_dict()

    @server.tool(
        name="undo_forget",
        description="Take the last forget back: the memories it removed or tombstoned are indexed again.",
        annotations=_annotations("Undo the last forget", read_only=False, idempotent=False),
    )
    def undo_forget() -> ForgetResult:
        with _call(), _store(False) as store:
            return store.undo_forget().as_dict()

    @server.tool(
        name="list_projects",
        description="The projects registered for cross-project search (scope='all').",
        annotations=_annotations("List projects", read_only=True, idempotent=True),
    )
    def list_projects() -> Projects:
        from ..registry import Registry

        with _call():
            return {"projects": [p.as_dict() for p in Registry().projects()]}

    return server


class Lifeline:
    """Ctrl-C (SIGINT) ends the server with status 130: at once when no tool call runs, else
    as soon as the calls running finish, so that a write is never cut in half.

    It cannot be left to KeyboardInterrupt: the stdio transport reads standard input in a
    worker thread that no cancellation reaches, and the interpreter would wait for it
    (forever, with the client's pipe open)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.busy = 0
        self.stopping = False

    @contextmanager
    def call(self):
        with self.lock:
            self.busy += 1
        try:
            yield
        finally:
            with self.lock:
                self.busy -= 1
                if self.stopping and not self.busy:
                    self.exit()

    def interrupt(self, signum=None, frame=None) -> None:  # noqa: ARG002
        with self.lock:
            self.stopping = True
            if not self.busy:
                self.exit()

    @staticmethod
    def exit() -> None:
        os._exit(128 + signal.SIGINT)


def _watch_signals(fd: int, lifeline: Lifeline) -> None:
    """Read the signal numbers written to ``fd`` (``signal.set_wakeup_fd``) and hand SIGINT
    to ``lifeline``."""
    while True:
        try:
            got = os.read(fd, 64)
        except OSError:
            return
        if not got:
            return
        if signal.SIGINT in got:
            lifeline.interrupt()


def serve(root: Path) -> int:
    """Serve over stdio until the client closes standard input (status 0) or Ctrl-C (130).

    Ctrl-C reaches ``Lifeline.interrupt`` in a thread of its own, woken through the signal
    wakeup file descriptor, not in a Python signal handler: the kernel may deliver SIGINT
    to any thread of the process (onnxruntime's, DuckDB's, the one that reads standard
    input), a Python handler runs only when the main thread runs, and the main thread
    waits in the event loop, which a signal delivered elsewhere never woke (the server then
    ignored Ctrl-C; seen once in CI on 2026-11-29). The wakeup descriptor is written by
    whichever thread takes the signal."""
    server = build_server(root)
    r, w = os.pipe()
    os.set_blocking(w, False)
    previous = signal.signal(signal.SIGINT, lambda signum, frame: None)  # the watcher acts; no KeyboardInterrupt
    try:
        old_fd = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
    except ValueError:  # where the descriptor must be a socket (Windows): the handler acts itself
        old_fd = None
        os.close(r)
        os.close(w)
        signal.signal(signal.SIGINT, server.lifeline.interrupt)
    else:
        threading.Thread(target=_watch_signals, args=(r, server.lifeline), name="lethe-mcp-signals",
                         daemon=True).start()
    try:
        server.run("stdio")
    finally:
        if old_fd is not None:
            signal.set_wakeup_fd(old_fd)
        signal.signal(signal.SIGINT, previous)
    return 0
