"""``lethe bench``: the benchmark harness's command when the harness is installed, else a
stand-in that says, in one line (exit status 2), how to install it.

The harness (``bench/`` in lethe-sql's repository: the package ``lethe_bench``, a sibling
distribution) is never part of ``pip install .`` of the product; ``make install`` installs both.
"""

from __future__ import annotations

import importlib.util

import typer

from .common import report_error

MISSING = ("`lethe bench` needs the benchmark harness, a separate distribution: "
           "pip install -e ./bench from a checkout of lethe-sql (make install does it)")


def _missing(ctx: typer.Context) -> None:  # noqa: ARG001  (takes any arguments, says one line)
    """Run a benchmark (needs the harness: pip install -e ./bench from a checkout of lethe-sql)."""
    report_error(MISSING, "usage")
    raise typer.Exit(2)


if importlib.util.find_spec("lethe_bench") is not None:
    from lethe_bench.cli import bench_command

    SETTINGS: dict = {}
else:
    bench_command = _missing
    SETTINGS = {"context_settings": {"ignore_unknown_options": True, "allow_extra_args": True},
                "add_help_option": False}
