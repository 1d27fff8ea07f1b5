"""The thin side of ``lethe serve``: hand a command to the running service.

Imported by the ``lethe`` executable (``entry.py``) before anything heavy: only the
cheapest of the standard library (no json, pathlib, hashlib or subprocess on the way to
the service: they were 18 of the client's 22 ms of imports, paid by every hook). The
protocol, one request per connection over a Unix socket that only this user can open: a
4-byte big-endian length, then a ``marshal``-ed dict (both ends are the same code on the
same interpreter: ``fingerprint``). Request ``{"version", "argv", "cwd", "env",
"stdin"}``; reply ``{"stdout", "stderr", "code"}`` or ``{"stale": True}`` when the service
runs other code than this executable (it then exits, and the command runs here).
"""

from __future__ import annotations

import marshal
import os
import socket
import struct
import sys
import zlib

PKG = os.path.dirname(os.path.realpath(__file__))
#: commands the service runs; the others (interactive, long or rare) always run here
SERVED = frozenset({"search", "add", "index", "explain", "list", "expand", "status", "hook", "forget",
                    "revisions", "restore", "rif"})
#: of those, the ones that read standard input
READS_STDIN = frozenset({"hook"})
#: and the ones that may run again here when the service died mid-command (idempotent)
RETRY_HERE = frozenset({"search", "add", "index", "explain", "list", "expand", "status", "hook", "rif"})


def home_dir(env=None) -> str:
    """lethe's per-user folder: ``$LETHE_HOME``, or ``~/.lethe`` (the rule for the
    registry, the service's socket and its log; a string, so the client needs no pathlib)."""
    env = os.environ if env is None else env
    return os.path.expanduser(env.get("LETHE_HOME") or os.path.join(os.path.expanduser("~"), ".lethe"))


def _socket_file() -> str:
    """Where this user's service listens: ``$LETHE_HOME/run/serve.sock``, or a short path
    under /tmp when that one is too long for a Unix socket."""
    run = os.path.join(home_dir(), "run")
    path = os.path.join(run, "serve.sock")
    if len(path) <= 100:
        return path
    import hashlib

    digest = hashlib.sha256(run.encode()).hexdigest()[:12]
    return os.path.join(f"/tmp/lethe-{os.getuid()}", f"{digest}.sock")


def socket_path():
    from pathlib import Path

    return Path(_socket_file())


def fingerprint() -> str:
    """The code this executable runs: a service running other code must not answer (a
    checksum of the version, the package's path and each code file's name, time and size)."""
    from . import __version__

    h = zlib.crc32(f"{__version__}|{PKG}".encode())
    parent = os.path.dirname(PKG)
    for folder in (PKG, os.path.join(PKG, "cli"), os.path.join(PKG, "agents"), os.path.join(parent, "sql"),
                   os.path.join(parent, "migrations"),
                   os.path.join(PKG, "sql"), os.path.join(PKG, "migrations")):
        try:
            names = sorted(n for n in os.listdir(folder) if n.endswith((".py", ".sql")))
            for name in names:
                st = os.stat(os.path.join(folder, name))
                h = zlib.crc32(f"{folder}/{name}:{st.st_mtime_ns}:{st.st_size}".encode(), h)
        except OSError:
            continue
    return f"{h:08x}"


def dash_text(word: str) -> bool:
    """A command-line word of a dash then white space ("- use pnpm"): text, never an
    option (``cli.app.text_args``)."""
    return len(word) > 1 and word[0] == "-" and word[1].isspace()


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
    data = marshal.dumps(obj)
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
    if body is None:
        return None
    try:
        obj = marshal.loads(body)
    except (ValueError, EOFError, TypeError):
        return None  # not this protocol: another version's client or service
    return obj if isinstance(obj, dict) else None


def enabled() -> bool:
    return os.environ.get("LETHE_SERVE", "1").strip().lower() not in ("0", "false", "no", "off")


def start_service() -> None:
    """Start the service in the background (it exits at once when one already runs)."""
    import subprocess

    try:
        subprocess.Popen(
            [sys.executable, "-m", "lethe_sql.cli.service"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True, close_fds=True, cwd="/",
        )
    except OSError:
        pass


def run(argv: list[str], command: str) -> int | None:
    """Run ``lethe ARGV`` in the service; its exit status, or None to run it here."""
    path = _socket_file()
    try:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(path)
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
            import json

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
