"""Errors that carry a one-line message fit to show a user as is, and the JSON shape every
``lethe ... --json`` command gives an error (``error_object``; printed by ``lethe_sql.cli.common``)."""

from __future__ import annotations

import re


class LetheError(Exception):
    """Base class: every CLI error is one of these, printed as one line."""

    exit_code = 1

    @property
    def kind(self) -> str:
        """What went wrong, for scripts (``lethe ... --json``): the class name in snake case
        without ``Error``: ``usage``, ``not_a_project``, ``database_locked``, ``model_missing``;
        ``error`` for a LetheError itself."""
        name = type(self).__name__
        if name == "LetheError":
            return "error"
        return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name.removesuffix("Error") or name).lower()


class UsageError(LetheError):
    """Bad input from the user (an empty query, say): exit status 2."""

    exit_code = 2


class DatabaseLocked(LetheError):
    """Another process holds the database file."""


class DatabaseCorrupt(LetheError):
    """The database file cannot be read as a DuckDB database."""


class DatabaseUnwritable(LetheError):
    """The index (or its folder) cannot be written or read: permissions, a read-only disk."""


class MigrationError(LetheError):
    """A migration was edited after it was applied, or the schema is too new."""


class NotAProject(LetheError):
    """No ``.lethe`` folder where one was expected."""


def error_object(message: str, kind: str) -> dict:
    """What a command run with ``--json`` prints on stdout when it fails (and nothing else)."""
    return {"error": {"message": message, "kind": kind}}


def asked_for_json(args) -> bool:
    """Whether a command line holds ``--json`` as an option (not after ``--``)."""
    args = list(args)
    return "--json" in (args[: args.index("--")] if "--" in args else args)
