"""Search across projects: every selected project's database ATTACHed READ_ONLY to one
in-memory DuckDB connection, one first-stage statement over the union, one judge batch
over the merged pool.

Why generated SQL: table macros do not resolve across ATTACH (a macro looks for its
tables in the default catalog), so the union cannot call ``lethe_candidates`` per
project. The union's first stage is therefore *expanded*, not written: the statement
one project runs (``pipeline.CANDIDATES_SQL``) is parsed with sqlglot and its macro
calls replaced by the bodies of the macros in the sql/ files themselves
(:func:`table_macros`, :func:`first_stage_sql`): each BM25 list (``lethe_bm25``,
``lethe_bm25_ctx``) once per project with every base table read from that project's
catalog, the rest (``lethe_dense``, the fusion above) over the union of the projects'
tables on (project, id) keys. Names are never
spliced as text; the query text and vector are bind parameters.

Comparable scores: the union is scored as if it were one database holding every
project's entries. BM25 (entry text and context field) uses global statistics, put
where the macro reads its own: a term's df is the sum of its df in every project, N
the sum of the documents, avgdl the document-weighted mean; each project's term
frequencies and lengths are its own. Dense scores are cosines (one embedding model: a
project indexed with another model is skipped), enrichment vectors included as in
``lethe_dense``. Each list is ranked over the union by the macro's own order, and the
candidates are fused by ``lethe_fused`` (or ``lethe_hybrid`` with ``fusion = "rrf"``)
exactly as ``lethe_candidates`` does in one database, so a federated search over
projects equals a search over one database holding them all (``tests/test_federation.py``),
and a federated search over one project equals that project's search
(``tests/test_federation_one.py``). The late-interaction judge's query-token IDF uses
the summed ``token_df`` and entry counts the same way.

Read-only by construction: the databases are attached READ_ONLY and nothing is
written (no query log, no suppression, no lifecycle update). Suppression is not
applied either: each project's clusters are its own.

A project whose database is missing, locked by a writer, not a DuckDB file, or of
another schema version (its ``schema_migrations`` differ from this version's
migrations) is skipped with a warning naming it; the rest still answer.
"""

from __future__ import annotations

import functools
import random
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import numpy as np
import sqlglot
from sqlglot import exp

from .errors import LetheError, UsageError
from .judges import best_span_scores, ids_literal, key_codes, token_idf
from .pipeline import CANDIDATE_ARGS, Candidate, candidate_shape, judge_and_cut, pool_sizes
from .prepared import statement
from .registry import Project
from .resources import resource_dir, sql_files
from .settings import Settings

DIALECT = "duckdb"

# The base tables of one project's database that the generated SQL reads: (schema, table).
BASE_TABLES = {
    ("", "entries"), ("main", "entries"),
    ("", "token_vectors"), ("main", "token_vectors"),
    ("", "token_df"), ("main", "token_df"),
    ("", "schema_migrations"), ("main", "schema_migrations"),
    ("", "meta"), ("main", "meta"),
    ("", "enrichment"), ("main", "enrichment"),
    ("", "entry_windows"), ("main", "entry_windows"),
    ("fts_main_entries", "dict"), ("fts_main_entries", "terms"),
    ("fts_main_entries", "docs"), ("fts_main_entries", "stats"),
    ("lethe_ctx", "dict"), ("lethe_ctx", "terms"), ("lethe_ctx", "docs"), ("lethe_ctx", "stats"),
}


def qualify(template: str, alias: str, placeholders: dict[str, str] | None = None,
            label: int | None = None) -> exp.Expression:
    """``template`` with every base table read from catalog ``alias``, ``__project__``
    as the literal ``alias`` (or the integer ``label`` when given: cheaper to join and sort
    on inside a search) and each ``__name__`` marker of ``placeholders`` as the named
    parameter ``$value``."""
    tree = sqlglot.parse_one(template, dialect=DIALECT)
    ph = placeholders or {}
    mark = exp.Literal.string(alias) if label is None else exp.Literal.number(int(label))

    def fix(node):
        if isinstance(node, exp.Table) and not node.catalog and (node.db, node.name) in BASE_TABLES:
            node = node.copy()
            node.set("catalog", exp.to_identifier(alias, quoted=True))
            if not node.db:
                node.set("db", exp.to_identifier("main"))
            return node
        if isinstance(node, exp.Column) and not node.table:
            if node.name == "__project__":
                return mark.copy()
            if node.name in ph:
                return exp.Placeholder(this=ph[node.name])
        return node

    return tree.transform(fix)


def union_all(template: str, aliases: list[str], placeholders=None, *, numbered: bool = False) -> str:
    """One SELECT per alias, qualified, as a UNION ALL (each wrapped as a subquery so
    that its ORDER BY / LIMIT stays its own). ``numbered``: ``__project__`` is the
    alias's position in ``aliases``, not its name."""
    parts = []
    for i, a in enumerate(aliases):
        ph = placeholders(i, a) if callable(placeholders) else placeholders
        parts.append(exp.select("*").from_(qualify(template, a, ph, i if numbered else None).subquery()))
    if not parts:
        raise UsageError("no project to search")
    node = parts[0]
    for p in parts[1:]:
        node = exp.union(node, p, distinct=False)
    return node.sql(dialect=DIALECT)


