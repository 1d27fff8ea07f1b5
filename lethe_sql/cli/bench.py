"""``lethe bench``: the benchmark harness's command."""

from __future__ import annotations

from lethe_sql.bench.cli import bench_command

__all__ = ["bench_command"]
