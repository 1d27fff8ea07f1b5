"""Errors that carry a one-line message fit to show a user as is."""

from __future__ import annotations


class LetheError(Exception):
    """Base class: every CLI error is one of these, printed as one line."""

    exit_code = 1


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
