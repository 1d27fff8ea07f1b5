"""Python UDFs for lethe-sql: model resolution and the ``embed`` function.

Everything here runs inside the Python process that opened the database;
UDFs are registered per connection and never persisted (DuckDB cannot).
"""

from .embed import EMBED_DIM, Embedder, register_embed
from .models import ModelMissing, ModelSource, resolve_embedder
from .rerank import CrossEncoder, LazyReranker, register_rerank
from .models import ModelDownloadError, pull_reranker, resolve_reranker

__all__ = [
    "EMBED_DIM",
    "CrossEncoder",
    "LazyReranker",
    "ModelDownloadError",
    "pull_reranker",
    "register_rerank",
    "resolve_reranker",
    "Embedder",
    "ModelMissing",
    "ModelSource",
    "register_embed",
    "resolve_embedder",
]
