"""Statements of the search's hot path, planned once per connection.

DuckDB binds and optimises a statement on every ``execute``. For the first stage
(``lethe_candidates``: three ranked lists, their fusion and the suppression join,
all macro-expanded) that costs 13-15 ms of a ~30 ms statement at 10,000 entries.
A statement made once with ``PREPARE`` and run with ``EXECUTE`` skips it, as long
as DuckDB does not re-plan it, and DuckDB 1.5 re-plans a prepared statement on
every ``EXECUTE`` when

* a parameter occurs more than once in the expanded SQL (a macro argument used in
  two places is two occurrences), or
* an argument's type differs from the type inferred at ``PREPARE``.

And ``EXECUTE`` takes no bound parameters, only literals. So a statement here takes
no parameters at all: its arguments live in a one-row temporary table of typed
columns (``temp.lethe_args_<hash>``), written with bound parameters by one
``UPDATE`` before each ``EXECUTE`` (~1 ms, less than the planning it saves), and read by the statement through a
CTE (``args``) as scalar subqueries. No user text is ever spliced into SQL. Settings
(pool sizes, weights, ``rrf``) are numeric literals of the prepared text, so DuckDB
folds them as before; one statement is prepared per distinct shape.
``tests/test_prepared.py`` checks the results equal the plain statement's, and that
DuckDB keeps the plan (``duckdb_prepared_statements().result_types`` is NULL for a
statement it must re-plan on every call).

A plan keeps the statistics it was made with. DuckDB re-plans by itself after any
catalog change (DDL: an FTS rebuild, a replaced macro, a temporary table created) in
a database the statement reads; every statement here reads the store's tables, so a
replaced macro is never served from an old plan (a statement reading no table at all
would be). And ``forget(con)`` drops a connection's statements after the store
writes, so the next search plans against the new data.
"""

from __future__ import annotations

import functools
import hashlib
import math
import re
import weakref

import duckdb

from .vectors import vec_literal

#: connection -> names of the statements prepared on it
_PREPARED: "weakref.WeakKeyDictionary[object, set[str]]" = weakref.WeakKeyDictionary()


def literal(value) -> str:
    """A setting (bool, int, float or None) as a SQL literal, rendered from the number
    itself; anything else (text above all) is refused."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(int(value)) if value >= 0 else f"({int(value)})"
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"not a finite number: {value!r}")
        return f"CAST({float(value)!r} AS DOUBLE)"  # a bare 0.005 would be a DECIMAL
    raise TypeError(f"not a setting literal: {value!r}")


def _param(value, sql_type: str):
    """An argument as the Python value bound for it (vectors travel as text: binding a
    FLOAT[384] list costs ~85 ms, its text ~1 ms; lethe_sql.vectors)."""
    if sql_type.startswith("FLOAT["):
        return vec_literal(value)
    if sql_type == "INTEGER[]":
        return "[" + ",".join(str(int(x)) for x in value) + "]"
    return value


class Statement:
    """A statement with typed arguments: ``body`` reads them as ``(SELECT <name> FROM
    args)``; ``args`` is [(name, SQL type)]."""

    def __init__(self, body: str, args: list[tuple[str, str]]) -> None:
        self.args = list(args)
        digest = hashlib.sha1((body + repr(self.args)).encode()).hexdigest()[:16]
        self.name = f"lethe_{digest}"
        self.table = f"lethe_args_{digest}"
        head = f"WITH args AS MATERIALIZED (SELECT * FROM temp.main.{self.table})"
        rest = body.lstrip()
        if re.match(r"WITH\s", rest, re.IGNORECASE):  # the body's own CTEs follow ours
            self.sql = f"{head},\n{rest[4:].lstrip()}"
        else:
            self.sql = f"{head}\n{body}"
        self._set = (f"UPDATE temp.main.{self.table} SET "
                     + ", ".join(f"{n} = CAST(? AS {t})" for n, t in self.args))

    def execute(self, con, **values):
        """Run with the arguments' Python values (str, a vector, int). Prepares the
        statement (and its arguments table) on ``con`` the first time."""
        names = _PREPARED.setdefault(con, set())
        if self.name not in names:
            self._prepare(con, names)
        params = [_param(values[n], t) for n, t in self.args]
        try:
            con.execute(self._set, params)
            return con.execute(f"EXECUTE {self.name}")
        except (duckdb.BinderException, duckdb.CatalogException) as e:
            # the statement or its table dropped behind our back (DEALLOCATE): set up again
            if self.name not in str(e) and self.table not in str(e):
                raise
            self._prepare(con, names)
            con.execute(self._set, params)
            return con.execute(f"EXECUTE {self.name}")

    def _prepare(self, con, names: set) -> None:
        cols = ", ".join(f"{n} {t}" for n, t in self.args)
        con.execute(f"CREATE TEMP TABLE IF NOT EXISTS {self.table} ({cols})")
        if con.execute(f"SELECT count(*) FROM temp.main.{self.table}").fetchone()[0] != 1:
            con.execute(f"DELETE FROM temp.main.{self.table}")
            con.execute(f"INSERT INTO temp.main.{self.table} DEFAULT VALUES")
        con.execute(f"PREPARE {self.name} AS {self.sql}")
        names.add(self.name)


_PLACEHOLDER = re.compile(r"\$([A-Za-z_]\w*)")


@functools.lru_cache(maxsize=128)
def _from_template(template: str, args: tuple, literals: tuple) -> Statement:
    arg_names, lits = {n for n, _ in args}, dict(literals)

    def sub(m: re.Match) -> str:
        name = m.group(1)
        if name in arg_names:
            return f"(SELECT {name} FROM args)"
        if name in lits:
            return literal(lits[name])
        raise KeyError(f"no value for ${name}")

    return Statement(_PLACEHOLDER.sub(sub, template), list(args))


def statement(template: str, args: tuple[tuple[str, str], ...], **literals) -> Statement:
    """The prepared form of a statement written with ``$name`` parameters: each name in
    ``args`` (name, SQL type) becomes an argument of the prepared statement, every other
    ``$name`` the literal of ``literals[name]`` (a setting: one statement per shape)."""
    return _from_template(template, tuple(args), tuple(sorted(literals.items())))


def forget(con) -> None:
    """Drop the statements prepared on ``con`` (after the store has written)."""
    for name in _PREPARED.pop(con, set()):
        try:
            con.execute(f"DEALLOCATE {name}")
        except Exception:  # a closed connection or an aborted transaction: nothing to drop
            pass
