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
* **It holds a database only while busy.** Commands that arrive back to back share one
  open index per project (no reopening, no WAL replay, prepared statements kept); when
  the queue runs dry, or after ``HOLD_SECONDS`` of holding, it closes the index and lets
  go of the project lock, so any other lethe process, and any DuckDB client, gets its
  turn. Only the models stay loaded while idle.
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
LOG_MAX_BYTES = 1 << 20


def idle_seconds() -> float:
    try:
        return max(1.0, float(os.environ.get("LETHE_SERVE_IDLE", IDLE_SECONDS)))
    except ValueError:
        return IDLE_SECONDS


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
            self.release_if_idle(force=True)
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
                if box.get("reply", {}).get("code"):
                    self.release_if_idle(force=True)  # a failed command leaves nothing half done open
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
        """The store a command gets: one per project, opened for writing (it serves reads
        too, and learns at once), kept open between commands while the queue is busy."""
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
            kept = self.stores[root] = MemoryStore(root)
            if self.held_since is None:
                self.held_since = time.monotonic()
        kept.settings = load_settings(root)  # this request's environment
        return _Kept(kept)

    def kept(self, root: Path):
        """The store this process holds open for ``root`` (between back-to-back commands), or None."""
        return self.stores.get(Path(root).expanduser().resolve())

    def release_if_idle(self, force: bool = False) -> None:
        """Close the kept stores when nothing waits, or when they were held long enough."""
        if not self.stores:
            return
        busy = not self.jobs.empty()
        if not force and busy and self.held_since is not None and time.monotonic() - self.held_since < HOLD_SECONDS:
            return
        for store in self.stores.values():
            with contextlib.suppress(Exception):
                store.close()
        self.stores.clear()
        self.held_since = None

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