# -- the first stage, derived from sql/ ------------------------------------------------
#
# The single-project first stage is ``pipeline.CANDIDATES_SQL`` over the table macros of
# sql/ (lethe_candidates -> lethe_fused / lethe_hybrid -> lethe_bm25, lethe_bm25_ctx,
# lethe_dense, lethe_suppression_at). DuckDB cannot run those macros against attached
# catalogs, so :func:`first_stage_sql` expands the same statement here, macro by macro,
# from the text of the sql/ files (read once per process), the way DuckDB expands it:
#
# * a BM25 list macro (LIST_MACROS: its termid and docid are a project's own) is expanded
#   once per project, its tables read from that project's catalog and its BM25 statistics
#   (a term's df, the stats row) replaced by the union's, computed once per list in CTEs
#   every project's copy reads; each copy is cut at k by a top-N, and the projects' rows
#   are numbered over the union by the macro's own order, the project number last;
# * every other macro (lethe_dense included) is expanded in place, over (project, id) keys
#   instead of id keys (joins, the id columns, GROUP BY and every ORDER BY that ends on
#   the id); its base tables are the unions of the projects' tables, tagged with their
#   number, and a table joined to the candidates is read by their ids, project by project;
# * suppression is per project (each project's clusters are its own): the federated
#   search applies none, so lethe_suppression_at is an empty list.

#: macros whose rows rank one project's entries by its own FTS index: expanded per project,
#: then ranked over the union (lethe_dense reads only entry ids and vectors: over the union)
LIST_MACROS = ("lethe_bm25", "lethe_bm25_ctx")
#: macros a federated search leaves out (an empty relation of the same columns)
EMPTY_MACROS = {"lethe_suppression_at": "SELECT CAST(NULL AS INTEGER) AS project, CAST(NULL AS VARCHAR) AS id, "
                                        "CAST(NULL AS DOUBLE) AS s WHERE false"}
_MACRO_HEAD = re.compile(r"CREATE\s+OR\s+REPLACE\s+MACRO\s+(\w+)\s*\((.*?)\)\s*AS\s+TABLE\b", re.S | re.I)


@dataclass(frozen=True)
class Macro:
    name: str
    params: tuple[tuple[str, exp.Expression | None], ...]  # (name, default)
    body: exp.Expression


def _statements(text: str) -> list[str]:
    """The statements of a SQL file, split at its semicolons (tokens, not text: a
    semicolon in a comment or a string does not split)."""
    from sqlglot.tokens import TokenType

    out, start = [], 0
    for tok in sqlglot.Dialect.get_or_raise(DIALECT).tokenize(text):
        if tok.token_type == TokenType.SEMICOLON:
            out.append(text[start:tok.start])
            start = tok.end + 1
    out.append(text[start:])
    return [s for s in out if s.strip()]


@functools.lru_cache(maxsize=1)
def table_macros() -> dict[str, Macro]:
    """Every table macro of the sql/ files, parsed: the one text both searches run."""
    out: dict[str, Macro] = {}
    for f in sql_files("sql"):
        for stmt in _statements(f.read_text(encoding="utf-8")):
            m = _MACRO_HEAD.search(stmt)
            if not m:
                continue
            params = []
            for a in sqlglot.parse_one(f"SELECT f({m.group(2)})", dialect=DIALECT).expressions[0].expressions:
                if isinstance(a, exp.PropertyEQ):
                    params.append((a.this.name, a.expression))
                else:
                    params.append((a.name, None))
            out[m.group(1).lower()] = Macro(m.group(1).lower(), tuple(params),
                                            sqlglot.parse_one(stmt[m.end():], dialect=DIALECT))
    return out


def _call(node) -> tuple[Macro, list] | None:
    """(macro, arguments) when ``node`` is a table-macro call in a FROM or JOIN."""
    if isinstance(node, exp.Table) and isinstance(node.this, exp.Anonymous):
        m = table_macros().get(node.this.name.lower())
        if m is not None:
            return m, node.this.expressions
    return None


def _expand(m: Macro, args: list) -> exp.Expression:
    """``m``'s body with its parameters replaced by the call's arguments (positional, then
    ``name := value``, then the defaults), as DuckDB expands a macro: an unqualified column
    named like a parameter is that parameter."""
    names = [p for p, _ in m.params]
    bound = dict(m.params)
    for i, a in enumerate(args):
        if isinstance(a, exp.PropertyEQ):
            bound[a.this.name] = a.expression
        else:
            bound[names[i]] = a
    missing = [p for p in names if bound[p] is None]
    if missing:
        raise ValueError(f"{m.name}: no value for {', '.join(missing)}")

    def sub(node):
        if isinstance(node, exp.Column) and not node.table and node.name in bound:
            return exp.Paren(this=bound[node.name].copy())
        return node

    return m.body.copy().transform(sub)


