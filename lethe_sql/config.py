"""The project's ``.lethe/config.toml``: its keys, reading, editing and what is in effect
(the commands ``lethe config get|set|unset|list`` are ``cli/config.py``).

Keys are the search and learning settings (``lethe_sql.settings.Settings``), plus
``auto_register`` (whether ``lethe index`` adds the project to the global registry) and
the model paths ``embed_model`` / ``rerank_model`` (a folder holding model.onnx and
tokenizer.json, or a .onnx file; relative paths are read from the project root). Each
has an environment override, ``LETHE_<KEY>`` (upper case), which wins over the file.

The file is read with ``tomllib`` and written by hand: ``set`` replaces the line that
defines the key (flat or inside a ``[table]``, as ``load_settings`` reads both) or adds
``key = value`` above the first table; every other line is kept as it is. The result
is parsed again and compared with the old content before it replaces the file
(temporary file + rename).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import fields
from pathlib import Path

from .errors import LetheError, UsageError
from .settings import check_value, flatten, read_config

DESCRIPTIONS = {
    "top_k": "results a search returns",
    "depth": "entries each first-stage list (BM25, context BM25, dense) contributes (a judged search: at least k_deep)",
    "k_shallow": "pool the judge scores first, and RIF learns from",
    "k_deep": "first-stage pool of a judged search; judged past k_shallow when the best shallow score is below the threshold",
    "judge": "second stage: auto, cross-encoder, late-interaction or none",
    "fusion": "first-stage fusion: z (z-scored scores) or rrf (reciprocal rank)",
    "w_bm25": "weight of BM25 over the entry's text in z fusion",
    "w_ctx": "weight of BM25 over the context field in z fusion",
    "w_dense": "weight of cosine similarity in z fusion",
    "blend_judge": "late interaction: weight of the z-scored MaxSim in the final score",
    "blend_bm25": "late interaction: weight of z-scored BM25 in the final score",
    "blend_ctx": "late interaction: weight of z-scored context BM25 in the final score",
    "blend_dense": "late interaction: weight of z-scored cosine in the final score",
    "blend_time": "late interaction: added to the final score of an entry stating the kind of time a question asks for (when: a time; how long: a duration; how often: a frequency)",
    "blend_date": "late interaction: added to the final score of an entry dated in the period the question names",
    "blend_question": "late interaction: added to the final score of an entry that is itself a question",
    "blend_phrase": "late interaction: added to the final score of an entry holding a phrase the query quotes",
    "blend_ident": "late interaction: added to the final score of an entry holding every identifier the query names (a number, version, path, host)",
    "blend_title": "late interaction: times the content words the query and the entry's heading share over the geometric mean of their counts, added to its final score",
    "rerank_threshold": "judge past k_shallow when the best judge score is below this (unset: the judge's default, always for late interaction, 4.0 for the cross-encoder)",
    "rif": "retrieval-induced forgetting on or off",
    "n_clusters": "query clusters RIF learns per",
    "rif_rate": "suppression added to a loser per search",
    "rif_reinforce": "suppression removed from a winner per search",
    "rif_max": "largest suppression",
    "rif_lambda": "decay of suppression per search step",
    "rif_alpha": "weight of suppression in the first-stage score",
    "rif_final_alpha": "experimental: weight of suppression taken off the judge's final score (0: off)",
    "refit_growth": "refit the query clusters when the log grew by this factor",
    "lifecycle": "tier lifecycle (naive, gc, memory, apoptotic) on or off",
    "dedup": "merge duplicates on write (the same words in the same order, ignoring case, punctuation and a/an/the)",
    "revisions": "detect revisions on write and rank current versions first for questions about the present",
    "context_tokens": "hooks: context tokens one agent session may be given, session start and prompts together (about 4 characters a token)",
    "start_tokens": "hooks: of context_tokens, the most the session-start hook gives",
    "prompt_tokens": "hooks: of context_tokens, the most the prompt hook gives one prompt",
    "prompt_min_score": "hooks: a memory reaches a prompt only when its cosine with the prompt is at least this (below it, the prompt gets nothing)",
    "auto_register": "`lethe index` adds this project to the global registry ($LETHE_HOME/projects.json)",
    "embed_model": "bi-encoder: a folder with model.onnx + tokenizer.json, or a .onnx file",
    "rerank_model": "cross-encoder: a folder with model.onnx + tokenizer.json, or a .onnx file",
}

EXTRA = {"auto_register": ("bool", True), "embed_model": ("path", None), "rerank_model": ("path", None)}


def keys() -> dict[str, tuple[str, object]]:
    """key -> (type name, default)."""
    from .settings import Settings, kind_of

    out: dict[str, tuple[str, object]] = {f.name: (kind_of(f), f.default) for f in fields(Settings)}
    out.update(EXTRA)
    return out


def env_name(key: str) -> str:
    return f"LETHE_{key.upper()}"


def config_path(root: Path) -> Path:
    return Path(root) / ".lethe" / "config.toml"


def check_key(key: str) -> tuple[str, object]:
    known = keys()
    if key not in known:
        raise UsageError(f"unknown config key {key!r}; `lethe config list` shows the keys")
    return known[key]


def parse_value(key: str, raw: str):
    """The typed value of ``raw`` for ``key``; UsageError with one line when it does not fit
    (the rules of ``settings.check_value``, the same for the file and the environment)."""
    kind, _ = check_key(key)
    return check_value(key, kind, raw)


def toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        r = repr(v)
        return r if any(c in r for c in ".en") else r + ".0"
    return json.dumps(str(v))  # a TOML basic string: JSON escapes are TOML escapes


_HEADER = re.compile(r"^\s*\[")


def _key_line(key: str) -> re.Pattern:
    return re.compile(r"^\s*(?:" + re.escape(key) + r'|"' + re.escape(key) + r'")\s*=')


def edit(text: str, key: str, value) -> str:
    """``text`` with ``key`` set to ``value`` (None: removed); other lines untouched."""
    lines = text.splitlines(keepends=True)
    pat = _key_line(key)
    hits = [i for i, line in enumerate(lines) if pat.match(line)]
    if value is None:
        return "".join(line for i, line in enumerate(lines) if i not in hits)
    new = f"{key} = {toml_value(value)}\n"
    if hits:
        i = hits[0]
        indent = lines[i][: len(lines[i]) - len(lines[i].lstrip())]
        lines[i] = indent + new
        lines = [line for j, line in enumerate(lines) if j not in hits[1:]]
        return "".join(lines)
    first_table = next((i for i, line in enumerate(lines) if _HEADER.match(line)), len(lines))
    if first_table and not lines[first_table - 1].endswith("\n"):
        lines[first_table - 1] += "\n"
    lines.insert(first_table, new)
    return "".join(lines)


def _write_atomic(path: Path, text: str) -> None:
    from .store import _atomic_write

    path.parent.mkdir(parents=True, exist_ok=True)
    _atomic_write(path, text.encode("utf-8"))


def set_value(root: Path, key: str, value) -> Path:
    """Write ``key = value`` (None: remove it) into the project's config.toml."""
    import tomllib

    check_key(key)
    path = config_path(root)
    if not path.parent.is_dir():
        raise UsageError(f"{root} is not a lethe project (no .lethe folder); run `lethe init` first")
    text, data = read_config(path)
    new_text = edit(text, key, value)
    try:
        new = flatten(tomllib.loads(new_text))
    except tomllib.TOMLDecodeError as exc:  # pragma: no cover - edit() writes valid lines
        raise LetheError(f"cannot set {key} in {path} by hand ({exc}); edit it yourself") from None
    want = flatten(data)
    want.pop(key, None)
    if value is not None:
        want[key] = value
    if new != want:
        raise LetheError(f"cannot set {key} in {path}: it is defined in a way this command does not edit "
                         "(an inline table or a multi-line value); edit it yourself")
    _write_atomic(path, new_text)
    return path


