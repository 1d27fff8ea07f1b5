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

So each statement here takes its arguments once, in a one-row CTE that casts each
to its type, and the macro reads them from there as scalar subqueries; the
``EXECUTE`` casts every argument to the same type. Settings (pool sizes, weights,
``rrf``) are literals of the prepared text, so DuckDB folds them as before; one
statement is prepared per distinct shape. ``tests/test_prepared.py`` checks the
results equal the plain statement's, and that DuckDB keeps the plan
(``duckdb_prepared_statements().result_types`` is NULL for a statement it must
re-plan on every call; the type rule is kept by construction: the same casts on
both sides).

``EXECUTE`` takes no bound parameters, so its arguments are SQL literals, built by
sqlglot (the query text is a quoted string literal; numbers and vectors are
rendered from numeric values only).

A plan keeps the statistics it was made with. DuckDB re-plans by itself after any
catalog change (DDL: an FTS rebuild, a replaced macro) in a database the statement
reads; every statement here reads the store's tables, so a replaced macro is never
served from an old plan (a statement reading no table at all would be). And
``forget(con)`` drops a connection's statements after the store writes, so the next
search plans against the new data.
"""

from __future__ import annotations

import functools
import hashlib
import re
import weakref

import duckdb

from .vectors import vec_literal

DIALECT = "duckdb"

#: connection -> names of the statements prepared on it
_PREPARED: "weakref.WeakKeyDictionary[object, set[str]]" = weakref.WeakKeyDictionary()


def _exp():
    # sqlglot costs ~40 ms to import: only a process that searches pays it (`lethe add` does not)
    from sqlglot import exp

    return exp


def string_literal(s: str) -> str:
    """``s`` as a DuckDB string literal (sqlglot quotes it)."""
    return _exp().Literal.string(str(s)).sql(dialect=DIALECT)


def literal(value) -> str:
    """A setting (bool, int, float or None) as a SQL literal; anything else is refused."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return _exp().Literal.number(int(value)).sql(dialect=DIALECT)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"not a finite number: {value!r}")
        return _exp().Literal.number(repr(value)).sql(dialect=DIALECT)
    raise TypeError(f"not a setting literal: {value!r}")


def _value(value, sql_type: str) -> str:
    """An argument as a literal of its SQL type (the query text quoted by sqlglot, a
    vector rendered from its float values)."""
    if sql_type == "VARCHAR":
        return string_literal(value)
    if sql_type.startswith("FLOAT["):
        return string_literal(vec_literal(value))
    return literal(value)


class Statement:
    """A statement with typed arguments, each bound once: ``body`` reads them as
    ``(SELECT <name> FROM args)``; ``args`` is [(name, SQL type)]."""

    def __init__(self, body: str, args: list[tuple[str, str]]) -> None:
        self.args = list(args)
        cols = ", ".join(f"CAST(${i} AS {t}) AS {n}" for i, (n, t) in enumerate(self.args, 1))
        head = f"WITH args AS MATERIALIZED (SELECT {cols})"
        rest = body.lstrip()
        if re.match(r"WITH\s", rest, re.IGNORECASE):  # the body's own CTEs follow ours
            self.sql = f"{head},\n{rest[4:].lstrip()}"
        else:
            self.sql = f"{head}\n{body}"
        self.name = "lethe_" + hashlib.sha1(self.sql.encode()).hexdigest()[:16]

    def execute(self, con, **values):
        """Run with the arguments' Python values (str, a vector, int). Prepares the
        statement on ``con`` the first time."""
        names = _PREPARED.setdefault(con, set())
        if self.name not in names:
            self._prepare(con, names)
        call = f"EXECUTE {self.name}(" + ", ".join(f"CAST({_value(values[n], t)} AS {t})" for n, t in self.args) + ")"
        try:
            return con.execute(call)
        except duckdb.BinderException as e:  # dropped behind our back (DEALLOCATE): prepare again
            if f'"{self.name}" does not exist' not in str(e):
                raise
            self._prepare(con, names)
            return con.execute(call)

    def _prepare(self, con, names: set) -> None:
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