def _twin(node: exp.Expression, col: str = "project") -> exp.Expression:
    """``node`` with every column ``id`` replaced by column ``col`` of the same table."""
    return node.copy().transform(
        lambda n: exp.column(col, table=n.table or None) if isinstance(n, exp.Column) and n.name == "id" else n)


def _keyed(tree: exp.Expression) -> exp.Expression:
    """``tree`` over (project, id) keys: ``USING (id)`` and ``ON a.id = b.id`` join on the
    project too, a selected id brings its project, an ordering by id breaks its ties by
    project."""
    for j in list(tree.find_all(exp.Join)):
        using = j.args.get("using")
        if using and any(u.name == "id" for u in using):
            j.set("using", [exp.to_identifier("project"), *using])
        on = j.args.get("on")
        if on is not None:
            for eq in list(on.find_all(exp.EQ)):
                if all(isinstance(s, exp.Column) and s.name == "id" for s in (eq.this, eq.expression)):
                    eq.replace(exp.and_(eq.copy(), _twin(eq)))
    for sel in list(tree.find_all(exp.Select)):
        cols = []
        for e in sel.expressions:
            if e.alias_or_name == "id" and not isinstance(e, exp.Star):
                cols.append(exp.alias_(_twin(e.unalias()), "project") if isinstance(e, exp.Alias) else _twin(e))
            cols.append(e)
        sel.set("expressions", cols)
    for order in list(tree.find_all(exp.Order)):
        keys = []
        for o in order.expressions:
            keys.append(o)
            if isinstance(o.this, exp.Column) and o.this.name == "id":
                keys.append(_twin(o))
        order.set("expressions", keys)
    for group in list(tree.find_all(exp.Group)):
        keys = []
        for g in group.expressions:
            if isinstance(g, exp.Column) and g.name == "id":
                keys.append(_twin(g))
            keys.append(g)
        group.set("expressions", keys)
    return tree


def _union(parts: list[exp.Expression]) -> exp.Expression:
    node = parts[0]
    for p in parts[1:]:
        node = exp.union(node, p, distinct=False)
    return node


def _tagged(i: int, select: exp.Select) -> exp.Select:
    """``select`` with the project's number as its first column."""
    select.set("expressions", [exp.alias_(exp.Literal.number(i), "project"), *select.expressions])
    return select


def _union_table(table: exp.Table, aliases: list[str], keys: str | None = None) -> exp.Expression:
    """A base table of one database as the union of every project's, with a ``project``
    column. Only the columns its SELECT reads through the table's alias (and the ``id``
    it joins on) are read: DuckDB reads every column of a ``SELECT *`` branch of a UNION
    ALL, the entries' vectors included. Joined on (project, id) to a named relation (the
    candidates), each project's rows are looked up by that relation's ids
    (:func:`_lookup`)."""
    sel, name = table.find_ancestor(exp.Select), table.alias
    cols = ["*"]
    if sel is not None and name:
        cols = ["id", *sorted({c.name for c in sel.find_all(exp.Column) if c.table == name} - {"id", "project"})]
    parts = []
    for i, a in enumerate(aliases):
        part = _tagged(i, exp.select(*cols).from_(_in_catalog(table.copy(), a)))
        if keys is not None:
            ref = exp.column("id", table=name or table.name)
            ids = exp.select("k.id").from_(exp.to_table(keys).as_("k")).where(
                exp.EQ(this=exp.column("project", table="k"), expression=exp.Literal.number(i)))
            part = part.where(exp.In(this=ref, query=exp.Subquery(this=ids)))
        parts.append(part)
    return _union(parts).subquery(table.alias or table.name)


def _lookup(table: exp.Table) -> str | None:
    """The name of the relation ``table`` is joined to on (project, id), when the join
    keeps only rows of that relation (``X JOIN table USING (project, id)``, X a CTE or a
    subquery, or a LEFT JOIN from X): then each project's rows are the ones whose id X
    holds for that project, a semi-join DuckDB turns into a filter on the project's scan
    (the join's own filter does not pass the union). X is made a MATERIALIZED CTE (a
    subquery in FROM is moved into one): it is read once more per project."""
    join = table.parent
    if not isinstance(join, exp.Join) or join.args.get("kind") or join.side not in ("", "LEFT"):
        return None
    if {u.name for u in join.args.get("using") or []} != {"project", "id"}:
        return None
    sel = join.parent
    src = sel.args.get("from_") if isinstance(sel, exp.Select) else None
    if src is None or len(sel.args.get("joins") or []) == 0 or sel.args["joins"][0] is not join:
        return None
    left = src.this
    if isinstance(left, exp.Subquery) and left.alias:
        name = left.alias
        cte = exp.CTE(this=left.this.copy(), alias=exp.TableAlias(this=exp.to_identifier(name)), materialized=True)
        with_ = sel.args.get("with_")
        if with_ is None:
            sel.set("with_", exp.With(expressions=[cte]))
        else:
            with_.append("expressions", cte)
        left.replace(exp.to_table(name))
        return name
    if isinstance(left, exp.Table) and not left.db and not left.catalog and not left.alias:
        cte = _cte_named(sel, left.name)
        if cte is not None:
            cte.set("materialized", True)
            return left.name
    return None


