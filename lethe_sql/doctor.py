"""``lethe doctor``: is this installation ready, and what fixes what is not.

Each check gives a status, ``ok``, ``warn`` or ``fail``, a one-line detail and, when
something is wrong, the command that fixes it. ``fail`` is kept for what lethe needs:
``lethe`` on PATH (the agents' hooks and MCP server call it by that name), the
embedder loading and encoding, a readable index in a project that has one, and the
agent integrations that are installed pointing at a ``lethe`` that resolves. What is
optional (the cross-encoder, a project here, Claude Code or Codex not set up) is a
``warn``. The exit status is 1 when any check fails, else 0.

Nothing is changed: the index is opened read-only, with a short lock timeout.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path


#: How long the project check waits for a database another process is writing.
LOCK_TIMEOUT_S = 2.0


@dataclass
class Check:
    id: str
    title: str
    status: str  # ok | warn | fail
    detail: str
    fix: str | None = None
    needed: bool = True  # False: a problem here is a warning, never a failure
    data: dict = field(default_factory=dict)


def _checkout() -> Path | None:
    """The lethe-sql checkout this code runs from (an editable install), if any."""
    root = Path(__file__).resolve().parents[1]
    return root if (root / ".claude-plugin" / "marketplace.json").is_file() else None


def _source_arg() -> str:
    checkout = _checkout()
    return str(checkout) if checkout else "/path/to/lethe-sql"


def _this_lethe() -> Path:
    """The ``lethe`` script running now (or the one beside this Python)."""
    arg0 = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if arg0 is not None and arg0.name == "lethe" and arg0.exists():
        return arg0.absolute()
    return Path(sys.executable).parent / "lethe"


def _same(a: str | Path, b: str | Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _install_fix() -> str:
    return f"pipx install {_source_arg()}   (or: uv tool install {_source_arg()})"


def _resolves(program: str) -> str | None:
    """Where a command's program resolves: a path that is an executable file, or PATH."""
    if os.sep in program:
        path = Path(program).expanduser()
        return str(path) if path.is_file() and os.access(path, os.X_OK) else None
    return shutil.which(program)


def check_path() -> Check:
    this = _this_lethe()
    found = shutil.which("lethe")
    data = {"path": found, "running": str(this)}
    if found is None:
        return Check("path", "lethe on PATH", "fail",
                     f"no `lethe` on PATH (this one is {this}); the hooks and the MCP server call `lethe` by name",
                     f"{_install_fix()}; or: export PATH=\"{this.parent}:$PATH\"", data=data)
    if this.exists() and not _same(found, this):
        return Check("path", "lethe on PATH", "warn",
                     f"{found} is on PATH, but this one is {this}: agents will run the one on PATH",
                     f"export PATH=\"{this.parent}:$PATH\"   (or reinstall the one on PATH)", needed=False, data=data)
    return Check("path", "lethe on PATH", "ok", f"{found}" + (" (this one)" if _same(found, this) else ""), data=data)


def check_embedder() -> Check:
    from lethe_sql.udfs.models import ModelMissing, resolve_embedder

    fix = f"pip install --force-reinstall {_source_arg()}   (pipx: pipx reinstall lethe-sql)"
    try:
        src = resolve_embedder()
    except ModelMissing as exc:
        return Check("embedder", "embedder", "fail", str(exc), fix)
    data = {"name": src.name, "origin": src.origin, "model": str(src.onnx_path),
            "tokenizer": str(src.tokenizer_path), "tokenizer_origin": src.tokenizer_from}
    started = time.perf_counter()
    try:
        import numpy as np

        from lethe_sql.udfs.embed import EMBED_DIM, Embedder

        vec = Embedder(src, threads=1).encode(["lethe doctor checks the embedder"])
        if vec.shape != (1, EMBED_DIM) or not np.isfinite(vec).all() or abs(float(np.linalg.norm(vec)) - 1) > 1e-3:
            raise ValueError(f"the test sentence gave a vector of shape {vec.shape} that is not unit length")
    except Exception as exc:  # a broken model, tokenizer or runtime: say which
        return Check("embedder", "embedder", "fail", f"{src.name} from {src.origin} does not load: {exc}",
                     fix, data=data)
    data["encode_s"] = round(time.perf_counter() - started, 3)
    # the packaged origin names both packages; an override of the tokenizer alone is worth saying
    tok = f"; tokenizer from {src.tokenizer_from}" if src.tokenizer_from.startswith("LETHE_EMBED_TOKENIZER") else ""
    return Check("embedder", "embedder", "ok",
                 f"{src.name} from {src.origin}{tok}; loaded and encoded a test sentence in {data['encode_s']:.2f} s",
                 data=data)


