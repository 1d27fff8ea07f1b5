"""Search and learning settings, with their defaults.

Every field can be set in ``.lethe/config.toml`` (``[search]``/``[rif]`` tables or
flat keys) and overridden by ``LETHE_<FIELD>`` environment variables. Every value is
checked by the same rules (``check_value``) wherever it comes from, ``lethe config set``
included: a value that does not fit is one line naming where it came from (a UsageError,
exit status 2), never a traceback and never a silent default. Process settings read
from the environment only (``LETHE_THREADS``, ``LETHE_MAX_FILE_BYTES``,
``LETHE_LOCK_TIMEOUT``) go through ``env_value`` and the same rules.
"""

from __future__ import annotations

import math
import operator
import os
from dataclasses import dataclass, fields, replace
from pathlib import Path

from .errors import LetheError, UsageError


@dataclass(frozen=True)
class Settings:
    top_k: int = 10
    depth: int = 30                 # each first-stage list (BM25, dense) contributes this many
    # A judged search runs the first stage once, for k_deep candidates at depth
    # max(depth, k_deep) (pipeline.pool_sizes); the judge scores the top k_shallow (what
    # RIF learns from), and the rest when the best of those is below the threshold.
    k_shallow: int = 30
    k_deep: int = 100
    judge: str = "auto"             # auto | cross-encoder | late-interaction | none | a registered judge (lethe_sql.extend)
    # First stage (lethe_candidates): "z" = lethe_fused, z-scored BM25 / context-field BM25 /
    # cosine over the union of each list's top `depth`, weighted; "rrf" = lethe_hybrid.
    fusion: str = "z"
    w_bm25: float = 0.0             # BM25 over the entry's own text (its top `depth` still joins the pool)
    w_ctx: float = 1.0              # BM25 over the context field (the text with its session neighbours)
    w_dense: float = 1.0
    # Late-interaction final score: z-scored MaxSim blended with the first stage's
    # z-scored signals over the judged pool (pipeline.blend). All weights were chosen on
    # the tune half of LoCoMo dev7's conversations (bench/results/README.md).
    blend_judge: float = 1.0
    blend_bm25: float = -0.25
    blend_ctx: float = 0.5
    blend_dense: float = 0.0
    # 0/1 query-analysis cues added to that score (lethe_sql/cues.py), in the same units
    # (standard deviations of the z-scored terms, before dividing by their weights' sum).
    blend_time: float = 1.5         # a when / how long / how often question and an entry stating that kind of time
    blend_date: float = 2.0         # the question names a period and the entry's date is in it
    blend_question: float = -1.0    # the entry only asks (a question that is most of its text: cues.is_question)
    blend_phrase: float = 3.0       # the query quotes a phrase and the entry holds it (tune: no effect at 0.5-3; see cues.py)
    blend_ident: float = 3.0        # the query names identifiers (a number, a version, a path) and the entry holds them all
    blend_title: float = 3.0        # times how far the entry's heading names the query's words (cues.title_share)
    rerank_threshold: float | None = None  # None: the judge's own default
    rif: bool = True
    n_clusters: int = 30
    rif_rate: float = 0.1
    rif_reinforce: float = 0.05
    rif_max: float = 1.0
    rif_lambda: float = 0.005
    rif_alpha: float = 0.3
    # Experimental, off: suppression times this is also taken off the judge's final score
    # (the issue applies it before the judge only, where it barely moves results:
    # bench/results/locomo-dev7-split-rif).
    rif_final_alpha: float = 0.0
    refit_growth: float = 1.5       # refit k-means when the log grew by this factor since the last fit
    lifecycle: bool = True
    dedup: bool = True              # merge duplicates (the same words) on write (lethe_sql/dedup.py)
    # Revisions (lethe_sql/revisions.py): detect, on write, that a newer memory supersedes an
    # older one, and rank the current version first for questions about the present.
    # Declared links (supersedes= markers) are kept either way.
    revisions: bool = True
    # Agent hooks (lethe_sql/hooks.py): what one agent session may be given as context.
    # context_tokens is the whole session's budget, shared by the session-start hook (at
    # most start_tokens of it) and the prompt hook (at most prompt_tokens a prompt); about
    # 4 characters a token. A prompt gets memories only when their score (the cosine of
    # the prompt and the memory, bench/results/hook-prompt) is at least prompt_min_score.
    context_tokens: int = 2000
    start_tokens: int = 600
    prompt_tokens: int = 300
    prompt_min_score: float = 0.3

    def with_(self, **kw) -> "Settings":
        return replace(self, **{k: v for k, v in kw.items() if v is not None})


#: the settings that SQL a user runs by hand reads from ``meta`` (sql/rif.sql:
#: ``lethe_rif_lambda()``, which the ``lethe_suppression`` view and ``lethe_suppression_at``
#: use); every learning update writes them (``lethe_sql.learn.update``), so the views decay
#: suppression as the searches do
META_SETTINGS = ("rif_lambda",)


def meta_rows(s: Settings) -> list[tuple[str, str]]:
    """(key, value) rows of ``meta`` for ``META_SETTINGS``, values as text (repr: exact)."""
    return [(k, repr(getattr(s, k))) for k in META_SETTINGS]


#: the most results a search returns, and the deepest a first-stage list goes (``lethe
#: search --top-k``'s maximum): larger counts are refused, not passed on to SQL
MAX_COUNT = 1000