def _cte_named(node: exp.Expression, name: str) -> exp.CTE | None:
    """The CTE ``name`` visible from ``node`` (the nearest enclosing WITH defining it)."""
    while node is not None:
        w = node.args.get("with_") if isinstance(node, (exp.Select, exp.SetOperation)) else None
        if w is not None:
            for c in w.expressions:
                if c.alias == name:
                    return c
        node = node.parent
    return None


def _in_catalog(t: exp.Table, alias: str) -> exp.Table:
    t.set("catalog", exp.to_identifier(alias, quoted=True))
    if not t.db:
        t.set("db", exp.to_identifier("main"))
    return t


FTS_STATS = ("fts_main_entries", "lethe_ctx")


def _shared_name(t: exp.Table) -> str:
    """The name of the CTE holding the union's statistics for FTS table ``t``."""
    return f"lethe_union_{t.db}_{t.name}"


def _global_stats(body: exp.Expression, aliases: list[str]) -> list[exp.CTE]:
    """The union's BM25 statistics for every FTS ``stats`` or ``dict`` table that the
    list macro's expanded ``body`` reads, computed once per list (one CTE each, read by
    every project's copy of the body): N is the sum of the projects' documents, avgdl
    their document-weighted mean length, a term's df the sum of its df in every project
    (the union scored as one database holding every project's entries); each project's
    term frequencies and lengths stay its own. The df is summed for the query's terms
    only: the body's own ``qterms`` CTE, copied once beside them."""
    def each(sql: str) -> exp.Expression:
        return _union([qualify(sql, a) for a in aliases]).subquery("x")

    out: dict[str, exp.CTE] = {}
    for t in body.find_all(exp.Table):
        if t.catalog or t.db not in FTS_STATS or t.name not in ("stats", "dict"):
            continue
        name = _shared_name(t)
        if name in out:
            continue
        if t.name == "stats":
            sel = (exp.select("sum(x.num_docs) AS num_docs",
                              "sum(x.num_docs * x.avgdl) / nullif(sum(x.num_docs), 0) AS avgdl")
                   .from_(each(f"SELECT num_docs, avgdl FROM {t.db}.stats")))
        else:
            qterms = next((c for c in body.find_all(exp.CTE) if c.alias == "qterms"), None)
            if qterms is None:
                raise ValueError(f"{t.db}.dict is read without a qterms CTE: cannot sum the query terms' df")
            if "lethe_union_qterms" not in out:
                out["lethe_union_qterms"] = exp.CTE(this=qterms.this.copy(), alias=exp.TableAlias(
                    this=exp.to_identifier("lethe_union_qterms")), materialized=True)
            # the projects' dict rows of the query's terms, each project's dict read once:
            # every project's copy takes its own rows (its termids) from here
            rows = _union([_tagged(i, qualify(f"SELECT termid, term, df FROM {t.db}.dict", a))
                           for i, a in enumerate(aliases)])
            rows = exp.select("*").from_(rows.subquery("x")).where("x.term IN (SELECT term FROM lethe_union_qterms)")
            out[name + "_rows"] = exp.CTE(this=rows, alias=exp.TableAlias(this=exp.to_identifier(name + "_rows")),
                                          materialized=True)
            sel = exp.select("x.term", "sum(x.df) AS df").from_(exp.to_table(name + "_rows").as_("x")).group_by("x.term")
        out[name] = exp.CTE(this=sel, alias=exp.TableAlias(this=exp.to_identifier(name)), materialized=True)
    return list(out.values())


def _one_project(body: exp.Expression, alias: str, number: int, shared: list[exp.CTE] = ()) -> exp.Expression:
    """A list macro's expanded ``body`` for project ``alias`` (number ``number``): its tables
    read from catalog ``alias``, the FTS statistics the union's (the CTEs of
    :func:`_global_stats`): the ``stats`` row is the union's, a ``dict`` row (of the
    query's terms: the body joins its dict to ``qterms``) keeps the project's termid with
    the union's df; its ``qterms`` the shared copy (the same query terms, tokenized once)."""
    def fix(node):
        if (isinstance(node, exp.CTE) and node.alias == "qterms"
                and any(c.alias == "lethe_union_qterms" for c in shared)):
            return exp.CTE(this=exp.select("term").from_("lethe_union_qterms"), alias=node.args["alias"].copy())
        if isinstance(node, exp.Table) and not node.catalog and (node.db, node.name) in BASE_TABLES:
            if node.db in FTS_STATS and node.name == "stats":
                return exp.to_table(_shared_name(node)).as_(node.alias or node.name)
            if node.db in FTS_STATS and node.name == "dict":
                own = exp.to_table(_shared_name(node) + "_rows").as_("d")
                g = exp.to_table(_shared_name(node)).as_("g")
                sel = (exp.select("d.termid", "d.term", "g.df").from_(own).join(g, using=["term"])
                       .where(exp.EQ(this=exp.column("project", table="d"), expression=exp.Literal.number(number))))
                return sel.subquery(node.alias or node.name)
            return _in_catalog(node.copy(), alias)
        return node

    return body.copy().transform(fix)