def check_reranker() -> Check:
    from lethe_sql.udfs.models import ModelMissing, rerank_cache_dir, resolve_reranker

    try:
        src = resolve_reranker()
    except ModelMissing as exc:
        return Check("reranker", "cross-encoder", "warn", f"{exc} (optional)",
                     "unset LETHE_RERANK_MODEL (or the config's rerank_model), or point it at a model folder",
                     needed=False)
    if src is None:
        return Check("reranker", "cross-encoder", "warn",
                     "not installed (optional): searches are judged by late interaction",
                     f"lethe models pull   (offline: put model.onnx and tokenizer.json in {rerank_cache_dir()})",
                     needed=False)
    data = {"name": src.name, "origin": src.origin, "model": str(src.onnx_path)}
    try:
        from lethe_sql.udfs.rerank import CrossEncoder

        CrossEncoder(src).score("doctor", ["lethe doctor checks the cross-encoder"])
    except Exception as exc:
        return Check("reranker", "cross-encoder", "warn", f"{src.name} from {src.origin} does not load: {exc}",
                     "lethe models pull --force", needed=False, data=data)
    return Check("reranker", "cross-encoder", "ok", f"{src.name} from {src.origin}; scored a test pair", data=data)


def check_project(start: Path | None) -> Check:
    from lethe_sql.db import open_duckdb
    from lethe_sql.errors import DatabaseCorrupt, DatabaseLocked
    from lethe_sql.store import LETHE_DIR, find_root

    root = find_root(start)
    lethe_dir = root / LETHE_DIR
    if not lethe_dir.is_dir():
        return Check("project", "project", "warn",
                     f"no {LETHE_DIR}/ folder in {root} or above (optional: the hooks do nothing here)",
                     "lethe init   (in the project's root)", needed=False, data={"root": None})
    db = lethe_dir / "index" / "lethe.duckdb"
    data: dict = {"root": str(root), "database": str(db)}
    if not db.is_file():
        return Check("project", "project", "warn", f"{root}: no index yet ({db})", "lethe index",
                     needed=False, data=data)
    data["bytes"] = db.stat().st_size
    try:
        con = open_duckdb(db, read_only=True, timeout=LOCK_TIMEOUT_S)
    except DatabaseLocked as exc:
        data["locked"] = True
        return Check("project", "project", "warn",
                     f"{root}: the index is locked by a writer, not read after {LOCK_TIMEOUT_S:g} s ({exc})",
                     "run `lethe doctor` again when the indexer is done", needed=False, data=data)
    except (DatabaseCorrupt, Exception) as exc:  # duckdb's own errors too: the file cannot be read
        return Check("project", "project", "fail", f"{root}: the index cannot be read: {exc}",
                     f"mv {db} {db}.broken && lethe index", data=data)
    try:
        data["entries"] = con.execute("SELECT count(*) FROM entries").fetchone()[0]
        data["files"] = con.execute("SELECT count(*) FROM source_files").fetchone()[0]
        row = con.execute("SELECT value FROM meta WHERE key = 'embed_model'").fetchone()
        data["embed_model"] = row[0] if row else None
    except Exception as exc:
        return Check("project", "project", "fail", f"{root}: the index is not a lethe index: {exc}".splitlines()[0],
                     f"mv {db} {db}.broken && lethe index", data=data)
    finally:
        con.close()
    summary = (f"{root}: {data['entries']} entries from {data['files']} files, "
               f"{data['bytes'] / 2**20:.1f} MiB ({db})")
    try:
        from lethe_sql.udfs.models import resolve_embedder

        current = resolve_embedder().model_id
    except Exception:
        current = None
    if current and data["embed_model"] and data["embed_model"] != current:
        return Check("project", "project", "fail",
                     f"{summary}; embedded with {data['embed_model']}, but the embedder now is {current}",
                     "lethe index --rebuild", data=data)
    return Check("project", "project", "ok", summary, data=data)


def _commands_in(obj) -> list[str]:
    """Every ``"command"`` string in a hooks.json / settings.json structure."""
    if isinstance(obj, dict):
        out = [obj["command"]] if isinstance(obj.get("command"), str) else []
        for v in obj.values():
            out += _commands_in(v)
        return out
    if isinstance(obj, list):
        return [c for v in obj for c in _commands_in(v)]
    return []


def _program(command: str) -> str:
    try:
        return shlex.split(command)[0]
    except (ValueError, IndexError):
        return command.split()[0] if command.split() else ""


