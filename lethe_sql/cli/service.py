"""``lethe serve``: one warm process per user that runs the frequent commands.

A cold ``lethe search`` pays about 0.8 s before it does anything (imports, the ONNX
session) on a quiet machine, and several agents' hooks run ``lethe`` many times a
minute. The service keeps the modules and the model loaded, and the ``lethe``
executable hands it the command when it answers (``client.py``; about 40 ms for the
hand-off itself). Properties:

* **Started on demand, gone when idle.** The first ``lethe`` command that finds no
  service starts one in the background (and runs its own command itself meanwhile);
  the service exits after ``LETHE_SERVE_IDLE`` seconds without a request (600) or when
  the code installed changes (``client.fingerprint``). ``LETHE_SERVE=0`` turns it off:
  every command then runs in its own process, as it always can.
* **One command at a time, in arrival order.** Requests queue in one worker thread: the
  service is a fair, single writer among lethe's processes, and it takes the same
  project lock as any other (``locks.py``), so it and cold processes never collide.
* **It holds an index for writing only while busy.** Commands that arrive back to back
  share one open index per project (no reopening, no WAL replay, prepared statements
  kept); when the queue runs dry, or after ``HOLD_SECONDS`` of holding, it closes the
  index and lets go of the project lock, so any other lethe process, and any DuckDB
  client, gets its turn.
* **It keeps a read-only reader per project between commands** (the prompt hook's
  search, ``lethe search``): opening the index, checking its schema and planning the
  first stage again cost 45-80 ms of every prompt (bench/results/hook-latency). A
  read-only connection holds the project lock shared, so other lethe readers and plain
  DuckDB clients can still read the file; and it never stands in a writer's way: the
  service closes it before it writes that project itself, a watcher thread closes it as
  soon as another process waits to write (a waiting lethe writer holds ``.gate.lock``,
  ``locks.py``; tested every ``WATCH_SECONDS``), and it closes after
  ``READER_IDLE_SECONDS`` unused (``LETHE_SERVE_READER_IDLE``; 0 keeps none), and when
  a command of its own opens the file another way (``lethe status``, a cross-project
  search: ``db.BEFORE_OPEN``). A search through it defers what it learns to the next
  writer, as any read-only search does (``learn.record_pending``). After a
  command that wrote a project (the Stop hook's reindex, ``lethe add``) the service
  opens the reader again once the reply is sent, and plans the prompt's search on it
  (a warm-up search), so the next prompt finds it ready. A plain DuckDB client that
  wants to *write* the file meanwhile must wait for that, or stop the service.
* **The command runs as if in the caller's process**: its arguments, working folder and
  environment, with its standard input, output and exit status carried back.

The socket (``client.socket_path``) lives in ``$LETHE_HOME/run`` (mode 0700), so only
its user can reach it; a lock file there makes the service single.
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import json
import os
import queue
import socket
import sys
import threading
import time
import traceback
from pathlib import Path

from .. import client

IDLE_SECONDS = 600.0
#: the longest the service keeps an index open while commands keep coming
HOLD_SECONDS = 1.0
#: how long a project's read-only reader stays open unused (``LETHE_SERVE_READER_IDLE``; 0: none kept)
READER_IDLE_SECONDS = 60.0
#: how often the watcher tests whether another process waits to write a project the service reads
WATCH_SECONDS = 0.025
#: what the warm-up search after a write asks (it plans the prompt hook's statements)
WARM_QUERY = "warm up the index for the next prompt"
LOG_MAX_BYTES = 1 << 20


def idle_seconds() -> float:
    try:
        return max(1.0, float(os.environ.get("LETHE_SERVE_IDLE", IDLE_SECONDS)))
    except ValueError:
        return IDLE_SECONDS


def reader_idle_seconds() -> float:
    try:
        return max(0.0, float(os.environ.get("LETHE_SERVE_READER_IDLE", READER_IDLE_SECONDS)))
    except ValueError:
        return READER_IDLE_SECONDS


def writer_waits(gate_fd: int) -> bool:
    """Whether a lethe writer holds the project's gate (``locks.py``): it takes it
    exclusively while it waits for the readers to leave, and keeps it while it writes."""
    try:
        fcntl.flock(gate_fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    fcntl.flock(gate_fd, fcntl.LOCK_UN)
    return False


class _Reader:
    """A project's kept read-only store, the gate file the watcher tests, its last use."""

    def __init__(self, store, gate_fd: int) -> None:
        self.store = store
        self.gate = gate_fd
        self.used = time.monotonic()

    def close(self) -> None:
        try:
            self.store.close()
        finally:
            with contextlib.suppress(OSError):
                os.close(self.gate)
            # a command still holding this store must not reopen it behind the service's back
            # (no one would close it, and it would keep the lock from every writer)
            self.store._open = _reader_closed