#: a LIMIT at least this large keeps every row (the BM25 lists of lethe_fused)
ALL_ROWS = 2**63 - 1


def _project_cut(one: exp.Select) -> exp.Select:
    """One project's copy of a list macro, cut at k without numbering its rows: the
    union numbers them again (:func:`_ranked_list`), so the project's ``ORDER BY rank
    LIMIT k`` over ``rank = row_number() OVER (ORDER BY keys)`` becomes ``ORDER BY keys
    LIMIT k`` (a top-N), and no ordering at all when k keeps every row."""
    wins = [e for e in one.expressions if isinstance(e.unalias(), exp.Window)]
    order, limit = one.args.get("order"), one.args.get("limit")
    if len(wins) != 1 or order is None or limit is None:
        return one
    rank = wins[0].alias_or_name
    if [o.this.sql() for o in order.expressions] != [exp.column(rank).sql()]:
        return one
    if any(isinstance(c, exp.Column) and c.name == rank for e in one.expressions if e is not wins[0]
           for c in e.find_all(exp.Column)):
        return one
    one = one.copy()
    win = next(e for e in one.expressions if e.alias_or_name == rank).unalias()
    one.set("expressions", [e for e in one.expressions if e.alias_or_name != rank])
    n = limit.expression.unnest() if isinstance(limit, exp.Limit) else None
    if isinstance(n, exp.Literal) and n.is_int and int(n.name) >= ALL_ROWS:
        one.set("order", None)
        one.set("limit", None)
    else:
        one.set("order", win.args["order"].copy())
    return one


def _ranked_list(m: Macro, args: list, aliases: list[str], alias: str) -> exp.Expression:
    """A list macro over the union: expanded once per project, each project's rows (its
    own top k) tagged with its number, then numbered again over the union by the macro's
    own order with the project as the last tie-break, and cut at k."""
    body = _expand(m, args)
    last = body if isinstance(body, exp.Select) else None
    if last is None or last.args.get("limit") is None:
        raise ValueError(f"{m.name}: a list macro must end in one SELECT ... ORDER BY ... LIMIT k")
    shared = _global_stats(body, aliases)
    parts = []
    for i, a in enumerate(aliases):
        one = _project_cut(_one_project(body, a, i, shared))
        parts.append(_tagged(i, exp.select(*[exp.column(e.alias_or_name) for e in one.expressions]).from_(one.subquery("r"))))
    # the final SELECT again, over the union: each column by its name, the rank window's
    # order rewritten in those names (``round(scored.score, 9) DESC, docs.name`` ->
    # ``round(score, 9) DESC, id``); then keyed: the project joins the columns and breaks ties
    by_name = {e.unalias().sql(dialect=DIALECT): e.alias_or_name for e in last.expressions
               if not e.find(exp.Window)}

    def named(n):
        if isinstance(n, (exp.Column, exp.Func)) and not isinstance(n, exp.Window):
            return exp.column(by_name[n.sql(dialect=DIALECT)]) if n.sql(dialect=DIALECT) in by_name else n
        return n

    cols = [e.copy().transform(named) if e.find(exp.Window) else exp.column(e.alias_or_name)
            for e in last.expressions]
    out = _keyed(exp.select(*cols))
    out.set("order", last.args["order"].copy())
    out.set("limit", last.args["limit"].copy())
    out = out.from_(_union(parts).subquery("u"))
    if shared:
        out.set("with_", exp.With(expressions=shared))
    return out.subquery(alias)


# list_contains, not IN (subquery): a filter in each scan instead of a semi-join per
# project (measured: 16 ms instead of 54 ms for a 30-entry pool over 9 projects of 5,000).
_TOKENS = """SELECT __project__ AS project, t.id, t.v, t.scale, t.pos
FROM token_vectors AS t
WHERE list_contains(CAST(__ids__ AS VARCHAR[]), t.id)"""
_TOKEN_N = """SELECT count(*) AS n FROM entries AS e"""
_TOKEN_DF = """SELECT d.token, d.df FROM token_df AS d WHERE list_contains(CAST(__toks__ AS INTEGER[]), d.token)"""
_HAS_TOKENS = """SELECT __project__ AS project, count(*) > 0 AS has FROM (SELECT 1 FROM token_vectors LIMIT 1)"""


def _federate(tree: exp.Expression, aliases: list[str]) -> exp.Expression:
    """``tree`` (single-project SQL over the sql/ macros) over the union of ``aliases``."""
    tree = _keyed(tree)
    for t in list(tree.find_all(exp.Table)):
        call = _call(t)
        if call is not None:
            m, args = call
            name = t.alias or m.name
            if m.name in LIST_MACROS:
                t.replace(_ranked_list(m, args, aliases, name))
            elif m.name in EMPTY_MACROS:
                t.replace(sqlglot.parse_one(EMPTY_MACROS[m.name], dialect=DIALECT).subquery(name))
            else:
                t.replace(_federate(_expand(m, args), aliases).subquery(name))
    # then the base tables, the macros expanded around them (a lookup names its relation)
    # (every lookup is decided before any table is replaced: a base table joined to another
    # base table stays a join of two unions)
    tables = [t for t in tree.find_all(exp.Table) if not t.catalog and (t.db, t.name) in BASE_TABLES]
    for t, keys in [(t, _lookup(t)) for t in tables]:
        t.replace(_union_table(t, aliases, keys))
    return tree


