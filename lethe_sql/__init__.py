"""lethe-sql: long-term memory for LLM agents that lives inside DuckDB."""

from __future__ import annotations

__version__ = "0.1.0"

from .db import connect
from .errors import LetheError
from .search import SearchResult, search_sql
from .store import MemoryStore

__all__ = ["LetheError", "MemoryStore", "SearchResult", "__version__", "connect", "search_sql"]