def _reader_closed():
    from ..errors import DatabaseLocked

    raise DatabaseLocked("the index was handed to a writer meanwhile; run the command again")


class Service:
    def __init__(self) -> None:
        self.path = client.socket_path()
        self.run_dir = self.path.parent
        self.version = client.fingerprint()
        self.jobs: "queue.Queue" = queue.Queue()
        self.last = time.monotonic()
        self.stop = threading.Event()
        self._lock_fd: int | None = None
        self.stores: dict = {}        # project root -> MemoryStore kept open while busy
        self.pending_after: list = []  # clean-ups of the current command (after_reply)
        self.held_since: float | None = None
        # read-only readers kept between commands (see the module's docstring); the worker
        # uses them, the watcher closes them, both under ``rmutex``
        self.reader_idle = reader_idle_seconds()
        self.readers: dict = {}           # project root -> _Reader
        self.rmutex = threading.Lock()
        self.in_use: set = set()          # roots whose reader the running command was given
        self.release_wanted: set = set()  # of those, the ones a writer waits for: closed after it
        self.reader_opened = threading.Event()

    # -- life -----------------------------------------------------------------
    def claim(self) -> bool:
        """Become the one service of this user, or return False."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.run_dir, 0o700)
        fd = os.open(self.run_dir / "serve.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self._lock_fd = fd
        return True

    def log(self, msg: str) -> None:
        path = self.run_dir / "serve.log"
        with contextlib.suppress(OSError):
            if path.exists() and path.stat().st_size > LOG_MAX_BYTES:
                path.replace(path.with_suffix(".log.1"))
            with open(path, "a") as fh:
                fh.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} [{os.getpid()}] {msg}\n")

    def warm(self) -> None:
        """Import what commands need and load the embedding model once."""
        from . import app  # noqa: F401  (the whole CLI and its imports)
        from ..udfs.embed import shared_embedder

        with contextlib.suppress(Exception):
            shared_embedder().encode(["warm up"])
        from ..agents import hooks
        from . import common

        hooks.BACKGROUND = self.schedule_index  # the hooks' reindex runs here, after the reply
        hooks.KEPT_STORE = self.kept  # the prompt hook reads through an index this process holds
        hooks.AFTER_REPLY = self.after_reply
        common.STORES = self.store
        from .. import db

        db.BEFORE_OPEN = self.before_open  # a store opened another way first closes the kept reader

    def serve(self) -> int:
        if not self.claim():
            return 0
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        srv.bind(str(self.path))
        os.chmod(self.path, 0o600)
        srv.listen(64)
        srv.settimeout(1.0)
        self.log(f"listening on {self.path}")
        self.warm()
        worker = threading.Thread(target=self.work, name="lethe-worker", daemon=True)
        worker.start()
        threading.Thread(target=self.watch, name="lethe-reader-watch", daemon=True).start()
        try:
            while not self.stop.is_set():
                try:
                    conn, _ = srv.accept()
                except socket.timeout:
                    if time.monotonic() - self.last > idle_seconds() and self.jobs.empty():
                        self.log("idle: exiting")
                        break
                    continue
                self.last = time.monotonic()
                threading.Thread(target=self.answer, args=(conn,), daemon=True).start()
        finally:
            self.stop.set()
            self.jobs.put(None)
            worker.join(timeout=30)
            self.release_if_idle(force=True, warm=False)
            self.close_readers()
            with contextlib.suppress(OSError):
                srv.close()
            with contextlib.suppress(FileNotFoundError):
                if self.path.exists():
                    self.path.unlink()
        return 0

    # -- requests -------------------------------------------------------------
    def answer(self, conn: socket.socket) -> None:
        with conn:
            try:
                req = client._recv(conn)
            except (OSError, ValueError):
                return
            if not req:
                return
            if req.get("stop"):
                self.log("asked to stop")
                self.stop.set()
                with contextlib.suppress(OSError):
                    client._send(conn, {"stopped": True})
                return
            if req.get("version") != self.version:
                with contextlib.suppress(OSError):
                    client._send(conn, {"stale": True})
                self.log("a client runs other code: exiting")
                self.stop.set()
                return
            done = threading.Event()
            box: dict = {}
            self.jobs.put((req, done, box))
            done.wait()
            self.last = time.monotonic()
            with contextlib.suppress(OSError):
                client._send(conn, box["reply"])

    def schedule_index(self, root: Path) -> None:
        """The hooks' background reindex: queued behind the command that asked for it."""
        self.jobs.put(("index", Path(root), None))

    def work(self) -> None:
        while True:
            job = self.jobs.get()
            if job is None:
                return
            if job[0] == "index":
                self.index_job(job[1])
                continue
            req, done, box = job
            t0 = time.monotonic()
            try:
                box["reply"] = self.execute(req)
                self.log(f"lethe {client.command_of(req.get('argv') or [])} -> {box['reply']['code']} "
                         f"in {(time.monotonic() - t0) * 1000:.0f} ms")
            except BaseException as exc:  # noqa: BLE001 - never lose the worker
                box["reply"] = crash_reply(req.get("argv") or [], exc)
                self.log(traceback.format_exc())
            finally:
                done.set()  # the reply goes out now; closing what the command opened comes after
                self.run_after_reply()
                failed = bool(box.get("reply", {}).get("code"))
                self.end_reads(failed=failed)
                if failed:
                    self.release_if_idle(force=True, warm=False)  # a failed command leaves nothing half done open
                else:
                    self.release_if_idle()

    def after_reply(self, fn) -> None:
        """Run ``fn`` once the current command's reply is sent, before the next command."""
        self.pending_after.append(fn)

    def run_after_reply(self) -> None:
        while self.pending_after:
            fn = self.pending_after.pop(0)
            try:
                fn()
            except Exception:  # noqa: BLE001 - a clean-up never stops the worker
                self.log(traceback.format_exc())

    def index_job(self, root: Path) -> None:
        try:
            with self.store(Path(root), read_only=False, create=True) as store:
                store.index()
            (Path(root) / ".lethe" / "index" / ".reindex.pending").unlink(missing_ok=True)
        except Exception:  # noqa: BLE001
            self.log(traceback.format_exc())
        finally:
            self.release_if_idle()

    # -- kept stores ------------------------------------------------------------
    def store(self, root: Path, *, read_only: bool = False, create: bool = True):
        """The store a command gets: one per project, opened for writing, kept open between
        commands while the queue is busy (it serves reads too while it is open). A command
        that only reads, with none open for writing, gets the project's kept reader."""
        from ..errors import NotAProject
        from ..settings import load_settings
        from ..store import LETHE_DIR, MemoryStore

        root = Path(root).expanduser().resolve()
        kept = self.stores.get(root)
        if kept is None:
            if not (root / LETHE_DIR).is_dir() and (read_only or not create):
                raise NotAProject(f"{root} has no .lethe folder; run `lethe init` there first")
            if read_only and not (root / LETHE_DIR / "index" / "lethe.duckdb").exists():
                raise NotAProject(f"{root} has no index yet; run `lethe index` there first")
            if read_only and self.reader_idle > 0:  # reads go through the kept reader
                return _Kept(self.reader(root))
            self.drop_reader(root)  # this process cannot write the file while it reads it
            kept = self.stores[root] = MemoryStore(root)
            if self.held_since is None:
                self.held_since = time.monotonic()
        kept.settings = load_settings(root)  # this request's environment
        return _Kept(kept)

    def kept(self, root: Path, lock_wait: float | None = None):
        """The store the prompt hook reads ``root`` through: the one this process holds open
        for writing (between back-to-back commands), else the project's kept reader (opened
        now if none, waiting at most ``lock_wait`` for a writer), or None when none is kept."""
        root = Path(root).expanduser().resolve()
        kept = self.stores.get(root)
        if kept is not None or self.reader_idle <= 0:
            return kept
        return self.reader(root, lock_wait)

    # -- kept readers -----------------------------------------------------------
    def reader(self, root: Path, lock_wait: float | None = None):
        """The read-only store kept for ``root``, opened if none is, for the running command
        (the watcher leaves it open until the command ends)."""
        from ..settings import load_settings
        from ..store import MemoryStore

        with self.rmutex:
            self.in_use.add(root)
            r = self.readers.get(root)
        if r is None:
            store = MemoryStore(root, read_only=True, create=False)
            store._lock.acquire(exclusive=False, timeout=lock_wait)
            store.con  # opens under the lock just taken; on failure it lets go of it
            gate = os.open(store._lock.dir / ".gate.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            r = _Reader(store, gate)
            with self.rmutex:
                self.readers[root] = r
            self.reader_opened.set()
        else:
            r.store.settings = load_settings(root)  # this request's environment
        r.used = time.monotonic()
        return r.store

    def _close_reader(self, root: Path, why: str) -> None:
        """Close ``root``'s reader (the caller holds ``rmutex``)."""
        r = self.readers.pop(root, None)
        if r is not None:
            try:
                r.close()
            except Exception:  # noqa: BLE001
                self.log(traceback.format_exc())
            self.log(f"closed the reader of {root}: {why}")

    def drop_reader(self, root: Path) -> None:
        """Close ``root``'s reader before this process writes that project."""
        with self.rmutex:
            self._close_reader(root, "the service writes")

    def before_open(self, path: Path, opener=None) -> None:
        """This process is about to open ``path`` other than through the kept reader (a
        command that opens its own store, a cross-project search attaching it): close the
        reader of that file first, unless the running command is using it."""
        path = Path(path).expanduser().resolve()
        with self.rmutex:
            for root, r in list(self.readers.items()):
                if r.store is not opener and root not in self.in_use and Path(r.store.db_path).resolve() == path:
                    self._close_reader(root, "this process opens it another way")

    def close_readers(self) -> None:
        with self.rmutex:
            for root in list(self.readers):
                self._close_reader(root, "the service exits")

    def end_reads(self, failed: bool = False) -> None:
        """After a command: close the readers it used that a writer waits for (or all it
        used, when it failed), and hand the rest back to the watcher."""
        with self.rmutex:
            for root in self.in_use:
                if root in self.release_wanted:
                    self._close_reader(root, "a writer waits")
                elif failed:
                    self._close_reader(root, "a command failed")
            self.in_use.clear()
            self.release_wanted.clear()

    def watch(self) -> None:
        """Close a reader as soon as another process waits to write its project, or once it
        has stayed unused ``reader_idle`` seconds; a reader a command is using is closed
        right after that command (``end_reads``)."""
        while not self.stop.is_set():
            with self.rmutex:
                have = bool(self.readers)
            if not have:
                if self.reader_opened.wait(1.0):
                    self.reader_opened.clear()
                continue
            if self.stop.wait(WATCH_SECONDS):
                return
            now = time.monotonic()
            with self.rmutex:
                for root, r in list(self.readers.items()):
                    waits = writer_waits(r.gate)
                    if not waits and now - r.used < self.reader_idle:
                        continue
                    if root in self.in_use:
                        if waits:
                            self.release_wanted.add(root)
                    else:
                        self._close_reader(root, "a writer waits" if waits else "idle")

    def prewarm(self, root: Path) -> None:
        """Open ``root``'s reader and plan the prompt hook's search on it: a warm-up search
        (learns nothing), run after a command that wrote the project, once its reply is out."""
        from ..agents import hooks
        from ..errors import LetheError

        t0 = time.monotonic()
        try:
            self.reader(root, lock_wait=0)
            hooks.recall(root, WARM_QUERY, hooks._settings(root))
            self.log(f"warmed the reader of {root} in {(time.monotonic() - t0) * 1000:.0f} ms")
        except LetheError as exc:  # another process writes it now (or no index yet): the next read opens it
            self.log(f"no warm reader for {root}: {exc}")
        except Exception:  # noqa: BLE001
            self.log(traceback.format_exc())
        finally:
            self.end_reads()

    def release_if_idle(self, force: bool = False, warm: bool = True) -> None:
        """Close the kept stores when nothing waits, or when they were held long enough;
        then (``warm``, nothing queued) open the readers of the projects just written."""
        if not self.stores:
            return
        busy = not self.jobs.empty()
        if not force and busy and self.held_since is not None and time.monotonic() - self.held_since < HOLD_SECONDS:
            return
        roots = list(self.stores)
        for store in self.stores.values():
            with contextlib.suppress(Exception):
                store.close()
        self.stores.clear()
        self.held_since = None
        if warm and self.reader_idle > 0:
            for root in roots:
                if self.stop.is_set() or not self.jobs.empty():
                    break
                self.prewarm(root)

    _command = None

    def command(self):
        """The CLI as a click command, built once (typer builds it anew on every call: 24 ms)."""
        if self._command is None:
            import typer.main

            from .app import app

            self._command = typer.main.get_command(app)
        return self._command

    def execute(self, req: dict) -> dict:
        """Run one ``lethe`` command line as the caller would have, capturing its output."""
        saved_env, saved_cwd = dict(os.environ), os.getcwd()
        saved_io = sys.stdin, sys.stdout, sys.stderr
        out, err = io.StringIO(), io.StringIO()
        code = 0
        try:
            os.environ.clear()
            os.environ.update({str(k): str(v) for k, v in (req.get("env") or {}).items()})
            os.chdir(req.get("cwd") or "/")
            sys.stdin = io.StringIO(req.get("stdin") or "")
            sys.stdout, sys.stderr = out, err
            try:
                self.command().main(args=list(req.get("argv") or []), prog_name="lethe", standalone_mode=True)
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except Exception as exc:  # noqa: BLE001
            crash = crash_reply(req.get("argv") or [], exc)
            code = 1
            out.write(crash["stdout"])
            err.write(crash["stderr"])
            self.log(traceback.format_exc())
        finally:
            sys.stdin, sys.stdout, sys.stderr = saved_io
            os.environ.clear()
            os.environ.update(saved_env)
            with contextlib.suppress(OSError):
                os.chdir(saved_cwd)
        return {"stdout": out.getvalue(), "stderr": err.getvalue(), "code": code}


def crash_reply(argv: list, exc: BaseException) -> dict:
    """The reply for a command that raised what the CLI does not turn into a message: its
    text as lethe's one error line, or as the JSON error when the command line asked for --json."""
    from ..errors import asked_for_json, error_object

    if asked_for_json(argv):
        return {"stdout": json.dumps(error_object(str(exc), "error"), indent=2) + "\n", "stderr": "", "code": 1}
    return {"stdout": "", "stderr": f"lethe: error: {exc}\n", "code": 1}


class _Kept:
    """A kept store as a command sees it: closing it leaves it open for the next command."""

    def __init__(self, store) -> None:
        object.__setattr__(self, "_store", store)

    def __getattr__(self, name):
        return getattr(self._store, name)

    def __setattr__(self, name, value) -> None:
        setattr(self._store, name, value)

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass


def status() -> dict:
    """Whether a service answers, and where."""
    path = client.socket_path()
    alive = False
    with contextlib.suppress(OSError), socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(str(path))
        alive = True
    return {"running": alive, "socket": str(path)}


def stop() -> bool:
    """Ask the running service to exit; whether one was running."""
    path = client.socket_path()
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.connect(str(path))
            client._send(s, {"stop": True})
            client._recv(s)
    except OSError:
        return False
    return True


def main() -> int:
    return Service().serve()


if __name__ == "__main__":
    sys.exit(main())