def _read_json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _lethe_plugin_dirs(plugins: Path) -> list[Path]:
    """Installed copies of the lethe plugin: the folders Claude Code keeps under
    ``plugins/cache/<marketplace>/lethe/<version>`` (and any other folder under
    ``plugins/`` whose ``.claude-plugin/plugin.json`` names it ``lethe``)."""
    found = []
    for manifest in sorted(plugins.glob("cache/**/.claude-plugin/plugin.json")):
        meta = _read_json(manifest)
        if isinstance(meta, dict) and meta.get("name") == "lethe":
            found.append(manifest.parent.parent)
    return found


def check_claude() -> Check:
    from lethe_sql.agents.mine import claude_home

    claude = shutil.which("claude")
    home = claude_home()
    plugin_dirs = _lethe_plugin_dirs(home / "plugins")
    data: dict = {"claude": claude, "config_dir": str(home), "plugins": [str(p) for p in plugin_dirs]}
    sources: list[tuple[Path, str]] = []
    for d in plugin_dirs:
        for f in (d / "hooks" / "hooks.json", d / ".mcp.json"):
            sources += [(f, c) for c in _commands_in(_read_json(f))]
    settings = home / "settings.json"
    sources += [(settings, c) for c in _commands_in((_read_json(settings) or {}).get("hooks"))
                if re.search(r"(^|[/\s])lethe\s+hook\b", c)]
    install = (f"claude plugin marketplace add {_source_arg()} && claude plugin install lethe@lethe-sql   "
               "(or in Claude Code: /plugin marketplace add ..., /plugin install lethe@lethe-sql)")
    who = f"claude is {claude}" if claude else "claude is not on PATH"
    if not sources:
        return Check("claude", "Claude Code", "warn",
                     f"the lethe plugin is not installed in {home}; {who} (optional)", install,
                     needed=False, data=data)
    bad = sorted({f"{path}: `{_program(c)}`" for path, c in sources if _resolves(_program(c)) is None})
    progs = sorted({_resolves(_program(c)) or _program(c) for _, c in sources})
    data["commands"] = [c for _, c in sources]
    if bad:
        return Check("claude", "Claude Code", "fail",
                     f"the lethe hooks call a program that does not resolve: {'; '.join(bad)}",
                     _install_fix(), data=data)
    where = ", ".join(str(p) for p in plugin_dirs) or str(settings)
    return Check("claude", "Claude Code", "ok" if claude else "warn",
                 f"lethe hooks in {where} run {', '.join(progs)}; {who}",
                 None if claude else "install Claude Code, or ignore this if you do not use it",
                 needed=bool(claude), data=data)


def check_codex() -> Check:
    import tomllib

    from lethe_sql.agents.install import END
    from lethe_sql.agents.mine import codex_home

    cfg = codex_home() / "config.toml"
    codex = shutil.which("codex")
    data: dict = {"codex": codex, "config": str(cfg)}
    who = f"codex is {codex}" if codex else "codex is not on PATH"
    try:
        text = cfg.read_text(encoding="utf-8")
    except OSError:
        text = ""
    if END not in text:
        return Check("codex", "Codex", "warn", f"no lethe block in {cfg}; {who} (optional)",
                     "lethe install codex", needed=False, data=data)
    try:
        conf = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        return Check("codex", "Codex", "fail", f"{cfg} holds lethe's block but is not valid TOML ({exc})",
                     f"fix {cfg} by hand, then: lethe install codex", data=data)
    commands = []
    notify = conf.get("notify")
    if isinstance(notify, list) and notify[1:3] == ["hook", "codex-notify"]:
        commands.append(str(notify[0]))
    mcp = (conf.get("mcp_servers") or {}).get("lethe")
    if isinstance(mcp, dict) and isinstance(mcp.get("command"), str):
        commands.append(mcp["command"])
    data["commands"] = commands
    bad = [c for c in commands if _resolves(c) is None]
    if bad:
        return Check("codex", "Codex", "fail", f"{cfg} runs `{bad[0]}`, which does not resolve",
                     _install_fix(), data=data)
    if not commands:
        return Check("codex", "Codex", "warn", f"{cfg} has lethe's markers but neither its notify nor its MCP server",
                     "lethe install codex", needed=False, data=data)
    progs = sorted({_resolves(c) or c for c in commands})
    return Check("codex", "Codex", "ok", f"{cfg} runs {', '.join(progs)} (notify, MCP); {who}", data=data)


def run_checks(start: Path | None = None) -> list[Check]:
    return [check_path(), check_embedder(), check_reranker(), check_project(start), check_claude(), check_codex()]


def failed(checks: list[Check]) -> list[Check]:
    return [c for c in checks if c.status == "fail"]
