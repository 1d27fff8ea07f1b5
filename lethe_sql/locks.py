"""The project's index lock: many readers or one writer, granted in turn.

DuckDB admits one read-write process or many read-only ones per database file, never
both, and a process that finds the file taken fails at once. So every lethe process
takes this lock before it opens the index, and holds it only while the connection is
open: shared to read (``lethe search``, ``explain``, ``list``), exclusive to write
(``add``, ``index``, the hooks, curation, learning).

Two ``flock`` files in ``.lethe/index`` make it fair:

* ``.gate.lock``: a writer takes it exclusively and keeps it while it waits for the
  readers in place to leave; a reader takes and drops it before reading. So once a
  writer waits, readers arriving after it wait too (no writer starves behind a stream
  of searches), and writers queue on the gate in the kernel's order, not by polling.
* ``.rw.lock``: shared for readers, exclusive for the writer.

The waits block in the kernel (a timer interrupts them after ``LETHE_LOCK_TIMEOUT``
seconds, default 60, in the main thread; other threads poll). A plain DuckDB client
knows nothing of this lock: it can open the file read-only whenever no lethe process
is writing (``db.open_duckdb`` retries briefly when it meets one).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import threading
import time
from pathlib import Path

from .errors import DatabaseLocked

DEFAULT_TIMEOUT = 60.0


def lock_timeout() -> float:
    """``LETHE_LOCK_TIMEOUT`` in seconds (default 60); a bad value is a one-line error."""
    from .settings import env_value

    return env_value("LETHE_LOCK_TIMEOUT", "float", DEFAULT_TIMEOUT, least=0)


class _Timeout(Exception):
    pass


def _flock(fd: int, op: int, timeout: float, what: str) -> None:
    """``flock(fd, op)``, waiting at most ``timeout`` seconds."""
    try:
        fcntl.flock(fd, op | fcntl.LOCK_NB)
        return
    except BlockingIOError:
        if timeout <= 0:
            raise DatabaseLocked(f"{what} is in use by another lethe process") from None
    if threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer"):
        def alarm(signum, frame):  # noqa: ARG001
            raise _Timeout

        old = signal.signal(signal.SIGALRM, alarm)
        signal.setitimer(signal.ITIMER_REAL, timeout)
        try:
            fcntl.flock(fd, op)
            return
        except _Timeout:
            pass
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
    else:  # no signals outside the main thread: poll
        deadline = time.monotonic() + timeout
        delay = 0.002
        while time.monotonic() < deadline:
            try:
                fcntl.flock(fd, op | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                time.sleep(delay)
                delay = min(delay * 1.5, 0.05)
    raise DatabaseLocked(
        f"{what} stayed in use by another lethe process for {timeout:g} s (LETHE_LOCK_TIMEOUT); try again"
    )


class ProjectLock:
    """The lock of one index folder; ``acquire(exclusive)`` / ``release()``, or use
    ``hold(exclusive)`` as a context manager."""

    def __init__(self, index_dir: str | os.PathLike) -> None:
        self.dir = Path(index_dir)
        self._gate: int | None = None
        self._rw: int | None = None
        self.exclusive = False

    @property
    def held(self) -> bool:
        return self._rw is not None

    def _open(self, name: str) -> int:
        self.dir.mkdir(parents=True, exist_ok=True)
        return os.open(self.dir / name, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)

    def acquire(self, exclusive: bool, timeout: float | None = None) -> None:
        if self.held:
            if exclusive and not self.exclusive:
                raise RuntimeError("a shared project lock cannot be upgraded; release it first")
            return
        timeout = lock_timeout() if timeout is None else timeout
        deadline = time.monotonic() + timeout
        what = f"the index in {self.dir}"
        gate = self._open(".gate.lock")
        rw = None
        try:
            _flock(gate, fcntl.LOCK_EX, timeout, what)
            if not exclusive:  # let a waiting writer go first, then read beside other readers
                fcntl.flock(gate, fcntl.LOCK_UN)
                os.close(gate)
                gate = -1
            rw = self._open(".rw.lock")
            _flock(rw, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH,
                   max(0.0, deadline - time.monotonic()), what)
        except BaseException:
            if rw is not None:
                os.close(rw)
            if gate >= 0:
                os.close(gate)
            raise
        self._gate = gate if exclusive else None
        self._rw = rw
        self.exclusive = exclusive

    def release(self) -> None:
        for fd in (self._rw, self._gate):
            if fd is not None:
                with contextlib.suppress(OSError):
                    fcntl.flock(fd, fcntl.LOCK_UN)
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._rw = self._gate = None
        self.exclusive = False

    @contextlib.contextmanager
    def hold(self, exclusive: bool, timeout: float | None = None):
        already = self.held
        self.acquire(exclusive, timeout)
        try:
            yield self
        finally:
            if not already:
                self.release()

    def __del__(self) -> None:  # a store dropped without close(): never keep the lock
        with contextlib.suppress(Exception):
            self.release()
