"""Facts every report names: the machine, the versions, memory use, a log line."""

from __future__ import annotations

import os
import platform
import resource
import sys
import time
from datetime import datetime, timezone


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


def git_state() -> dict | None:
    """The commit of the checkout the package runs from, and whether it has local changes."""
    import subprocess
    from pathlib import Path

    here = Path(__file__).resolve().parent
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=10)
        if commit.returncode != 0:
            return None
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                               capture_output=True, text=True, timeout=10)
        return {"commit": commit.stdout.strip(), "dirty": bool(dirty.stdout.strip())}
    except (OSError, subprocess.SubprocessError):
        return None


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
