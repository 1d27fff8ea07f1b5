"""lethe-sql: long-term memory for LLM agents that lives inside DuckDB.

The names below load on first use, so that ``lethe`` (``entry.py``) starts without
importing DuckDB, numpy or the models when the running service answers its command.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["LetheError", "MemoryStore", "SearchResult", "__version__", "connect", "search_sql"]

_WHERE = {"connect": ".db", "LetheError": ".errors", "SearchResult": ".search", "search_sql": ".search",
          "MemoryStore": ".store"}


def __getattr__(name: str):
    if name in _WHERE:
        import importlib

        return getattr(importlib.import_module(_WHERE[name], __name__), name)
    raise AttributeError(f"module 'lethe_sql' has no attribute {name!r}")
