"""Facts every report names: the machine, the versions, memory use, a log line."""

from __future__ import annotations

import os
import platform
import resource
import sys
import time
from datetime import datetime, timezone
from pathlib import Path


def machine_line(m: dict) -> str:
    """One line for a report: the CPU, its cores and the load while the run ended."""
    return f"{m.get('processor', '?')}, {m.get('cpu_count', '?')} cores, load {m.get('load_avg_1_5_15')}"


def machine() -> dict:
    info = {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
    }
    try:
        import duckdb

        info["duckdb"] = duckdb.__version__
    except ImportError:  # pragma: no cover
        pass
    try:
        import onnxruntime

        info["onnxruntime"] = onnxruntime.__version__
    except ImportError:  # pragma: no cover
        pass
    try:
        info["load_avg_1_5_15"] = [round(x, 2) for x in os.getloadavg()]  # other work on the machine skews latency
    except OSError:  # pragma: no cover
        pass
    try:
        info["memory_gib"] = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (ValueError, OSError, AttributeError):  # pragma: no cover
        pass
    return info


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or ""


def package_version() -> str:
    from lethe_sql import __version__

    return __version__


def checkout(where: Path) -> dict | None:
    """The git checkout holding ``where``: its root, commit and whether tracked files have
    local changes (None outside a checkout or without git)."""
    import subprocess

    def git(*args: str) -> str | None:
        p = subprocess.run(["git", *args], cwd=where, capture_output=True, text=True, timeout=10)
        return p.stdout.strip() if p.returncode == 0 else None

    try:
        root, commit = git("rev-parse", "--show-toplevel"), git("rev-parse", "HEAD")
        if not root or not commit:
            return None
        return {"root": root, "commit": commit, "dirty": bool(git("status", "--porcelain", "--untracked-files=no"))}
    except (OSError, subprocess.SubprocessError):
        return None


def git_state(code: Path | None = None, harness: Path | None = None) -> dict | None:
    """The checkout of the code measured (where the imported ``lethe_sql`` lives, or
    ``code``): its commit and whether it has local changes; and, when the harness
    (``lethe_bench``, or ``harness``) runs from another checkout, that one's ("harness").
    Until 2026-11-29 this read the harness's checkout only, so a run of a worktree's
    harness from the repository root, which imports the root's ``lethe_sql`` (the current
    directory comes first on ``sys.path``), named the worktree's commit."""
    if code is None:
        import lethe_sql

        code = Path(lethe_sql.__file__).resolve().parent
    mine = checkout(code)
    if mine is None:
        return None
    other = checkout(harness or Path(__file__).resolve().parent)
    out = {"commit": mine["commit"], "dirty": mine["dirty"]}
    if other is not None and other["root"] != mine["root"]:
        out["harness"] = {"commit": other["commit"], "dirty": other["dirty"], "root": other["root"]}
    return out


def git_text(git: dict | None) -> str:
    """``git_state`` in a report's words: "git 4d2b6b4b7529, with local changes; harness from
    git 0519e98f5b17" ("" when unknown)."""
    if not git or not git.get("commit"):
        return ""
    text = f"git {git['commit'][:12]}{', with local changes' if git.get('dirty') else ''}"
    h = git.get("harness")
    if h:
        text += f"; harness from git {h['commit'][:12]}{', with local changes' if h.get('dirty') else ''}"
    return text


def peak_rss_mib(children: bool = False) -> float:
    """Peak resident set size of this process (or of its waited-for children), MiB."""
    who = resource.RUSAGE_CHILDREN if children else resource.RUSAGE_SELF
    kb = resource.getrusage(who).ru_maxrss
    return round(kb / (1024 * 1024 if sys.platform == "darwin" else 1024), 1)


def now_iso() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat()


class Log:
    """Progress lines on stderr (the --json document alone goes to stdout)."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.t0 = time.perf_counter()

    def __call__(self, msg: str) -> None:
        if self.enabled:
            print(f"[bench {time.perf_counter() - self.t0:7.1f}s] {msg}", file=sys.stderr, flush=True)
