"""Extension points: the judges and embedders a search can use, chosen by name through one
registry (in the spirit of llm's and sqlite-utils' plugin hooks).

A judge is a factory registered under a name::

    from lethe_sql.extend import register_judge

    @register_judge("my-judge")
    def my_judge(ctx, required):
        return MyJudge()        # or None when it cannot run here (then ``auto`` passes it by)

``ctx`` is a :class:`JudgeContext` (the store's connection, the reranker lookup);
``required`` is true when the user named this judge (a factory may then raise an
error that says what is missing) and false when ``auto`` is trying it. The object
returned has ``name``, ``default_threshold``, ``score(con, enc, ids) -> {id: score}`` and
``logits(scores)`` (``lethe_sql.judges``), and optionally ``blend = True``.
A new judge is one file: a module that registers itself when imported, installed as an
entry point of group ``lethe_sql.judges`` (``[project.entry-points."lethe_sql.judges"]
my-judge = "my_pkg.my_judge"``) so that lethe imports it when it lists the judges.

Embedders work the same way (``register_embedder``, entry point group
``lethe_sql.embedders``): a factory of no arguments returning an object with
``encode(texts)`` (L2-normalised FLOAT[384] rows), ``model_id`` and, for token vectors,
``encode_full``.

``settings.check_value`` validates ``judge`` against :func:`judge_choices`, so a
config file, ``LETHE_JUDGE`` and ``--judge`` all accept a registered name and refuse
others with one line listing the choices.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable

#: the built-in judges and embedders, as "module:factory" (imported when first used)
_JUDGES: dict[str, object] = {
    "cross-encoder": "lethe_sql.judges:cross_encoder_judge",
    "late-interaction": "lethe_sql.judges:late_interaction_judge",
}
_EMBEDDERS: dict[str, object] = {"minilm": "lethe_sql.udfs.embed:shared_embedder"}
#: what ``auto`` tries, in order; registered judges are chosen by name only
AUTO = ("cross-encoder", "late-interaction")
GROUPS = {"judge": ("lethe_sql.judges", _JUDGES), "embedder": ("lethe_sql.embedders", _EMBEDDERS)}
_loaded: set[str] = set()


@dataclass
class JudgeContext:
    con: object                                  # the store's DuckDB connection
    reranker_source: Callable[[], object | None]  # the installed cross-encoder, or None


def _register(kind: str, name: str, factory=None):
    table = GROUPS[kind][1]

    def add(f):
        if not name or name in ("auto", "none"):
            raise ValueError(f"{name!r} cannot name a {kind}")
        table[name] = f
        return f

    return add if factory is None else add(factory)


def register_judge(name: str, factory=None):
    """Register ``factory(ctx, required) -> judge | None`` as judge ``name`` (a decorator
    without ``factory``). A later registration of the same name replaces the earlier."""
    return _register("judge", name, factory)


def register_embedder(name: str, factory=None):
    """Register ``factory() -> embedder`` as embedder ``name`` (a decorator without ``factory``)."""
    return _register("embedder", name, factory)


def _load_plugins(kind: str) -> None:
    """Import the modules of the ``kind``'s entry point group once (they register themselves)."""
    group = GROUPS[kind][0]
    if group in _loaded:
        return
    _loaded.add(group)
    from importlib.metadata import entry_points

    for ep in entry_points(group=group):
        obj = ep.load()
        if callable(obj) and ep.name not in GROUPS[kind][1]:  # an entry point naming the factory itself
            _register(kind, ep.name, obj)


def names(kind: str) -> tuple[str, ...]:
    _load_plugins(kind)
    return tuple(GROUPS[kind][1])


def judge_choices() -> tuple[str, ...]:
    """Every value the ``judge`` setting takes: auto, the registered judges, none."""
    return ("auto", *names("judge"), "none")


def factory(kind: str, name: str):
    """The registered factory of ``name`` (UsageError listing the choices when there is none)."""
    table = GROUPS[kind][1]
    if name not in table:
        _load_plugins(kind)
    if name not in table:
        from .errors import UsageError

        raise UsageError(f"unknown {kind} {name!r}; choose one of {', '.join(judge_choices() if kind == 'judge' else names(kind))}")
    f = table[name]
    if isinstance(f, str):
        module, attr = f.split(":")
        f = table[name] = getattr(importlib.import_module(module), attr)
    return f


def make_judge(name: str, ctx: JudgeContext):
    """The judge a search uses: ``none`` none; ``auto`` the first of ``AUTO`` that can run
    here (the cross-encoder when one is installed, else late interaction over the token
    index), else none; any other registered name, its factory's judge (None when it
    cannot run here)."""
    if name == "none":
        return None
    if name == "auto":
        for n in AUTO:
            j = factory("judge", n)(ctx, False)
            if j is not None:
                return j
        return None
    return factory("judge", name)(ctx, True)


def make_embedder(name: str = "minilm"):
    return factory("embedder", name)()