def effective(root: Path, env: dict | None = None) -> list[dict]:
    """Every key with its value, where it comes from (env, config, default) and what it does."""
    env = os.environ if env is None else env
    _, data = read_config(config_path(root)) if (Path(root) / ".lethe").is_dir() else ("", {})
    flat = flatten(data)
    rows = []
    for key, (kind, default) in keys().items():
        e = env_name(key)
        if e in env:
            raw, source = env[e], f"env {e}"
            try:
                unset = raw.strip().lower() in ("", "none") and kind in ("float|None", "path")
                value = None if unset else parse_value(key, raw)
            except UsageError:
                value = raw
        elif key in flat:
            value, source = flat[key], "config"
        else:
            value, source = default, "default"
        if key == "auto_register" and str(env.get("LETHE_DISABLE_GLOBAL_REGISTRY", "")).strip().lower() in (
                "1", "true", "yes", "on"):
            value, source = False, "env LETHE_DISABLE_GLOBAL_REGISTRY"
        rows.append({"key": key, "value": value, "source": source, "type": kind, "default": default,
                     "env": e, "description": DESCRIPTIONS.get(key, "")})
    return rows


def apply_model_paths(start: Path | None) -> None:
    """Make ``embed_model`` / ``rerank_model`` from the config.toml of the project at or
    above ``start`` take effect in this process (as LETHE_EMBED_MODEL / LETHE_RERANK_MODEL,
    unless those are set). Cheap, and never raises: every command calls it."""
    try:
        here = Path(start or os.getcwd()).expanduser().resolve()
        root = next((d for d in (here, *here.parents) if (d / ".lethe").is_dir()), None)
        if root is None or not config_path(root).is_file():
            return
        _, data = read_config(config_path(root))
    except (LetheError, OSError, RuntimeError):
        return
    flat = flatten(data)
    for key in ("embed_model", "rerank_model"):
        if isinstance(flat.get(key), str) and flat[key] and env_name(key) not in os.environ:
            p = Path(flat[key]).expanduser()
            os.environ[env_name(key)] = str(p if p.is_absolute() else Path(root) / p)