@functools.lru_cache(maxsize=64)
def first_stage_sql(aliases: tuple[str, ...]) -> str:
    """The union's first-stage statement for these aliases: ``pipeline.CANDIDATES_SQL``
    (parameters ``$q``, ``$qvec``, ``$k``, ``$depth`` and the settings of
    ``pipeline.candidate_shape``) expanded over the union from the sql/ macros (see
    above). Its ``project`` column is the alias's position in ``aliases``."""
    from .pipeline import CANDIDATES_SQL

    if not aliases:
        raise UsageError("no project to search")
    tree = sqlglot.parse_one(CANDIDATES_SQL, dialect=DIALECT)
    return _federate(tree, list(aliases)).sql(dialect=DIALECT, comments=False)


@functools.lru_cache(maxsize=256)
def tokens_sql(aliases: tuple[str, ...]) -> str:
    """Token vectors of the pool, one statement over the projects holding pool entries
    (parameter ``$ids_<i>``: the i-th alias's entry ids as a VARCHAR[] literal)."""
    return union_all(_TOKENS, list(aliases), lambda i, a: {"__ids__": f"ids_{i}"}, numbered=True)


@functools.lru_cache(maxsize=64)
def entries_count_sql(aliases: tuple[str, ...]) -> str:
    return f"SELECT sum(n) FROM ({union_all(_TOKEN_N, list(aliases))})"


@functools.lru_cache(maxsize=64)
def token_df_sql(aliases: tuple[str, ...]) -> str:
    """The query tokens' document frequencies summed over the projects (parameter ``$toks``)."""
    return f"SELECT token, sum(df) AS df FROM ({union_all(_TOKEN_DF, list(aliases), {'__toks__': 'toks'})}) GROUP BY token"


# -- results -----------------------------------------------------------------------


@dataclass
class FedCandidate(Candidate):
    project: str = ""
    root: str = ""


@dataclass
class FedOutcome:
    results: list[FedCandidate]
    pool: list[FedCandidate]
    judge: str | None
    deep: bool
    projects: list[Project]
    skipped: list[tuple[str, str]]
    judge_batches: int = 0
    timings_ms: dict = field(default_factory=dict)


def attach_sql(path: str, alias: str, read_only: bool = True) -> str:
    """``ATTACH 'path' AS "alias" (READ_ONLY)``, built by sqlglot (the path is a quoted literal)."""
    opts = [exp.AttachOption(this=exp.var("READ_ONLY"))] if read_only else []
    stmt = exp.Attach(
        this=exp.Alias(this=exp.Literal.string(path), alias=exp.to_identifier(alias, quoted=True)),
        exists=False,
        expressions=opts,
    )
    return stmt.sql(dialect=DIALECT)


class ProjectUnavailable(LetheError):
    pass


def expected_migrations() -> set[str]:
    return {f.name for f in sql_files("migrations")}


def _attach_timeout() -> float:
    from .locks import lock_timeout as _lock_timeout

    return min(_lock_timeout(), 1.0)


