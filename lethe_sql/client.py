"""The thin side of ``lethe serve``: hand a command to the running service.

Imported by the ``lethe`` executable (``entry.py``) before anything heavy: only the
standard library. The protocol, one request per connection over a Unix socket that
only this user can open: a 4-byte big-endian length, then JSON. Request ``{"version",
"argv", "cwd", "env", "stdin"}``; reply ``{"stdout", "stderr", "code"}`` or
``{"stale": true}`` when the service runs other code than this executable (it then
exits, and the command runs here).
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import struct
import subprocess
import sys
from pathlib import Path

PKG = Path(__file__).resolve().parent
#: commands the service runs; the others (interactive, long or rare) always run here
SERVED = frozenset({"search", "add", "index", "explain", "list", "expand", "status", "hook", "forget",
                    "revisions", "restore", "rif"})
#: of those, the ones that read standard input
READS_STDIN = frozenset({"hook"})
#: and the ones that may run again here when the service died mid-command (idempotent)
RETRY_HERE = frozenset({"search", "add", "index", "explain", "list", "expand", "status", "hook", "rif"})


def lethe_home() -> Path:
    return Path(os.environ.get("LETHE_HOME") or Path.home() / ".lethe").expanduser()


def socket_path() -> Path:
    """Where this user's service listens: ``$LETHE_HOME/run/serve.sock``, or a short path
    under /tmp when that one is too long for a Unix socket."""
    run = lethe_home() / "run"
    path = run / "serve.sock"
    if len(str(path)) <= 100:
        return path
    digest = hashlib.sha256(str(run).encode()).hexdigest()[:12]
    return Path(f"/tmp/lethe-{os.getuid()}") / f"{digest}.sock"


def fingerprint() -> str:
    """The code this executable runs: a service running other code must not answer."""
    from . import __version__

    h = hashlib.sha256(f"{__version__}|{PKG}".encode())
    for folder in (PKG, PKG.parent / "sql", PKG.parent / "migrations", PKG / "sql", PKG / "migrations"):
        try:
            for p in sorted(folder.glob("*.py")) + sorted(folder.glob("*.sql")):
                st = p.stat()
                h.update(f"{p.name}:{st.st_mtime_ns}:{st.st_size}".encode())
        except OSError:
            continue
    return h.hexdigest()[:16]


def command_of(argv: list[str]) -> str | None:
    """The subcommand of a ``lethe`` command line (after the global options)."""
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--root":
            i += 2
            continue
        if a.startswith("-"):
            if a in ("--help", "-h", "--version"):
                return None
            i += 1
            continue
        return a
    return None


def _send(sock: socket.socket, obj: dict) -> None:
    data = json.dumps(obj, ensure_ascii=False).encode("utf-8", errors="surrogateescape")
    sock.sendall(struct.pack(">I", len(data)) + data)


def _recv(sock: socket.socket) -> dict | None:
    def exactly(n: int) -> bytes | None:
        buf = b""
        while len(buf) < n:
            chunk = sock.recv(n - len(buf))
            if not chunk:
                return None
            buf += chunk
        return buf

    head = exactly(4)
    if head is None:
        return None
    body = exactly(struct.unpack(">I", head)[0])
    return None if body is None else json.loads(body.decode("utf-8", errors="surrogateescape"))


def enabled() -> bool:
    return os.environ.get("LETHE_SERVE", "1").strip().lower() not in ("0", "false", "no", "off")


def start_service() -> None:
    """Start the service in the background (it exits at once when one already runs)."""
    try:
        subprocess.Popen(
            [sys.executable, "-m", "lethe_sql.service"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True, close_fds=True, cwd="/",
        )
    except OSError:
        pass


def run(argv: list[str], command: str) -> int | None:
    """Run ``lethe ARGV`` in the service; its exit status, or None to run it here."""
    path = socket_path()
    try:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(str(path))
    except OSError:
        start_service()
        return None
    with sock:
        stdin = None
        if command in READS_STDIN and not sys.stdin.isatty():
            stdin = sys.stdin.read()
        elif command == "add" and "-" in argv and not sys.stdin.isatty():
            stdin = sys.stdin.read()
        try:
            _send(sock, {"version": fingerprint(), "argv": argv, "cwd": os.getcwd(), "env": dict(os.environ),
                         "stdin": stdin})
            reply = _recv(sock)
        except OSError:
            reply = None
    if reply is None:
        if command in RETRY_HERE:
            if stdin is not None:
                import io

                sys.stdin = io.StringIO(stdin)
            return None
        message = ("the lethe service stopped while it ran this command; "
                   "check with `lethe list` whether it took effect")
        from .errors import asked_for_json, error_object

        if asked_for_json(argv):
            sys.stdout.write(json.dumps(error_object(message, "service_stopped"), indent=2) + "\n")
        else:
            sys.stderr.write(f"lethe: error: {message}\n")
        return 1
    if reply.get("stale"):
        return None
    sys.stdout.write(reply.get("stdout", ""))
    sys.stdout.flush()
    sys.stderr.write(reply.get("stderr", ""))
    return int(reply.get("code", 1))
