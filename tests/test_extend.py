"""The registry of judges and embedders (lethe_sql.extend): a judge is one registered
factory; settings, the API and the CLI choose it by name; unknown names are one line."""

from __future__ import annotations

import numpy as np
import pytest

from lethe_sql import extend
from lethe_sql.errors import UsageError
from lethe_sql.settings import Settings, check_value, load_settings


class LongestFirst:
    """A tiny judge: longer entries are better."""

    name = "longest"
    default_threshold = float("inf")

    def __init__(self):
        self.calls = 0

    def score(self, con, enc, ids):
        self.calls += 1
        rows = con.execute("SELECT id, length(text) FROM entries WHERE list_contains(CAST(? AS VARCHAR[]), id)",
                           ["[" + ",".join(ids) + "]"]).fetchall()
        return {i: float(n) for i, n in rows}

    def logits(self, scores):
        return np.asarray(scores, dtype=np.float64) / 10.0


MADE: list[LongestFirst] = []


def longest(ctx, required):
    MADE.append(LongestFirst())
    return MADE[-1]


@pytest.fixture(autouse=True, scope="module")
def registered():
    """The judge registered as a plugin module does it (``@register_judge("longest")`` at
    import), here for this module's tests only: the other tests see the built-in list."""
    extend.register_judge("longest")(longest)
    yield
    extend._JUDGES.pop("longest")


def test_a_registered_judge_is_a_setting_choice_and_is_used(project):
    assert "longest" in extend.judge_choices()
    assert extend.judge_choices()[0] == "auto" and extend.judge_choices()[-1] == "none"
    assert check_value("judge", "str", "longest") == "longest"
    assert load_settings(None, env={"LETHE_JUDGE": "longest"}).judge == "longest"
    for t in ["short note on kafka", "a much longer note on kafka and its consumer groups and offsets",
              "medium note on kafka offsets"]:
        project.add(t)
    hits = project.search("kafka", top_k=3, learn=False, judge="longest")
    assert [h.text for h in hits][0].startswith("a much longer note") and hits[0].judge == "longest"
    assert MADE and MADE[-1].calls == 1
    project.settings = Settings(judge="longest")
    assert isinstance(project.judge(), LongestFirst)


def test_unknown_names_are_one_line_listing_the_choices(project):
    with pytest.raises(UsageError) as e:
        check_value("judge", "str", "nope", "LETHE_JUDGE")
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("LETHE_JUDGE takes one of auto, cross-encoder, late-interaction")
    assert "longest" in msg and msg.endswith("got 'nope'")
    with pytest.raises(UsageError, match="unknown judge 'nope'; choose one of auto, cross-encoder"):
        project.judge("nope")
    with pytest.raises(ValueError):
        extend.register_judge("auto", longest)


def test_builtin_names_keep_their_behaviour(project):
    from lethe_sql.judges import LateInteractionJudge

    project.add("a note about postgres")
    assert project.judge("none") is None
    assert isinstance(project.judge("late-interaction"), LateInteractionJudge)
    assert extend.names("embedder")[0] == "minilm"
    assert extend.make_embedder() is extend.make_embedder()  # the shared MiniLM, loaded once