class Federation:
    """An in-memory connection with projects attached READ_ONLY under their slugs.

    ``Federation(projects)`` attaches each project it can and records the others in
    ``skipped`` as (slug, reason); ``warnings`` has one line per skipped project."""

    def __init__(self, projects: list[Project], *, model_id: str | None = None, timeout: float | None = None):
        t = _attach_timeout() if timeout is None else timeout
        self.con = duckdb.connect(":memory:")
        self.con.execute((resource_dir("sql") / "00_tokens.sql").read_text(encoding="utf-8"))
        self.projects: list[Project] = []
        self.skipped: list[tuple[str, str]] = []
        self._expected = expected_migrations()
        for p in projects:
            try:
                self._attach(p, model_id, t)
                self.projects.append(p)
            except ProjectUnavailable as exc:
                self.skipped.append((p.slug, str(exc)))
        self.roots = {p.slug: p.root for p in self.projects}
        self._has_tokens: dict[str, bool] | None = None
        self._n_entries: int | None = None  # fixed while attached: READ_ONLY holds off writers

    @property
    def warnings(self) -> list[str]:
        return [f"project {slug} skipped: {why}" for slug, why in self.skipped]

    @property
    def aliases(self) -> tuple[str, ...]:
        return tuple(p.slug for p in self.projects)

    def _attach(self, p: Project, model_id: str | None, timeout: float) -> None:
        db = p.db_path
        if not Path(p.root).is_dir():
            raise ProjectUnavailable(f"its root {p.root} no longer exists (`lethe projects prune` drops it)")
        if not db.is_file():
            raise ProjectUnavailable(f"no database at {db} (run `lethe index` in {p.root})")
        sql = attach_sql(str(db), p.slug)
        from .db import before_open

        before_open(db)  # in `lethe serve`: its kept reader of this file closes first
        deadline = time.monotonic() + timeout
        delay = 0.02
        while True:
            try:
                self.con.execute(sql)
                break
            except duckdb.Error as exc:
                msg = str(exc)
                if ("Could not set lock" in msg or "Conflicting lock" in msg) and time.monotonic() < deadline:
                    time.sleep(delay * (0.5 + random.random()))
                    delay = min(delay * 2, 0.25)
                    continue
                first = msg.strip().splitlines()[0] if msg.strip() else type(exc).__name__
                if "already attached" in msg or "Unique file handle conflict" in msg:
                    raise ProjectUnavailable(f"{db} is open in this process; close that connection first") from None
                if "lock" in msg.lower():
                    raise ProjectUnavailable(f"{db} is locked by a writing process") from None
                raise ProjectUnavailable(f"{db} cannot be read ({first})") from None
        try:
            q = qualify("SELECT name FROM schema_migrations", p.slug).sql(dialect=DIALECT)
            applied = {r[0] for r in self.con.execute(q).fetchall()}
            if applied != self._expected:
                if applied - self._expected:
                    raise ProjectUnavailable(f"{db} has another schema version (newer than this lethe-sql: upgrade it)")
                raise ProjectUnavailable(
                    f"{db} has another schema version (older than this lethe-sql: run `lethe index` in {p.root})"
                )
            for schema in ("fts_main_entries", "lethe_ctx"):
                self.con.execute(qualify(f"SELECT count(*) FROM {schema}.stats", p.slug).sql(dialect=DIALECT))
            if model_id:
                q = qualify("SELECT value FROM meta WHERE key = 'embed_model'", p.slug).sql(dialect=DIALECT)
                row = self.con.execute(q).fetchone()
                if row and row[0] and row[0] != model_id:
                    raise ProjectUnavailable(f"{db} was indexed with another embedding model ({row[0]})")
        except ProjectUnavailable:
            self._detach(p.slug)
            raise
        except duckdb.Error as exc:
            self._detach(p.slug)
            raise ProjectUnavailable(f"{db} has no usable lethe schema ({str(exc).splitlines()[0]})") from None

    def _detach(self, slug: str) -> None:
        try:
            self.con.execute(exp.Detach(this=exp.to_identifier(slug, quoted=True)).sql(dialect=DIALECT))
        except duckdb.Error:
            pass

    def close(self) -> None:
        self.con.close()

    def __enter__(self) -> "Federation":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- the first stage ---------------------------------------------------------
    def candidates(self, enc, k: int, depth: int, s: Settings) -> list[FedCandidate]:
        if not self.projects:
            return []
        # prepared once per process and shape (lethe_sql.prepared): binding and optimising the
        # union over every project is most of the statement's cost. No suppression: cue 0, step 0.
        stmt = statement(first_stage_sql(self.aliases), CANDIDATE_ARGS, **candidate_shape(k, depth, s))
        cur = stmt.execute(self.con, q=enc.text, qvec=enc.vec, cue=0, step=0)
        names = [d[0] for d in cur.description]
        out = []
        for row in cur.fetchall():
            r = dict(zip(names, row))
            slug = self.aliases[r["project"]]
            out.append(FedCandidate.from_row(r, project=slug, root=self.roots[slug]))  # suppression: 0.0 in SQL
        return out

    # -- the judges ----------------------------------------------------------------
    def has_token_index(self) -> bool:
        if self._has_tokens is None:
            if not self.projects:
                self._has_tokens = {}
            else:
                rows = self.con.execute(union_all(_HAS_TOKENS, list(self.aliases))).fetchall()
                self._has_tokens = {p: bool(h) for p, h in rows}
        return any(self._has_tokens.values())

    def maxsim(self, enc, pool: list[FedCandidate], idf: bool = True) -> dict[tuple[str, str], float]:
        """Late interaction (the ``LateInteractionJudge`` formula) over the merged pool:
        one statement fetches the token vectors from every project holding pool entries."""
        keys = [(c.project, c.id) for c in pool]
        out = {key: 0.0 for key in keys}
        if not keys or len(enc.tok_ids) == 0:
            return out
        by: dict[str, list[str]] = {}
        for p, i in keys:
            by.setdefault(p, []).append(i)
        aliases = tuple(a for a in self.aliases if a in by)
        params = {f"ids_{n}": ids_literal(by[a]) for n, a in enumerate(aliases)}
        tbl = self.con.execute(tokens_sql(aliases), params).to_arrow_table()
        if idf:
            if self._n_entries is None:
                self._n_entries = int(self.con.execute(entries_count_sql(self.aliases)).fetchone()[0] or 0)
            n = max(self._n_entries, 1)
            toks = sorted({int(t) for t in enc.tok_ids})
            df = {int(t): int(d) for t, d in self.con.execute(
                token_df_sql(self.aliases), {"toks": "[" + ",".join(map(str, toks)) + "]"}).fetchall()}
            w = token_idf(n, df, enc.tok_ids)
        else:
            w = np.ones(len(enc.tok_ids), dtype=np.float64)
        if tbl.num_rows == 0:
            return out
        # (project number, id code) as one integer key, as LateInteractionJudge groups ids
        codes, names = key_codes(tbl.column("id"))
        keys = tbl.column("project").to_numpy().astype(np.int64) * len(names) + codes
        for k, sc in best_span_scores(keys, tbl, enc.tok_vecs, w).items():
            n, i = divmod(k, len(names))
            out[(aliases[n], names[i])] = sc
        return out


