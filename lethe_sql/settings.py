"""Search and learning settings, with their defaults.

Every field can be set in ``.lethe/config.toml`` (``[search]``/``[rif]`` tables or
flat keys) and overridden by ``LETHE_<FIELD>`` environment variables.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields, replace
from pathlib import Path


@dataclass(frozen=True)
class Settings:
    top_k: int = 10
    depth: int = 30                 # each first-stage list (BM25, dense) contributes this many
    # A judged search runs the first stage once, for k_deep candidates at depth
    # max(depth, k_deep) (pipeline.pool_sizes); the judge scores the top k_shallow (what
    # RIF learns from), and the rest when the best of those is below the threshold.
    k_shallow: int = 30
    k_deep: int = 100
    judge: str = "auto"             # auto | cross-encoder | late-interaction | none
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
    blend_time: float = 1.5         # a "when" question and an entry that states a time
    blend_date: float = 2.0         # the question names a period and the entry's date is in it
    blend_question: float = 0.0     # the entry is itself a question (-1.0 helps LoCoMo, costs LongMemEval: off)
    blend_phrase: float = 3.0       # the query quotes a phrase and the entry holds it (tune: no effect at 0.5-3; see cues.py)
    blend_ident: float = 3.0        # the query names identifiers (a number, a version, a path) and the entry holds them all
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

    def with_(self, **kw) -> "Settings":
        return replace(self, **{k: v for k, v in kw.items() if v is not None})


def _coerce(kind, value):
    if kind in (bool, "bool"):
        if isinstance(value, bool):
            return value
        return str(value).strip().lower() in ("1", "true", "yes", "on")
    if kind in (int, "int"):
        return int(value)
    if kind in (float, "float", "float | None"):
        return None if value in (None, "", "none", "None") else float(value)
    return str(value)


def load_settings(root: Path | None = None, env: dict | None = None) -> Settings:
    """Defaults <- .lethe/config.toml <- LETHE_* environment variables."""
    values: dict = {}
    if root is not None:
        cfg = Path(root) / ".lethe" / "config.toml"
        if cfg.is_file():
            import tomllib

            with open(cfg, "rb") as fh:
                data = tomllib.load(fh)
            for k, v in data.items():
                if isinstance(v, dict):
                    values.update(v)
                else:
                    values[k] = v
    env = os.environ if env is None else env
    out = {}
    for f in fields(Settings):
        raw = env.get(f"LETHE_{f.name.upper()}", values.get(f.name))
        if raw is not None:
            out[f.name] = _coerce(f.type if not isinstance(f.type, str) else f.type, raw)
    return Settings(**out)
