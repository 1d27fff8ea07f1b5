"""``lethe config get|set|unset|list``: the project's ``.lethe/config.toml`` (``lethe_sql.config``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

import typer

from ..config import check_key, effective, env_name, parse_value, set_value
from .common import JsonOut, err, errors, print_json, root

config_app = typer.Typer(
    help="Read and change this project's settings (.lethe/config.toml). Every key can also be set as "
    "LETHE_<KEY> in the environment, which wins over the file; `lethe config list` shows where each "
    "value comes from.",
    no_args_is_help=True,
)


def _show(v) -> str:
    if v is None:
        return "(unset)"
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


@config_app.command("list")
def config_list(json_out: JsonOut = False) -> None:
    """Every key: its value, where the value comes from, and what it does."""
    with errors():
        rows = effective(root())
        if json_out:
            print_json(rows)
            return
        w = max(len(r["key"]) for r in rows)
        for r in rows:
            typer.echo(f"{r['key']:<{w}}  {_show(r['value']):<16} {r['source']:<10}  {r['description']}")


@config_app.command("get")
def config_get(
    key: str = typer.Argument(..., help="A key (see `lethe config list`)."),
    json_out: JsonOut = False,
) -> None:
    """Print the value in effect for KEY (environment, else config.toml, else the default)."""
    with errors():
        check_key(key)
        row = next(r for r in effective(root()) if r["key"] == key)
        if json_out:
            print_json(row)
        else:
            typer.echo(_show(row["value"]))


@config_app.command("set")
def config_set(
    key: str = typer.Argument(..., help="A key (see `lethe config list`)."),
    value: str = typer.Argument(..., help="Its value; 'default' removes it from the file (so does 'none' for "
                                "rerank_threshold and the model paths)."),
    json_out: JsonOut = False,
) -> None:
    """Write KEY = VALUE into .lethe/config.toml (checked against the key's type)."""
    with errors():
        kind, _ = check_key(key)
        low = value.strip().lower()
        unset = low in ("default", "unset") or (low == "none" and kind in ("float|None", "path"))
        v: Optional[object] = None if unset else parse_value(key, value)
        path = set_value(root(), key, v)
        _report_change(key, v, path, json_out)


def _report_change(key: str, value, path: Path, json_out: bool) -> None:
    """What ``config set`` / ``config unset`` say: the change, and an environment variable that overrides it."""
    overridden = env_name(key) in os.environ
    if json_out:
        print_json({"key": key, "value": value, "removed": value is None, "path": str(path),
                         "overridden_by": env_name(key) if overridden else None})
    else:
        typer.echo(f"{key} = {_show(value)} in {path}" if value is not None
                   else f"{key} removed from {path} (default applies)")
    if overridden:
        err(f"warning: {env_name(key)} is set in the environment and overrides the file")


@config_app.command("unset")
def config_unset(
    key: str = typer.Argument(..., help="A key (see `lethe config list`)."),
    json_out: JsonOut = False,
) -> None:
    """Remove KEY from .lethe/config.toml: its default (or environment) value applies."""
    with errors():
        check_key(key)
        path = set_value(root(), key, None)
        _report_change(key, None, path, json_out)