# The rules every setting's value follows, wherever it comes from (.lethe/config.toml,
# LETHE_<KEY>, `lethe config set`): one text per rule (check_value).
CHOICES = {"fusion": ("z", "rrf")}


def choices_of(key: str) -> tuple[str, ...] | None:
    """The values setting ``key`` takes, when it takes a fixed set: ``judge`` takes the
    judges of the registry (lethe_sql.extend: auto, every registered judge, none)."""
    if key == "judge":
        from .extend import judge_choices

        return judge_choices()
    return CHOICES.get(key)

#: int settings: (least, most)
INT_RANGES = {k: (1, MAX_COUNT) for k in ("top_k", "depth", "k_shallow", "k_deep", "n_clusters")}
INT_RANGES.update({k: (0, 100_000) for k in ("context_tokens", "start_tokens", "prompt_tokens")})
_WANT = {"bool": "true or false", "int": "an integer", "float": "a number", "float|None": "a number"}
_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


def kind_of(f) -> str:
    """The type name of a ``Settings`` field as the checks know it: int, float, bool, str, float|None."""
    t = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
    return t.replace(" ", "")


def check_range(name: str, value: int, least: int | None, most: int | None):
    """``value`` when it lies in [least, most]; UsageError naming ``name`` otherwise."""
    if least is not None and value < least:
        raise UsageError(f"{name} must be at least {least}, got {value}")
    if most is not None and value > most:
        raise UsageError(f"{name} must be at most {most}, got {value}")
    return value


def check_value(key: str, kind: str, raw, name: str | None = None):
    """The typed value of ``raw`` (text, or a value read from TOML) for setting ``key`` of
    type ``kind``; a UsageError of one line naming ``name`` (default: the key) when it does not fit."""
    name = name or key
    text = raw.strip() if isinstance(raw, str) else raw
    try:
        if kind == "bool":
            if isinstance(raw, bool):
                return raw
            if isinstance(text, str) and text.lower() in _TRUE + _FALSE:
                return text.lower() in _TRUE
            raise ValueError
        if kind == "int":
            if isinstance(raw, bool) or not isinstance(raw, (int, str)):
                raise ValueError
            v = int(text)
            least, most = INT_RANGES.get(key, (0, None))
            return check_range(name, v, least, most)
        if kind in ("float", "float|None"):
            if kind == "float|None" and (raw is None or (isinstance(text, str) and text.lower() in ("", "none"))):
                return None
            if isinstance(raw, bool) or not isinstance(raw, (int, float, str)):
                raise ValueError
            v = float(text)
            if not math.isfinite(v):
                raise ValueError
            return v
    except ValueError:
        raise UsageError(f"{name} takes {_WANT[kind]}, got {raw!r}") from None
    choices = choices_of(key)
    if choices and (not isinstance(raw, str) or text not in choices):
        raise UsageError(f"{name} takes one of {', '.join(choices)}, got {raw!r}")
    if not isinstance(raw, str):
        raise UsageError(f"{name} takes a string, got {raw!r}")
    if not text:
        raise UsageError(f"{name} takes a non-empty value")
    return text


def check_count(name: str, value, most: int = MAX_COUNT) -> int:
    """A count passed to the API (``top_k``, ``depth``): an integer in [1, most]."""
    if isinstance(value, bool) or not isinstance(value, int):
        try:
            value = operator.index(value)
        except TypeError:
            raise UsageError(f"{name} takes an integer, got {value!r}") from None
    return check_range(name, int(value), 1, most)


def env_value(name: str, kind: str, default, least: float | None = None):
    """A process setting from the environment (LETHE_THREADS, LETHE_MAX_FILE_BYTES, ...):
    ``default`` when unset or empty, else checked like a setting (UsageError naming it)."""
    raw = os.environ.get(name, "")
    if not raw.strip():
        return default
    v = check_value(name, kind, raw, name)
    return v if least is None else check_range(name, v, least, None)


def read_config(path: Path) -> tuple[str, dict]:
    """(text, parsed TOML) of a config.toml; ("", {}) when there is none. UsageError when it
    is not valid TOML, LetheError when it cannot be read."""
    import tomllib

    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return "", {}
    except OSError as exc:
        raise LetheError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8")
        return text, tomllib.loads(text)
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path} is not valid TOML (not UTF-8 at byte {exc.start}); fix it by hand") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path} is not valid TOML ({exc}); fix it by hand") from None


def flatten(data: dict) -> dict:
    """Flat keys and the keys of every [table], in one dict (tables do not nest settings)."""
    out: dict = {}
    for k, v in data.items():
        if isinstance(v, dict):
            out.update(v)
        else:
            out[k] = v
    return out


def load_settings(root: Path | None = None, env: dict | None = None) -> Settings:
    """Defaults <- .lethe/config.toml <- LETHE_* environment variables. A value that does not
    fit its setting is a UsageError naming the variable or the key and its file."""
    values: dict = {}
    cfg = None
    if root is not None:
        cfg = Path(root) / ".lethe" / "config.toml"
        if cfg.is_file():
            values = flatten(read_config(cfg)[1])
    env = os.environ if env is None else env
    out = {}
    for f in fields(Settings):
        var = f"LETHE_{f.name.upper()}"
        if var in env:
            out[f.name] = check_value(f.name, kind_of(f), env[var], var)
        elif f.name in values:
            out[f.name] = check_value(f.name, kind_of(f), values[f.name], f"{f.name} in {cfg}")
    return Settings(**out)
