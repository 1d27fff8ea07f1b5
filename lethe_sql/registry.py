"""The global registry of projects: ``$LETHE_HOME/projects.json`` (default ``~/.lethe``).

It lists project roots, never content: for each project its absolute root, a stable
slug (the name it is attached under in cross-project search and ``lethe sql``) and
when it was registered::

    {"version": 1, "projects": [
        {"slug": "payments", "root": "/home/me/code/payments", "registered_at": "2026-11-23T13:50:02+00:00"}]}

Every change is a read-modify-write under an exclusive ``fcntl`` lock on
``projects.lock`` beside the file, written to a temporary file and renamed over the
old one, so concurrent ``lethe index`` runs never lose an entry or leave half a file.

A slug is the root's folder name reduced to ``[a-z][a-z0-9_]*`` (at most 40
characters); when another root already holds that slug, or it is a name DuckDB
reserves for a catalog, a short hash of the root is appended. A root keeps its slug
for as long as it stays registered.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import tempfile
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

from .errors import LetheError, UsageError

REGISTRY_VERSION = 1
SLUG_RE = re.compile(r"^[a-z][a-z0-9_]{0,39}$")
# catalog names DuckDB gives a meaning to, and names the union views use
RESERVED = {"memory", "system", "temp", "main", "information_schema", "pg_catalog", "all", "lethe"}


class RegistryError(LetheError):
    """The registry file cannot be read or written."""


@dataclass(frozen=True)
class Project:
    slug: str
    root: str
    registered_at: str

    @property
    def db_path(self) -> Path:
        return Path(self.root) / ".lethe" / "index" / "lethe.duckdb"

    def as_dict(self) -> dict:
        return asdict(self)


def lethe_home(env: dict | None = None) -> Path:
    from .client import home_dir

    env = os.environ if env is None else env
    home = Path(home_dir(env))
    return home.resolve() if env.get("LETHE_HOME") else home


def registry_path(env: dict | None = None) -> Path:
    return lethe_home(env) / "projects.json"


def _truthy(value) -> bool:
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in ("1", "true", "yes", "on")


def auto_register_enabled(root: str | os.PathLike, env: dict | None = None) -> bool:
    """Whether ``lethe index`` registers ``root``: not when LETHE_DISABLE_GLOBAL_REGISTRY
    is set true, else LETHE_AUTO_REGISTER, else ``auto_register`` in the project's
    ``.lethe/config.toml`` (flat or in any table), else yes."""
    env = os.environ if env is None else env
    if _truthy(env.get("LETHE_DISABLE_GLOBAL_REGISTRY", "")):
        return False
    if "LETHE_AUTO_REGISTER" in env:
        return _truthy(env["LETHE_AUTO_REGISTER"])
    cfg = Path(root) / ".lethe" / "config.toml"
    if cfg.is_file():
        import tomllib

        try:
            data = tomllib.loads(cfg.read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError):
            return True
        flat = {}
        for k, v in data.items():
            if isinstance(v, dict):
                flat.update(v)
            else:
                flat[k] = v
        if "auto_register" in flat:
            return _truthy(flat["auto_register"])
    return True


def _base_slug(root: Path) -> str:
    s = re.sub(r"[^a-z0-9_]+", "_", root.name.lower()).strip("_")
    if not s or not s[0].isalpha():
        s = "p_" + s if s else "project"
    return s[:40].rstrip("_") or "project"


def _hashed(base: str, root: Path, n: int = 6) -> str:
    h = hashlib.sha256(str(root).encode("utf-8")).hexdigest()[:n]
    return f"{base[: 39 - n]}_{h}"


def make_slug(root: Path, taken: set[str]) -> str:
    base = _base_slug(root)
    if base not in taken and base not in RESERVED:
        return base
    for n in (6, 10, 16):
        s = _hashed(base, root, n)
        if s not in taken:
            return s
    raise RegistryError(f"cannot find a free slug for {root}")


class Registry:
    """Read and change ``projects.json``; every change holds the lock."""

    def __init__(self, path: str | os.PathLike | None = None) -> None:
        self.path = Path(path) if path else registry_path()
        self.lock_path = self.path.with_name(self.path.name.replace(".json", "") + ".lock")

    # -- reading ------------------------------------------------------------
    def _read(self) -> list[Project]:
        try:
            raw = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise RegistryError(f"cannot read {self.path}: {exc.strerror or exc}") from None
        try:
            data = json.loads(raw) if raw.strip() else {"projects": []}
            rows = data["projects"] if isinstance(data, dict) else None
            if not isinstance(rows, list):
                raise ValueError("no 'projects' list")
            return [Project(str(p["slug"]), str(p["root"]), str(p.get("registered_at", ""))) for p in rows]
        except (ValueError, KeyError, TypeError) as exc:
            raise RegistryError(f"{self.path} is not a valid lethe registry ({exc}); fix or delete it") from None

    def projects(self) -> list[Project]:
        return sorted(self._read(), key=lambda p: p.slug)

    def find(self, slug_or_path: str) -> Project | None:
        rows = self._read()
        for p in rows:
            if p.slug == slug_or_path:
                return p
        try:
            target = str(Path(slug_or_path).expanduser().resolve())
        except (OSError, RuntimeError):
            return None
        for p in rows:
            if p.root == target:
                return p
        return None

    # -- writing ------------------------------------------------------------
    @contextlib.contextmanager
    def _locked(self):
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fh = open(self.lock_path, "a")
        except OSError as exc:
            raise RegistryError(f"cannot write the registry in {self.path.parent}: {exc.strerror or exc}") from None
        with fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def _write(self, rows: list[Project]) -> None:
        data = {"version": REGISTRY_VERSION, "projects": [p.as_dict() for p in sorted(rows, key=lambda p: p.slug)]}
        blob = (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
        fd, tmp = tempfile.mkstemp(prefix=".projects.", suffix=".tmp", dir=self.path.parent)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(blob)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    def add(self, root: str | os.PathLike) -> tuple[Project, bool]:
        """Register ``root`` (a folder holding ``.lethe/``); returns (project, newly added)."""
        path = Path(root).expanduser().resolve()
        if not (path / ".lethe").is_dir():
            raise UsageError(f"{path} is not a lethe project (no .lethe folder); run `lethe init` there first")
        with self._locked():
            rows = self._read()
            for p in rows:
                if p.root == str(path):
                    return p, False
            slug = make_slug(path, {p.slug for p in rows})
            now = datetime.now(timezone.utc).replace(microsecond=0).isoformat()
            project = Project(slug, str(path), now)
            self._write(rows + [project])
        return project, True

    def remove(self, slug_or_path: str) -> Project:
        with self._locked():
            rows = self._read()
            hit = None
            for p in rows:
                if p.slug == slug_or_path:
                    hit = p
            if hit is None:
                target = str(Path(slug_or_path).expanduser().resolve())
                hit = next((p for p in rows if p.root == target), None)
            if hit is None:
                raise UsageError(f"no registered project {slug_or_path!r} (see `lethe projects list`)")
            self._write([p for p in rows if p is not hit])
        return hit

    def prune(self) -> list[Project]:
        """Drop projects whose root (or its .lethe folder) no longer exists; returns them."""
        with self._locked():
            rows = self._read()
            gone = [p for p in rows if not (Path(p.root) / ".lethe").is_dir()]
            if gone:
                self._write([p for p in rows if p not in gone])
        return gone

    def select(self, names: list[str] | None) -> list[Project]:
        """All projects (``names`` None) or the named ones (slugs or roots), in the given order."""
        if names is None:
            rows = self.projects()
            if not rows:
                raise UsageError(
                    f"no projects registered in {self.path}; run `lethe index` in a project or `lethe projects add PATH`"
                )
            return rows
        out: list[Project] = []
        for n in names:
            p = self.find(n)
            if p is None:
                raise UsageError(f"no registered project {n!r} (see `lethe projects list`)")
            if p not in out:
                out.append(p)
        if not out:
            raise UsageError("--projects names no project")
        return out


def register_quietly(root: str | os.PathLike) -> tuple[Project | None, str | None]:
    """Auto-registration after ``lethe index``: (project or None, warning or None)."""
    if not auto_register_enabled(root):
        return None, None
    try:
        project, _ = Registry().add(root)
        return project, None
    except LetheError as exc:
        return None, f"not registered in the global registry: {exc}"
