"""Paired statistics over per-query scores (numpy only, fixed seeds, vectorised).

* ``bootstrap_ci(x)``: percentile bootstrap 95% CI of the mean of ``x``.
* ``paired_bootstrap(a, b)``: the same for the mean of ``b - a`` (queries resampled
  with replacement, the pairing kept).
* ``permutation_p(a, b)``: two-sided paired sign-flip permutation test of
  ``mean(b - a) == 0``; ``p = (1 + #{|mean(s * d)| >= |mean(d)|}) / (1 + n_perm)``, so
  identical inputs give p = 1 and p is never 0.
* ``compare(a, b)``: delta, CI and p together, as the reports print them.

Resamples are drawn in blocks to bound memory (10,000 x 1,000 queries would be 80 MB
of indices at once).
"""

from __future__ import annotations

import numpy as np

N_RESAMPLES = 10_000
_BLOCK = 500


def _as_array(x) -> np.ndarray:
    a = np.asarray(x, dtype=np.float64).reshape(-1)
    if a.size == 0:
        raise ValueError("no scores to resample")
    return a


def _bootstrap_means(d: np.ndarray, n_resamples: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    n = d.size
    means = np.empty(n_resamples)
    for start in range(0, n_resamples, _BLOCK):
        m = min(_BLOCK, n_resamples - start)
        idx = rng.integers(0, n, size=(m, n))
        means[start : start + m] = d[idx].mean(axis=1)
    return means


def bootstrap_ci(x, *, n_resamples: int = N_RESAMPLES, seed: int = 0, level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap CI of the mean of ``x``."""
    d = _as_array(x)
    means = _bootstrap_means(d, n_resamples, seed)
    lo, hi = np.quantile(means, [(1 - level) / 2, 1 - (1 - level) / 2])
    return float(lo), float(hi)


def paired_bootstrap(a, b, *, n_resamples: int = N_RESAMPLES, seed: int = 0, level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap CI of ``mean(b - a)`` over paired queries."""
    a, b = _as_array(a), _as_array(b)
    if a.shape != b.shape:
        raise ValueError(f"paired scores differ in length: {a.size} vs {b.size}")
    return bootstrap_ci(b - a, n_resamples=n_resamples, seed=seed, level=level)


def permutation_p(a, b, *, n_permutations: int = N_RESAMPLES, seed: int = 0) -> float:
    """Two-sided paired sign-flip permutation p-value for ``mean(b - a) == 0``."""
    a, b = _as_array(a), _as_array(b)
    if a.shape != b.shape:
        raise ValueError(f"paired scores differ in length: {a.size} vs {b.size}")
    d = b - a
    observed = abs(d.mean())
    rng = np.random.default_rng(seed)
    n = d.size
    hits = 0
    # Tolerance so that float noise in the flipped sums never counts against ties.
    tol = 1e-12 * max(1.0, float(np.abs(d).max()))
    for start in range(0, n_permutations, _BLOCK):
        m = min(_BLOCK, n_permutations - start)
        signs = rng.integers(0, 2, size=(m, n), dtype=np.int8) * 2 - 1
        stats = np.abs((signs * d).mean(axis=1))
        hits += int((stats >= observed - tol).sum())
    return (1 + hits) / (1 + n_permutations)


def compare(a, b, *, n_resamples: int = N_RESAMPLES, seed: int = 0) -> dict:
    """``b`` against baseline ``a``: {"delta", "ci95": [lo, hi], "p", "n"}."""
    a, b = _as_array(a), _as_array(b)
    lo, hi = paired_bootstrap(a, b, n_resamples=n_resamples, seed=seed)
    return {
        "delta": float((b - a).mean()),
        "ci95": [lo, hi],
        "p": permutation_p(a, b, n_permutations=n_resamples, seed=seed),
        "n": int(a.size),
    }