class FederatedJudge:
    """The judge of a federated search, scoring (project, id) keys in one batch."""

    def __init__(self, name: str, fed: Federation, reranker=None) -> None:
        self.name = name
        self.fed = fed
        self.reranker = reranker
        if name == "late-interaction":
            from .judges import LateInteractionJudge

            self.default_threshold = LateInteractionJudge.default_threshold
            self.blend = True
        else:
            from .judges import CrossEncoderJudge

            self.default_threshold = CrossEncoderJudge.default_threshold
            self.blend = False
        self.batches = 0

    def score(self, enc, pool: list[FedCandidate]) -> dict[tuple[str, str], float]:
        self.batches += 1
        if self.name == "late-interaction":
            return self.fed.maxsim(enc, pool)
        if not pool:
            return {}
        scores = self.reranker.score(enc.text, [c.text for c in pool])
        return {(c.project, c.id): float(s) for c, s in zip(pool, scores)}


def pick_judge(fed: Federation, name: str) -> FederatedJudge | None:
    """auto: the cross-encoder when one is installed, else late interaction when any
    attached project has a token index, else none."""
    if name == "none":
        return None
    if name in ("auto", "cross-encoder"):
        from lethe_sql.udfs.models import ModelMissing, resolve_reranker

        src = resolve_reranker()
        if src is not None:
            from lethe_sql.udfs.rerank import CrossEncoder

            return FederatedJudge("cross-encoder", fed, CrossEncoder(src))
        if name == "cross-encoder":
            raise ModelMissing("no cross-encoder installed: run `lethe models pull` or set LETHE_RERANK_MODEL")
    if name not in ("auto", "late-interaction"):
        from .extend import factory

        factory("judge", name)  # an unknown name: a UsageError listing the registry's judges
        raise UsageError(f"judge {name!r} does not search across projects; choose auto, cross-encoder, "
                         "late-interaction or none")
    return FederatedJudge("late-interaction", fed) if fed.has_token_index() else None


def run(fed: Federation, enc, settings: Settings, judge: FederatedJudge | None) -> FedOutcome:
    """The pipeline of ``lethe_sql.pipeline.run`` over the union, learning nothing:
    first stage (once, ``pool_sizes``), the judge over the top ``k_shallow`` in one batch,
    the rest only when the best score is below the threshold, the blend, the top ``top_k``."""
    t0 = time.perf_counter()
    timings: dict = {}
    shallow_k, fetch_k, depth = pool_sizes(settings, judge)
    pool = fed.candidates(enc, fetch_k, depth, settings)
    timings["first_stage"] = (time.perf_counter() - t0) * 1000
    _, pool, deep, results = judge_and_cut(
        pool, settings, judge, shallow_k, enc.text, timings,
        score=lambda cands: judge.score(enc, cands),
        key=lambda c: (c.project, c.id),  # two projects may hold the same text, hence the same id
    )
    timings["total"] = (time.perf_counter() - t0) * 1000
    return FedOutcome(results, pool, judge.name if judge else None, deep, list(fed.projects), list(fed.skipped),
                      judge.batches if judge else 0, timings)


def search(
    projects: list[Project],
    query: str,
    *,
    embedder=None,
    settings: Settings | None = None,
    top_k: int | None = None,
    judge: str | None = None,
) -> FedOutcome:
    """Search ``projects`` together; raises UsageError when none could be attached."""
    from .judges import encode_query
    from .search import clean_query
    from .settings import check_count

    q = clean_query(query)
    s = (settings or Settings()).with_(top_k=None if top_k is None else check_count("top_k", top_k))
    if embedder is None:
        from lethe_sql.udfs.embed import Embedder

        embedder = Embedder()
    with Federation(projects, model_id=getattr(embedder, "model_id", None)) as fed:
        if not fed.projects:
            raise LetheError("no project could be searched: " + "; ".join(fed.warnings))
        j = pick_judge(fed, judge or s.judge)
        enc = encode_query(embedder, q)
        return run(fed, enc, s, j)


def as_dict(c: FedCandidate, judge: str | None) -> dict:
    return {
        "rank": c.final_rank,
        "project": c.project,
        "root": c.root,
        "id": c.id,
        "score": c.judge_score if judge else c.adjusted,
        "source": c.source,
        "heading": c.heading,
        "created_at": c.created_at.isoformat() if c.created_at else None,
        "content": c.content,
        "bm25_rank": c.bm25_rank,
        "dense_rank": c.dense_rank,
        "reranked": judge is not None,
        "judge": judge,
    }
