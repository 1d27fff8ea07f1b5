"""Revisions: a newer memory that restates a subject with changed content supersedes the older one.

Links live in the ``revisions`` table (new_id supersedes old_id) and come from two places:

* **declared**: a ``<!-- lethe supersedes=ID -->`` marker in the newer memory's section
  (``lethe add --supersedes ID`` writes one; a person may write one by hand). The
  markdown is the source of truth: every pass re-derives the declared links from the
  markers of the indexed sections (``section_marks``), so a rebuild restores them.
* **detected**: when a memory is indexed, its nearest older memories (cosine) are
  checked by :func:`classify`; a pair that passes is linked. A ``<!-- lethe distinct=ID
  -->`` marker vetoes a detected link between its section and ID (``lethe revisions ID
  --unlink OTHER`` writes one).

A link needs the two memories' dates to be ordered (the newer one is written later);
declared links are taken as written. No link may close a cycle: a declared link that
would is ignored with a warning, a detected one silently.

Searches read the links (``pipeline``): for a question about the present, a superseded
memory ranks below every memory in the pool that supersedes it, and the current version
of a superseded memory in the pool is pulled into the pool when it is missing; a
question about the past (``cues.asks_past``) is ranked as if there were no links. Every
result says when it was superseded and by what.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import lru_cache
from datetime import datetime, timedelta
from typing import Iterable, Sequence

import numpy as np

from .cues import HEADING_STAMP as _TIMESTAMP, id_parts as _id_parts, identifiers as _identifiers, is_question, title_words, words

#: each memory is scored against this many of its nearest older memories (cosine)
NEIGHBOURS = 10
#: no pair below this cosine is scored
COS_FLOOR = 0.3
#: batches of more new memories than this skip detection (warning; `lethe index --rebuild`)
MAX_DETECT_BATCH = 20000
#: a scored pair at or above this probability is a link (a detected revision). A link marks
#: the older memory superseded (shown so, kept out of the session-start context), so it is
#: set for precision: a pair below it still counts in the order of a question about the
#: present (``present.py``). 0.3 until 2026-11-25; with the model over feature products,
#: leave-one-project-out over p01-p41 (n = 659 current) ranks alike at 0.4 (cur@1 / cur_first
#: / stale@1 0.763 / 0.964 / 0.023 at 0.3, 0.765 / 0.961 / 0.024 at 0.4)
LINK_AT = 0.4
#: scored pairs under this are not read back for ranking (``scored_pairs``): 2% of the
#: candidate pairs of p01-p33 scored 0.01-0.02 are revisions
PAIR_FLOOR = 0.01

_WORD = re.compile(r"\w+")
_HEX = re.compile(r"^[0-9a-f]{4,16}$")

_NEGATIONS = frozenset({"not", "no", "never", "none", "nothing", "nor", "without", "cannot", "t", "neither"})
# Words that announce a change of state in the newer memory (or that it corrects an earlier one).
_CHANGE = re.compile(
    r"\b(now|instead|replac\w*|switch\w*|mov(?:e|ed|es|ing)|migrat\w*|chang\w*|no longer|any ?more|"
    r"updat\w*|renam\w*|bump\w*|upgrad\w*|downgrad\w*|revert\w*|dropp?\w*|deprecat\w*|supersed\w*|"
    r"rais\w*|lower\w*|increas\w*|decreas\w*|reduc\w*|extend\w*|shorten\w*|from\b.{1,60}?\bto\b|"
    r"was\b.{1,60}?\bis\b|went|handed|took over|takes over|reassign\w*|new|"
    r"retir\w*|remov\w*|delet\w*|decommission\w*|sunset\w*|done|finished|cut ?over|back to|again|"
    r"starting|effective|going forward|correct(?:ion|ions|ed|ing)|amend\w*|turns? out|scratch that|disregard\w*|"
    r"mistaken\w*|(?:was|were) wrong|erratum)\b",
    re.I,
)
# A note that is not a statement of how things are: an incident, a reminder, a how-to, a
# question, a checklist, a status report. Later notes on a subject are often such notes,
# and they are rarely its new version (``note_kind``).
_NOTE_KIND = re.compile(
    r"^\W*(?:incident|outage|post-?mortem|reminder|how-?to|question|q|faq|checklist|status|progress|"
    r"readout|todo|fyi|note to self|heads up)\b",
    re.I,
)
#: ...or whose title ends in such a noun: English titles put their head noun last ("Purge
#: job check", "Broker load test", "Nomad rollback how-to", "Unlock fee question", "Infra
#: overview (June)"; ``note_head``)
_NOTE_HEADS = frozenset({"incident", "outage", "postmortem", "mortem", "reminder", "howto", "question", "faq",
                         "checklist", "status", "progress", "readout", "todo", "fyi", "check", "checked", "test",
                         "tests", "result", "results", "benchmark", "overview", "summary", "recap"})
# Words that name a deployment scope; two notes naming only different scopes describe two
# things ("Prod DB goes through pgbouncer" / "Staging DB now via pgbouncer": ``scope_apart``).
_SCOPES = {"prod": "prod", "production": "prod", "live": "prod", "staging": "stg", "stage": "stg", "stg": "stg",
           "dev": "dev", "development": "dev", "local": "local", "localhost": "local", "test": "test",
           "qa": "test", "uat": "uat", "sandbox": "sandbox", "preview": "preview"}
_DATE_REF = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b|\b(\d{2})-(\d{2})\b")


@dataclass(frozen=True)
class Memory:
    """What detection reads of a memory."""

    id: str
    text: str
    heading: str | None
    at: datetime | None
    source: str | None = None
    position: int | None = None

    def before(self, other: "Memory") -> bool:
        """Written strictly before ``other``. Sections of one day's file without a time are
        not ordered: a list written at once ("fact 1", "fact 2", ...) holds no revisions."""
        return self.at is not None and other.at is not None and self.at < other.at


#: the pair features, in model order (``pair_features``)
FEATURES = ("cos", "near", "covers_old", "covers_new", "rarest_shared", "change_words", "names_date",
            "gap", "jaccard", "same_heading", "shared_identifiers", "short", "value_changed", "title_change",
            "note_kind", "scope_apart", "token_cover")
# A logistic model over the standardised inputs (``model_inputs``: the features and their
# pairwise products), fitted on the development update sets' projects p01-p49
# (bench/data/updates, dev-a to dev-m; dev-n is held out) with LoCoMo conversation pairs as
# negatives (bench/lever_study/revision_fit.py --projects p01,...,p49 prints these; 14,319
# candidate pairs, 1,267 true, and as many conversation pairs). ``note_kind`` and
# ``scope_apart`` joined on 2026-11-25 (twelfth session): seven folds over p01-p49, pairs
# of a fold scored by a model fitted on the others, precision at ``LINK_AT`` 0.820 -> 0.836,
# recall 0.798 -> 0.803, average precision 0.881 -> 0.892 (false links 222 -> 199); fitted
# on p01-p49 and scored on p50-p57, recall 0.677 -> 0.714, precision 0.907 -> 0.906.
# ``note_kind`` also reads the title's last word (``note_head``) since the thirteenth
# session (refitted on p01-p49): seven folds, average precision 0.892 -> 0.895, recall
# 0.803 -> 0.809 at precision 0.838; fitted on p01-p49 and scored on p50-p61, average
# precision 0.854 -> 0.855; on dev-q (p62-p65, whose misses suggested it) 0.869 -> 0.914.
_MEAN = (0.50904, 0.34996, 0.11271, 0.10367, 0.24252, 0.36864, 0.00027935, 0.64005, 0.08467,
    0.26932, 0.020509, 0.015399, 0.16817, 0.10161, 0.039388, 0.020742, 0.37465, 0.18553, 0.065474,
    0.060348, 0.13107, 0.16928, 0.00015067, 0.34116, 0.049412, 0.16266, 0.010345, 0.0098947,
    0.070657, 0.043271, 0.015709, 0.0085611, 0.19932, 0.046713, 0.042718, 0.09089, 0.13533,
    0.00020951, 0.21039, 0.033702, 0.09124, 0.012797, 0.0043955, 0.071271, 0.038109, 0.015607,
    0.0081049, 0.13878, 0.019138, 0.035262, 0.038184, 6.502e-05, 0.077317, 0.016089, 0.041111,
    0.00398, 0.0036141, 0.014863, 0.009781, 0.0029486, 0.0016553, 0.047378, 0.032631, 0.031487,
    4.5715e-05, 0.070853, 0.014937, 0.036944, 0.0034412, 0.0041717, 0.013678, 0.0084804, 0.0028124,
    0.0016046, 0.043913, 0.085207, 8.766e-05, 0.16213, 0.025144, 0.077494, 0.0058977, 0.002965,
    0.034875, 0.021048, 0.0080139, 0.0040832, 0.096382, 0.00020951, 0.22178, 0.025798, 0.060852,
    0.01427, 0.0005587, 0.10025, 0.10161, 0.018612, 0.0095328, 0.13488, 0.00018242, 3.3649e-05,
    4.0491e-05, 5.8198e-05, 0, 6.9837e-05, 6.9837e-05, 0, 0, 0.00013109, 0.058413, 0.20088,
    0.011186, 0.012028, 0.086808, 0.056898, 0.02271, 0.01008, 0.24537, 0.031095, 0.0025325,
    0.0025763, 0.010258, 0.0065719, 0.0019852, 0.0012291, 0.035489, 0.0038142, 0.0073147, 0.013244,
    0.0085799, 0.002064, 0.0010356, 0.11044, 2.3279e-05, 0.0095328, 0.0053542, 0.0016761,
    0.00038411, 0.0089966, 6.9837e-05, 0, 0, 0, 0.0054811, 0.034674, 0.013164, 0.0056568, 0.061278,
    0.0017459, 0.0039807, 0.036488, 0.0013618, 0.013341, 0.007146)
_SD = (0.14169, 0.29424, 0.11026, 0.10474, 0.13252, 0.48243, 0.016711, 0.25508, 0.070314, 0.2544,
    0.09259, 0.12313, 0.37402, 0.30214, 0.19452, 0.14252, 0.079135, 0.1823, 0.076492, 0.074363,
    0.089706, 0.23479, 0.0093843, 0.18919, 0.051704, 0.16122, 0.050293, 0.080256, 0.16311, 0.13364,
    0.079728, 0.060414, 0.09238, 0.078817, 0.071463, 0.10312, 0.25351, 0.013645, 0.20259, 0.051843,
    0.1459, 0.069397, 0.047111, 0.20556, 0.14817, 0.098033, 0.070853, 0.13676, 0.036657, 0.042531,
    0.080427, 0.0044761, 0.089238, 0.030851, 0.062471, 0.023873, 0.042043, 0.050899, 0.04435,
    0.021156, 0.016608, 0.054944, 0.041193, 0.064095, 0.0029984, 0.086329, 0.030553, 0.057671,
    0.020092, 0.048654, 0.045345, 0.037246, 0.020304, 0.015688, 0.052958, 0.13513, 0.0052513,
    0.12298, 0.026978, 0.088785, 0.027382, 0.026763, 0.089252, 0.070976, 0.045216, 0.032087,
    0.063974, 0.014473, 0.31906, 0.05011, 0.16912, 0.078876, 0.02363, 0.30033, 0.30214, 0.13515,
    0.09717, 0.18344, 0.01101, 0.0023076, 0.0040972, 0.0044041, 1e-09, 0.0083566, 0.0083566, 1e-09,
    1e-09, 0.0080559, 0.059559, 0.20394, 0.054723, 0.099498, 0.21259, 0.17833, 0.1187, 0.077557,
    0.1207, 0.041567, 0.015016, 0.024144, 0.033345, 0.0281, 0.014143, 0.011638, 0.037311, 0.033726,
    0.059993, 0.083978, 0.070807, 0.031824, 0.022836, 0.10991, 0.0027855, 0.064539, 0.049621,
    0.025928, 0.011975, 0.043487, 0.0083566, 1e-09, 1e-09, 1e-09, 0.045109, 0.18295, 0.11398,
    0.074999, 0.14037, 0.041748, 0.062967, 0.11207, 0.036878, 0.067421, 0.050094)
_WEIGHTS = (-0.31082, -0.13806, 0.68735, 0.28541, 0.16022, -0.032126, 0.052352, 0.20677, 0.047575,
    1.2472, -0.089157, 0.032968, -0.65608, -0.28155, -0.1062, -0.028475, 1.0483, -0.0095813,
    -0.026644, -0.22831, -0.64235, -0.14326, 0.048494, -0.72833, -0.53118, -0.46132, 0.10362,
    0.022985, 0.40771, 0.014823, -0.13601, -0.049852, 0.19911, 0.39261, 0.161, 0.28247, 0.35665,
    0.044393, 0.38635, -0.45767, -0.10625, -0.28445, -0.11399, -0.14543, 0.31363, -0.18172,
    -0.23489, 0.30366, 0.28086, -0.18863, 0.84987, 0.039552, 0.31014, 0.019617, -0.54805, 0.30695,
    -0.088249, 0.0933, 0.24556, -0.17548, -0.12792, 0.49009, -0.56389, 0.36636, 0.043762, 0.20234,
    -0.036877, 0.57551, -0.32772, 0.047725, 0.14851, -0.0038374, -0.17076, -0.1091, 0.17041,
    -0.061053, 0.052217, -0.1287, -0.57829, -0.17215, 0.19125, -0.028113, -0.072681, 0.09937,
    -0.062595, -0.026754, -0.0013561, 0.048088, 0.17444, -0.45489, -0.08015, -0.5285, -0.018328,
    -0.1981, -0.28155, 0.10643, 0.25426, 0.42091, 0.051488, 0.039879, 0.078002, 0.070299, 0,
    0.0205, 0.078162, 0, 0, 0.049756, -0.22806, -0.23826, 0.84652, 0.014167, 0.77838, 0.55805,
    -0.11156, 0.11925, 0.05793, -0.41587, -0.03416, -0.031838, -0.029148, -0.21457, -0.17709,
    -0.10923, -0.082163, 0.28923, 0.024279, 0.28076, 0.29971, -0.17031, -0.27909, 0.21643, 0.10409,
    -0.3591, -0.058892, 0.22463, -0.036881, 0.014192, 0.10409, 0, 0, 0, 0.012955, -0.33996,
    0.17355, 0.15746, 0.075453, -0.03859, -0.37443, -0.083898, 0.17403, -0.13142, -0.044565)
_BIAS = -6.2355
# The same fit without ``token_cover``: for a pair whose memories have no token vectors (a
# store indexed with ``token_index=False``).
_NO_COVER = (
    (0.50904, 0.34996, 0.11271, 0.10367, 0.24252, 0.36864, 0.00027935, 0.64005, 0.08467, 0.26932,
        0.020509, 0.015399, 0.16817, 0.10161, 0.039388, 0.020742, 0.18553, 0.065474, 0.060348,
        0.13107, 0.16928, 0.00015067, 0.34116, 0.049412, 0.16266, 0.010345, 0.0098947, 0.070657,
        0.043271, 0.015709, 0.0085611, 0.046713, 0.042718, 0.09089, 0.13533, 0.00020951, 0.21039,
        0.033702, 0.09124, 0.012797, 0.0043955, 0.071271, 0.038109, 0.015607, 0.0081049, 0.019138,
        0.035262, 0.038184, 6.502e-05, 0.077317, 0.016089, 0.041111, 0.00398, 0.0036141, 0.014863,
        0.009781, 0.0029486, 0.0016553, 0.032631, 0.031487, 4.5715e-05, 0.070853, 0.014937,
        0.036944, 0.0034412, 0.0041717, 0.013678, 0.0084804, 0.0028124, 0.0016046, 0.085207,
        8.766e-05, 0.16213, 0.025144, 0.077494, 0.0058977, 0.002965, 0.034875, 0.021048, 0.0080139,
        0.0040832, 0.00020951, 0.22178, 0.025798, 0.060852, 0.01427, 0.0005587, 0.10025, 0.10161,
        0.018612, 0.0095328, 0.00018242, 3.3649e-05, 4.0491e-05, 5.8198e-05, 0, 6.9837e-05,
        6.9837e-05, 0, 0, 0.058413, 0.20088, 0.011186, 0.012028, 0.086808, 0.056898, 0.02271,
        0.01008, 0.031095, 0.0025325, 0.0025763, 0.010258, 0.0065719, 0.0019852, 0.0012291,
        0.0038142, 0.0073147, 0.013244, 0.0085799, 0.002064, 0.0010356, 2.3279e-05, 0.0095328,
        0.0053542, 0.0016761, 0.00038411, 6.9837e-05, 0, 0, 0, 0.034674, 0.013164, 0.0056568,
        0.0017459, 0.0039807, 0.0013618),
    (0.14169, 0.29424, 0.11026, 0.10474, 0.13252, 0.48243, 0.016711, 0.25508, 0.070314, 0.2544,
        0.09259, 0.12313, 0.37402, 0.30214, 0.19452, 0.14252, 0.1823, 0.076492, 0.074363, 0.089706,
        0.23479, 0.0093843, 0.18919, 0.051704, 0.16122, 0.050293, 0.080256, 0.16311, 0.13364,
        0.079728, 0.060414, 0.078817, 0.071463, 0.10312, 0.25351, 0.013645, 0.20259, 0.051843,
        0.1459, 0.069397, 0.047111, 0.20556, 0.14817, 0.098033, 0.070853, 0.036657, 0.042531,
        0.080427, 0.0044761, 0.089238, 0.030851, 0.062471, 0.023873, 0.042043, 0.050899, 0.04435,
        0.021156, 0.016608, 0.041193, 0.064095, 0.0029984, 0.086329, 0.030553, 0.057671, 0.020092,
        0.048654, 0.045345, 0.037246, 0.020304, 0.015688, 0.13513, 0.0052513, 0.12298, 0.026978,
        0.088785, 0.027382, 0.026763, 0.089252, 0.070976, 0.045216, 0.032087, 0.014473, 0.31906,
        0.05011, 0.16912, 0.078876, 0.02363, 0.30033, 0.30214, 0.13515, 0.09717, 0.01101,
        0.0023076, 0.0040972, 0.0044041, 1e-09, 0.0083566, 0.0083566, 1e-09, 1e-09, 0.059559,
        0.20394, 0.054723, 0.099498, 0.21259, 0.17833, 0.1187, 0.077557, 0.041567, 0.015016,
        0.024144, 0.033345, 0.0281, 0.014143, 0.011638, 0.033726, 0.059993, 0.083978, 0.070807,
        0.031824, 0.022836, 0.0027855, 0.064539, 0.049621, 0.025928, 0.011975, 0.0083566, 1e-09,
        1e-09, 1e-09, 0.18295, 0.11398, 0.074999, 0.041748, 0.062967, 0.036878),
    (0.34603, -0.091806, 0.8316, 0.40449, 0.19796, 0.079221, 0.059212, 0.19618, 0.055039, 1.4441,
        -0.10482, -0.015114, -0.69213, -0.31402, -0.12197, -0.025224, 0.31613, 0.06007, -0.051892,
        -0.47079, 0.22988, 0.055466, -0.59719, -0.47613, -0.35526, 0.19668, -0.024774, 0.56014,
        0.020172, -0.15087, -0.04597, 0.50709, 0.19114, 0.31626, 0.25749, 0.051485, 0.42199,
        -0.56615, -0.10227, -0.31168, -0.15588, -0.12594, 0.33155, -0.18048, -0.22593, 0.63836,
        -0.11018, 0.83073, 0.046785, 0.26106, 0.087518, -0.67258, 0.38431, -0.12597, 0.2394,
        0.26701, -0.17701, -0.1165, -0.52965, 0.71612, 0.050872, 0.19042, 0.003299, 0.72493,
        -0.34835, 0.025717, 0.10965, 0.018499, -0.16883, -0.09261, -0.085869, 0.05908, -0.21394,
        -0.57277, -0.21032, 0.23736, -0.076897, -0.010311, 0.026104, -0.077128, -0.022487,
        0.070474, 0.18196, -0.61386, -0.10345, -0.52708, -0.059741, -0.19936, -0.31402, 0.10316,
        0.20198, 0.058373, 0.047102, 0.074194, 0.053986, 0, 0.0063993, 0.077427, 0, 0, -0.31249,
        -0.27569, 0.86156, -0.033645, 0.8473, 0.65233, -0.12561, 0.12606, -0.47072, -0.074454,
        -0.082048, -0.16431, -0.27946, -0.17996, -0.094017, 0.31834, -0.029643, 0.3133, 0.31745,
        -0.11392, -0.31506, 0.12969, -0.43216, -0.1082, 0.25418, -0.06256, 0.12969, 0, 0, 0,
        -0.3967, 0.10797, 0.087622, -0.067197, -0.38068, 0.16808),
    -6.0519,
)


def _idf(df: dict[str, int], n_docs: int):
    def idf(t: str) -> float:
        d = df.get(t, 0)
        return math.log((n_docs - d + 0.5) / (d + 0.5) + 1.0)

    return idf


def pair_features(old: Memory, new: Memory, cos: float, rank: int, df: dict[str, int], n_docs: int,
                  cover: float | None = None) -> list[float]:
    """The features of the pair (``FEATURES``): ``cos`` the cosine of their embeddings,
    ``rank`` the place of ``old`` among ``new``'s nearest older memories (0: nearest),
    ``df``/``n_docs`` the BM25 document frequencies of the store (IDF weights), ``cover``
    their ``token_cover`` (None where a memory has no token vectors: NaN, and
    ``probability`` uses the model without it)."""
    idf = _idf(df, n_docs)
    a, b = set(words(old.text)), set(words(new.text))
    shared = a & b
    w_a = sum(idf(t) for t in a) or 1.0
    w_b = sum(idf(t) for t in b) or 1.0
    w_s = sum(idf(t) for t in shared)
    rarest = max((idf(t) for t in shared), default=0.0)
    gap_days = max((new.at - old.at).days, 0) if old.at and new.at else 0
    new_title = _TIMESTAMP.sub("", new.heading or "")
    title_change = bool(_CHANGE.search(new_title))
    ha, hb = title_words(old.heading), title_words(new.heading)
    heading = 0.0
    if ha and hb:
        heading = sum(idf(t) for t in ha & hb) / max(min(sum(idf(t) for t in ha), sum(idf(t) for t in hb)), 1e-9)
    return [
        float(cos),
        1.0 / (1.0 + rank),
        w_s / w_a,
        w_s / w_b,
        rarest / 10.0,
        1.0 if title_change or _CHANGE.search(new.text or "") else 0.0,
        1.0 if old.at and _refers_to_date(new.text or "", old.at) else 0.0,
        math.log1p(gap_days) / 5.0,
        len(shared) / max(len(a | b), 1),
        heading,
        min(sum(1 for t in _identifiers(old.text) & _identifiers(new.text)), 3) / 3.0,
        1.0 if min(len(a), len(b)) < 5 else 0.0,
        1.0 if value_changed(old.text, new.text) else 0.0,
        1.0 if title_change else 0.0,
        1.0 if _NOTE_KIND.search(new_title) or _NOTE_KIND.search(new.text or "") or note_head(new_title) else 0.0,
        1.0 if scope_apart(old, new, a, b) else 0.0,
        math.nan if cover is None else float(cover),
    ]


def note_head(title: str) -> bool:
    """Whether a title (its time stamp left out) ends in a noun of ``_NOTE_HEADS``, a
    closing parenthesis and what it encloses left out ("Infra overview (June)")."""
    t = title.rstrip()
    if t.endswith(")") and "(" in t:
        t = t[:t.rfind("(")]
    ws = _WORD.findall(t.lower())
    if ws[-2:] == ["how", "to"]:
        return True
    return bool(ws) and ws[-1] in _NOTE_HEADS


def _scopes(ws: Iterable[str]) -> set[str]:
    return {_SCOPES[w] for w in ws if w in _SCOPES}


def scope_apart(old: Memory, new: Memory, old_words: set[str] | None = None,
                new_words: set[str] | None = None) -> bool:
    """Whether the two notes name deployment scopes (``_SCOPES``) and none in common: their
    headings, else their headings and texts together. ``old_words`` / ``new_words``: the
    texts' ``words``, where the caller has them already (``pair_features``)."""
    a, b = _scopes(words(old.heading or "")), _scopes(words(new.heading or ""))
    if a and b and not a & b:
        return True
    a |= _scopes(words(old.text or "") if old_words is None else old_words)
    b |= _scopes(words(new.text or "") if new_words is None else new_words)
    return bool(a and b and not a & b)


def token_cover(a: np.ndarray, b: np.ndarray, wa: np.ndarray | None = None, wb: np.ndarray | None = None) -> float:
    """How well two memories' token vectors (rows, L2-normalised) cover each other: each
    token's best cosine among the other memory's tokens, averaged over its memory with the
    tokens' weights ``wa`` / ``wb`` (their IDF, as late interaction weighs a query's
    tokens; None: equal); the lesser of the two directions. A restatement in other words
    covers its older version token by token ("Postgres moved to 5434" / "staging DB now on
    port 5434") where the words differ; a note on a neighbouring subject leaves its rarer
    tokens uncovered. Added on 2026-11-24 (seventh session): pair-level
    leave-one-project-out over p01-p21 (513 true pairs of 6,169), links recall 0.718 ->
    0.767 at precision 0.802 -> 0.806 (0.761 / 0.808 unweighted)."""
    if not len(a) or not len(b):
        return float("nan")
    sims = a @ b.T
    wa = np.ones(len(a)) if wa is None else np.asarray(wa, dtype=np.float64)
    wb = np.ones(len(b)) if wb is None else np.asarray(wb, dtype=np.float64)
    return float(min(sims.max(axis=1) @ wa / max(wa.sum(), 1e-12), sims.max(axis=0) @ wb / max(wb.sum(), 1e-12)))


#: token vectors of at most this many memories are held at once by ``pair_covers``
COVER_BLOCK = 1000

# A semi-join, not the judge's ``list_contains`` (judges.TOKEN_ROWS_SQL): a detection pass
# reads the tokens of up to COVER_BLOCK memories at once, where list_contains tests every
# row against every id.
_COVER_TOKENS_SQL = """SELECT id, token, v, scale FROM token_vectors
WHERE id IN (SELECT unnest(CAST(? AS VARCHAR[]))) ORDER BY id, pos"""
_COVER_DF_SQL = "SELECT token, df FROM token_df WHERE token IN (SELECT unnest(CAST(? AS INTEGER[])))"


def pair_covers(con, pairs: Sequence[tuple[str, str]], n_docs: int | None = None) -> dict[tuple[str, str], float]:
    """``token_cover`` of each (old, new) pair whose memories both have token vectors, the
    tokens weighted by their IDF over the store's ``n_docs`` entries (``judges.token_idf``;
    counted here when not given)."""
    from .judges import dequantize, ids_literal, token_idf

    out: dict[tuple[str, str], float] = {}
    todo = sorted(set(pairs), key=lambda p: (p[1], p[0]))
    k = 0
    while k < len(todo):
        block, ids = [], set()
        while k < len(todo) and (len(ids) < COVER_BLOCK or {todo[k][0], todo[k][1]} <= ids):
            block.append(todo[k])
            ids.update(todo[k])
            k += 1
        tbl = con.execute(_COVER_TOKENS_SQL, [ids_literal(sorted(ids))]).to_arrow_table()
        if tbl.num_rows == 0:
            continue
        if n_docs is None:
            n_docs = con.execute("SELECT count(*) FROM entries").fetchone()[0]
        rows = dequantize(tbl.column("v").combine_chunks().values, tbl.column("scale").to_numpy())
        rows /= np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-12)
        toks = tbl.column("token").to_numpy()
        uniq = np.unique(toks)
        df = dict(con.execute(_COVER_DF_SQL, ["[" + ",".join(str(int(t)) for t in uniq) + "]"]).fetchall())
        w = dict(zip(uniq.tolist(), token_idf(n_docs, df, uniq).tolist()))
        weights = np.array([w[int(t)] for t in toks])
        names = tbl.column("id").to_pylist()
        cuts = [0] + [i for i in range(1, len(names)) if names[i] != names[i - 1]] + [len(names)]
        span = {names[a]: (a, b) for a, b in zip(cuts, cuts[1:])}
        for old, new in block:
            if old in span and new in span:
                (a0, a1), (b0, b1) = span[old], span[new]
                out[(old, new)] = token_cover(rows[a0:a1], rows[b0:b1], weights[a0:a1], weights[b0:b1])
    return out


_DIGITS = re.compile(r"\d+")
_LETTERS = re.compile(r"[a-z]+")


def _shape(value: str) -> str:
    """A value's shape: digit runs as 9, letter runs as a ("1.29" and "1.30" are "9.9",
    "pg-stg-1" is "a-a-9", "25s" is "9a")."""
    return _LETTERS.sub("a", _DIGITS.sub("9", value))


def _skeleton(value: str) -> str:
    """A value with its digit runs blanked: two values of one named thing share it
    ("pg-stg-1" and "pg-stg-2" are "pg-stg-#", "5123" and "5124" are "#"; "s3" and "v2"
    differ, where their ``_shape`` is one)."""
    return _DIGITS.sub("#", value)


def value_changed(old_text: str, new_text: str) -> bool:
    """Whether a value of one shape was swapped: the older text holds a value with a digit
    (an identifier: a version, a port, a host, a size) that the newer one lacks, and the
    newer one holds a value of the same shape that the older one lacks ("EKS 1.29" /
    "cluster on 1.30"; "port 5432" / "port 6432")."""
    a = {t for t in _identifiers(old_text) if any(c.isdigit() for c in t)}
    b = {t for t in _identifiers(new_text) if any(c.isdigit() for c in t)}
    return bool({_shape(t) for t in a - b} & {_shape(t) for t in b - a})


#: standardised features are clipped to this many standard deviations: the model is
#: linear, and far outside what it was fitted on (a two-word chat turn whose words all
#: recur, a gap of years) a linear score means nothing
CLIP_Z = 3.0


def named_apart(query, old_text: str, new_text: str) -> bool:
    """Whether ``query`` names ``old_text`` apart from ``new_text``: it holds an identifier
    with a digit (``_identifiers``: a number, a version, a host like pg-stg-1) that occurs
    in the older text and not in the newer one, where the newer one holds another value of
    its shape instead (the same identifier but for its digits: 5123 and 5124, pg-stg-1 and
    pg-stg-2, 14 and 15): "fact number 5123", "is it still on pg-stg-1?". An identifier
    without a digit names a thing, not a value ("Next.js", "Pub/Sub"), and so does one
    the newer note has no other value for ("S3", "R2": "which R2 bucket archives the
    feeds?" asks for the bucket, and the note that renames it need not say R2 again).
    ``query`` may be the query's identifiers already. Leave-one-project-out over p01-p21:
    cur@1 0.764 -> 0.767, cur_first 0.938 -> 0.944, stale@1 0.035 -> 0.029 (n = 339)
    against every identifier. The shape condition (2026-11-25, from dev-k's two misses on
    "S3" and "R2", read after its report): over p01-p33 one question better, one worse
    (n = 531 current); over dev-j and dev-k two better (n = 128)."""
    q = query if isinstance(query, (set, frozenset)) else _identifiers(query)
    q = [x for x in q if any(c.isdigit() for c in x)]
    if not q:
        return False
    old, new = _id_parts(old_text), _id_parts(new_text)
    others = {_skeleton(y) for y in new - old}
    return any(x in old and x not in new and _skeleton(x) in others for x in q)


def model_inputs(features: Sequence[float]) -> list[float]:
    """The model's inputs for one pair: its features, then the product of each two of them
    (i < j, in ``FEATURES`` order). A linear model over the features alone weighs a changed
    value the same whether or not the two notes also name one key, or announce a change;
    over their products it need not. Leave-one-project-out over p01-p41 (12,191 candidate
    pairs): average precision 0.849 -> 0.868, precision at ``LINK_AT`` 0.805 -> 0.819."""
    f = list(features)
    return f + [f[i] * f[j] for i, j in product_pairs(len(f))]


@lru_cache(maxsize=None)
def product_pairs(n: int) -> tuple[tuple[int, int], ...]:
    """The (i, j) of the products ``model_inputs`` appends for ``n`` features, in order."""
    return tuple((i, j) for i in range(n) for j in range(i + 1, n))


def probability(features: Sequence[float]) -> float:
    """The model's probability that the newer memory supersedes the older one (without
    ``token_cover`` where it is NaN: a memory with no token vectors, ``_NO_COVER``)."""
    cover = not math.isnan(features[-1])
    mean, sd, weights, bias = (_MEAN, _SD, _WEIGHTS, _BIAS) if cover else _NO_COVER
    x = model_inputs(features if cover else features[:-1])
    z = bias + sum(w * max(-CLIP_Z, min(CLIP_Z, (v - m) / s)) for v, m, s, w in zip(x, mean, sd, weights))
    return 1.0 / (1.0 + math.exp(-max(min(z, 50.0), -50.0)))


@dataclass(frozen=True)
class Verdict:
    revision: bool
    score: float
    reason: str


def by_rule(old: Memory, new: Memory, cos: float) -> Verdict | None:
    """The verdict of ``classify``'s rules (no order in time, a question, a conversation,
    two speakers, an assistant's answer, a restatement), or None when the model decides."""
    if not old.before(new):
        return Verdict(False, 0.0, "not ordered in time")
    if is_question(old.text) or is_question(new.text):
        return Verdict(False, 0.0, "a question states nothing to revise")
    if dialogue(old.text) or dialogue(new.text):
        return Verdict(False, 0.0, "a conversation of several speakers states no single fact to revise")
    a, b = speaker(old.text), speaker(new.text)
    if a and b and a != b:
        return Verdict(False, 0.0, f"said by different speakers ({a}, {b})")
    if a in _ANSWERERS or b in _ANSWERERS:
        # a chat log indexed turn by turn: an assistant's long answers share style and
        # vocabulary (LongMemEval's: 69 such pairs linked before the token cover, 118 with it)
        return Verdict(False, 0.0, "an assistant's answer states no fact to revise")
    swapped = _restated(old.text, new.text, cos)
    if swapped:
        return Verdict(True, 0.99, f"restated with changed words: {swapped}")
    return None


def classify(old: Memory, new: Memory, cos: float, rank: int, df: dict[str, int], n_docs: int,
             cover: float | None = None) -> Verdict:
    """Whether ``new`` supersedes ``old``: ``by_rule``, else the model's probability
    (``LINK_AT``), with a reason a person can check (``cover``: their ``token_cover``,
    ``pair_features``). Pure: the same inputs always get the same verdict. Only a pair
    ordered in time is ever a revision."""
    ruled = by_rule(old, new, cos)
    if ruled is not None:
        return ruled
    f = pair_features(old, new, cos, rank, df, n_docs, cover)
    p = probability(f)
    idf = _idf(df, n_docs)
    shared = sorted(set(words(old.text)) & set(words(new.text)), key=lambda t: (-idf(t), t))[:3]
    why = [f"same subject ({', '.join(shared)})" if shared else f"similar (cosine {cos:.2f})"]
    if f[FEATURES.index("change_words")]:
        why.append("announces a change")
    if f[FEATURES.index("value_changed")]:
        why.append("a value changed")
    if f[FEATURES.index("names_date")]:
        why.append(f"names the older memory's date ({old.at:%Y-%m-%d})")
    return Verdict(p >= LINK_AT, round(p, 4), ", ".join(why))


#: a restatement: at least this cosine, and at most this many words swapped each way
RESTATED_COS = 0.85
RESTATED_WORDS = 4


def _restated(old_text: str, new_text: str, cos: float) -> str:
    """"x -> y" when the newer text says the older one again with some words swapped
    ("listens on port 5433" / "port 5434"; "uses requests" / "uses httpx"; "is" / "is
    not"), else "". The model cannot see this case (its training pairs are paraphrased),
    and it is the plainest revision there is."""
    if cos < RESTATED_COS:
        return ""
    a, b = words(old_text), words(new_text)
    sa, sb = set(a), set(b)
    gone, came = sa - sb, sb - sa
    if not (gone or came) or len(gone) > RESTATED_WORDS or len(came) > RESTATED_WORDS:
        return ""
    if len(sa & sb) < max(2, 0.6 * min(len(sa), len(sb))):
        return ""
    if not gone and not (came & _NEGATIONS):
        return ""  # only words added: an elaboration, not a change (unless it negates)
    if not came and not (gone & _NEGATIONS):
        return ""  # only words dropped
    return f"{', '.join(sorted(gone)) or '-'} -> {', '.join(sorted(came)) or '-'}"


_SPEAKER = re.compile(r"([A-Z][\w'.-]{0,30}(?: [A-Z][\w'.-]{0,30}){0,2}):\s")
#: words that open a note as its label, not as a speaker's name ("Update: the retry policy
#: is now 5 attempts", "Decision: ...", "Note: ..."): a note labelled "Update:" revises one
#: labelled "Decision:", where two speakers' turns would not (``speaker``)
_LABELS = frozenset({
    "update", "updated", "updates", "note", "notes", "nb", "ps", "fyi", "decision", "decided", "fix", "fixed",
    "todo", "done", "correction", "corrected", "change", "changed", "changes", "changelog", "summary", "tldr",
    "context", "background", "status", "result", "results", "reason", "rationale", "why", "problem", "issue",
    "bug", "solution", "answer", "question", "q", "a", "warning", "important", "caveat", "gotcha", "edit",
    "edited", "revision", "revised", "followup", "follow-up", "reminder", "action", "outcome", "next", "plan",
    "idea", "tip", "lesson", "finding", "findings", "observation", "conclusion", "resolution", "workaround",
    "cause", "impact", "goal", "rule", "again", "also", "now", "today", "later", "previously", "originally",
    "before", "after", "new", "old", "current", "heads-up", "clarification", "confirmed", "verified", "known",
})


#: the roles a chat log's turns open with, in any case ("user: ...", "Assistant: ...")
_ROLES = frozenset({"user", "assistant", "system", "human", "ai"})
_ROLE = re.compile(r"(?i:(user|assistant|system|human|ai)):\s")
#: roles whose turns are generated answers, not facts of the user's
_ANSWERERS = frozenset({"assistant", "ai"})


def speaker(text: str) -> str:
    """The name a conversation turn opens with ("Caroline: ..."; a chat role in lower case:
    "user", "assistant"), else "". A turn is what its speaker says: another speaker's later
    turn answers it and does not revise it. A note's label ("Update: ...", ``_LABELS``) is
    no speaker."""
    m = _SPEAKER.match(text or "") or _ROLE.match(text or "")
    if not m or _label(m.group(1)):
        return ""
    name = m.group(1)
    return name.lower() if name.lower() in _ROLES else name


def _label(name: str) -> bool:
    """Whether a "Name:" opening is a note's label (its first word in ``_LABELS``)."""
    return name.split(" ", 1)[0].lower() in _LABELS


def one_speaker(a: str, b: str) -> bool:
    """Both texts are lines of one speaker ("Caroline: ...", ``speaker``)."""
    s = speaker(a)
    return bool(s) and s == speaker(b)


_TURN = re.compile(r"^([A-Za-z][\w'.-]{0,30}(?: [A-Z][\w'.-]{0,30}){0,2}):[ \t]", re.M)


def dialogue(text: str) -> bool:
    """Whether ``text`` records a conversation: lines opened by at least two speakers'
    names, one of them opening more than one line (a chat session indexed as one memory).
    A session holds many facts said by several people; a later session is not a new
    version of an earlier one. Notes with "Key: value" lines name each key once; a mined
    exchange opens its turns with ``**User:**`` and is not matched."""
    names = [m.group(1) for m in _TURN.finditer(text or "") if not _label(m.group(1))]
    return len(set(names)) >= 2 and len(names) > len(set(names))


def _refers_to_date(text: str, when: datetime) -> bool:
    for m in _DATE_REF.finditer(text):
        if m.group(1):
            if (int(m.group(1)), int(m.group(2)), int(m.group(3))) == (when.year, when.month, when.day):
                return True
        elif (int(m.group(4)), int(m.group(5))) == (when.month, when.day):
            return True
    return False


# -- the links in the store --------------------------------------------------------


def resolve(con, ref: str) -> list[str]:
    """Entry ids matching ``ref`` (an id, or a prefix of at least 4 hex digits)."""
    ref = (ref or "").strip().lower()
    if not _HEX.match(ref):
        return []
    rows = con.execute(
        "SELECT id FROM entries WHERE id = $1 OR starts_with(id, $1) ORDER BY id LIMIT 3", [ref]
    ).fetchall()
    exact = [r[0] for r in rows if r[0] == ref]
    return exact or [r[0] for r in rows]


def _keeper(con, ref: str) -> list[str]:
    """``resolve``, following a duplicate merged into another memory to that memory."""
    hit = resolve(con, ref)
    if hit:
        return hit
    ref = ref.strip().lower()
    if not _HEX.match(ref):
        return []
    rows = con.execute(
        "SELECT DISTINCT into_id FROM absorbed WHERE id = $1 OR starts_with(id, $1) LIMIT 3", [ref]
    ).fetchall()
    return [r[0] for r in rows]


class Graph:
    """Superseded-by edges, old -> {new}: cycle checks, and whether one version supersedes another."""

    def __init__(self, links: Iterable[tuple[str, str]] = ()) -> None:
        self.up: dict[str, set[str]] = {}
        for old, new in links:
            self.add(old, new)

    def add(self, old: str, new: str) -> None:
        self.up.setdefault(old, set()).add(new)

    def newer(self, a: str) -> set[str]:
        """Every version that supersedes ``a``, directly or through other versions."""
        seen, todo = {a}, [a]
        while todo:
            for n in self.up.get(todo.pop(), ()):
                if n not in seen:
                    seen.add(n)
                    todo.append(n)
        return seen - {a}

    def reaches(self, a: str, b: str) -> bool:
        """Whether ``b`` supersedes ``a``, directly or through other versions."""
        return b in self.newer(a)

    def would_cycle(self, old: str, new: str) -> bool:
        return old == new or self.reaches(new, old)


def would_cycle(con, old: str, new: str) -> bool:
    """Whether linking ``new`` supersedes ``old`` would close a cycle with the stored links."""
    return Graph(con.execute("SELECT old_id, new_id FROM revisions").fetchall()).would_cycle(old, new)


def replace_marks(con, sources: Sequence[str], chunks: Iterable[tuple[str, object]], forgotten: Iterable[tuple[str, str]]) -> None:
    """Store the markers of the sections of ``sources`` (``chunks``: (source, Chunk)) and
    their tombstones (``forgotten``: (source, id)), replacing what those sources held."""
    import pyarrow as pa

    src = list(sources)
    con.execute("DELETE FROM section_marks WHERE source IN (SELECT unnest(?::VARCHAR[]))", [src])
    con.execute("DELETE FROM forgotten WHERE source IN (SELECT unnest(?::VARCHAR[]))", [src])
    rows = [(s, c.position, c.id, kind, t) for s, c in chunks
            for kind, targets in (("supersedes", c.marks.supersedes), ("distinct", c.marks.distinct)) for t in targets]
    if rows:
        con.register("_lethe_marks", pa.table({
            "source": [r[0] for r in rows], "position": pa.array([r[1] for r in rows], pa.int32()),
            "id": [r[2] for r in rows], "kind": [r[3] for r in rows], "target": [r[4] for r in rows]}))
        con.execute("INSERT INTO section_marks SELECT source, position, id, kind, target FROM _lethe_marks")
        con.unregister("_lethe_marks")
    gone = sorted(set(forgotten))
    if gone:
        con.execute(
            "INSERT OR IGNORE INTO forgotten SELECT unnest(?::VARCHAR[]), unnest(?::VARCHAR[])",
            [[g[1] for g in gone], [g[0] for g in gone]],
        )


def _marker_links(con, kind: str, warn_sources: set[str], warnings: list[str]) -> list[tuple[str, str, str]]:
    """(section's entry id, resolved target, where) for every marker of ``kind``; a target
    that names no memory is warned about when its source was (re)read in this pass."""
    out = []
    rows = con.execute(
        """SELECT m.source, m.position, m.id, m.target, o.heading FROM section_marks AS m
           LEFT JOIN entry_sources AS o USING (source, position)
           WHERE m.kind = ? ORDER BY m.source, m.position, m.target""",
        [kind],
    ).fetchall()
    for source, position, sid, target, heading in rows:
        where = f"{source} › {heading}" if heading else source
        me = _keeper(con, sid)
        if len(me) != 1:
            continue  # the section itself is not indexed (an empty or forgotten one)
        eid = me[0]
        hit = _keeper(con, target)
        if len(hit) != 1:
            if source in warn_sources:
                why = "names no memory" if not hit else "matches more than one memory; give more of the id"
                warnings.append(f"{where}: marker {kind}={target} {why}; ignored")
            continue
        out.append((eid, hit[0], where))
    return out


def sync(con, *, sources: Sequence[str], new: Sequence[tuple[str, object]], vectors: np.ndarray | None,
         warnings: list[str], detect: bool = True) -> dict:
    """After a pass changed ``sources`` and inserted ``new`` ((source, Chunk), with their
    ``vectors``): drop links to memories that are gone, re-derive the declared links from
    the markers, detect links for the new memories, apply vetoes. Runs inside the
    caller's transaction. Returns counts."""
    for table in ("revisions", "revision_candidates"):
        con.execute(
            f"DELETE FROM {table} WHERE old_id NOT IN (SELECT id FROM entries) OR new_id NOT IN (SELECT id FROM entries)"
        )
    graph = Graph()
    con.execute("DELETE FROM revisions WHERE origin = 'declared'")
    declared = 0
    marked = _marker_links(con, "supersedes", set(sources), warnings)
    if marked:
        # links that agree with the memories' dates first: in a cycle of markers, those win
        when = dict(con.execute(
            "SELECT id, created_at FROM entries WHERE id IN (SELECT unnest(CAST(? AS VARCHAR[])))",
            ["[" + ",".join(sorted({x for m in marked for x in m[:2]})) + "]"],
        ).fetchall())
        marked.sort(key=lambda m: (not (when.get(m[1]) and when.get(m[0]) and when[m[1]] < when[m[0]]), m[2], m[0]))
    for new_id, old_id, where in marked:
        if graph.would_cycle(old_id, new_id):
            if any(where.startswith(s) for s in sources):
                warnings.append(f"{where}: supersedes={old_id} would make a revision cycle; ignored")
            continue
        graph.add(old_id, new_id)
        con.execute(
            "INSERT OR REPLACE INTO revisions (old_id, new_id, origin, reason, score) VALUES (?, ?, 'declared', ?, 1.0)",
            [old_id, new_id, f"marker in {where}"],
        )
        declared += 1
    vetoes = {frozenset((a, b)) for a, b, _ in _marker_links(con, "distinct", set(sources), warnings)}
    detected = 0
    if detect and new and vectors is not None and len(new):
        if len(new) > MAX_DETECT_BATCH:
            warnings.append(
                f"revision detection skipped: {len(new)} new memories is more than {MAX_DETECT_BATCH} in one pass; "
                "run `lethe index --rebuild` to detect revisions over the whole store"
            )
        else:
            detected = _detect(con, [c.id for _, c in new], np.asarray(vectors, dtype=np.float32), graph, vetoes)
    if vetoes:
        for pair in vetoes:
            a, b = sorted(pair)
            con.execute(
                "DELETE FROM revisions WHERE origin = 'detected' AND ((old_id = ? AND new_id = ?) OR (old_id = ? AND new_id = ?))",
                [a, b, b, a],
            )
    return {"declared": declared, "detected": detected}


#: how far ahead of the clock a memory's date may be (time zones) before it counts as the future
FUTURE_SLACK = timedelta(days=1)


# "older than the memory written at $at" (Memory.before), and its mirror
_OLDER = "(created_at < $at)"
_NEWER = "(created_at > $at)"


def _older_neighbours(con, ids: list[str], vecs: np.ndarray, at: dict) -> list[tuple[str, str, float, int]]:
    """(old id, new id, cosine, rank) for each new memory's ``NEIGHBOURS`` nearest older
    memories, and for each existing newer memory that a new one joins among its nearest
    older memories (a memory indexed after newer ones)."""
    from .dedup import fetch_vectors

    out: list[tuple[str, str, float, int]] = []
    batch = set(ids)
    if len(ids) <= 16:
        from .vectors import vec_literal

        for i, v in zip(ids, vecs):
            when, src, pos = at.get(i, (None, None, None))
            if when is None:
                continue
            lit = vec_literal(v)
            rows = con.execute(
                f"""SELECT id, array_inner_product(embedding, CAST($v AS FLOAT[384])) AS c FROM entries
                    WHERE embedding IS NOT NULL AND {_OLDER} ORDER BY c DESC, id LIMIT $k""",
                {"v": lit, "at": when, "k": NEIGHBOURS},
            ).fetchall()
            out += [(o, i, float(c), r) for r, (o, c) in enumerate(rows) if c >= COS_FLOOR]
            newer = con.execute(
                f"""SELECT id, created_at, source, position, embedding::VARCHAR,
                           array_inner_product(embedding, CAST($v AS FLOAT[384])) AS c FROM entries
                    WHERE embedding IS NOT NULL AND {_NEWER} AND c >= $floor ORDER BY c DESC, id LIMIT $k""",
                {"v": lit, "at": when, "floor": COS_FLOOR, "k": NEIGHBOURS},
            ).fetchall()
            for y, y_at, y_src, y_pos, y_vec, c in newer:
                if y in batch:
                    continue  # its own older neighbours are computed above
                rank = con.execute(
                    f"""SELECT count(*) FROM entries WHERE embedding IS NOT NULL AND {_OLDER} AND id <> $me
                        AND array_inner_product(embedding, CAST($v AS FLOAT[384])) > $c""",
                    {"at": y_at, "me": i, "v": y_vec, "c": c},
                ).fetchone()[0]
                if rank < NEIGHBOURS:
                    out.append((i, y, float(c), int(rank)))
        return out
    all_ids, _, mat = fetch_vectors(con)
    if not all_ids:
        return out
    facts = {r[0]: r[1:] for r in con.execute("SELECT id, created_at, source, position FROM entries").fetchall()}
    big = np.datetime64("9999-12-31")
    when = np.array([np.datetime64(facts[x][0]) if facts[x][0] else big for x in all_ids], dtype="datetime64[us]")
    known = np.array([facts[x][0] is not None for x in all_ids])
    pos = {x: k for k, x in enumerate(all_ids)}
    rows = [pos[i] for i in ids if i in pos and facts[i][0] is not None]
    outside = np.array([x not in batch for x in all_ids])
    return [(all_ids[a], all_ids[b], c, r) for a, b, c, r in neighbour_pairs(mat, when, known, rows, outside)]


#: new memories compared with the whole store at once (rows of one matrix product)
NEIGHBOUR_BLOCK = 256


def _top(x: np.ndarray, k: int, cand: np.ndarray | None) -> np.ndarray:
    """The positions of the ``k`` largest values of ``x``, largest first, ties by position
    (what a stable sort of ``-x`` puts first), in time linear in ``len(x)``. ``cand``: the
    positions of some ``k`` largest values (``np.argpartition``); None when ``x`` has at
    most ``k`` values."""
    if cand is None:
        return np.argsort(-x, kind="stable")
    t = x[cand].min()  # the k-th largest value
    n_above = int(np.count_nonzero(x[cand] > t))
    if np.count_nonzero(x == t) > k - n_above:
        # ties at the k-th value reach outside the chosen few: take them by position
        above = np.flatnonzero(x > t)
        cand = np.concatenate([above, np.flatnonzero(x == t)[: k - len(above)]])
    cand = np.sort(cand)
    return cand[np.argsort(-x[cand], kind="stable")]


def neighbour_pairs(mat: np.ndarray, when: np.ndarray, known: np.ndarray, rows: Sequence[int],
                    outside: np.ndarray) -> list[tuple[int, int, float, int]]:
    """The candidate pairs of ``_older_neighbours`` by row number: (old, new, cosine, rank).
    ``mat`` holds every memory's vector, ``when`` its date (``known`` where it has one),
    ``rows`` the new memories, ``outside`` the memories not new in this pass. For each new
    memory: its ``NEIGHBOURS`` nearest older memories at ``COS_FLOOR`` or more; and each
    older-than-it memory outside the pass that is newer than it, near it, and would now
    count it among its own nearest older memories. Linear in the store per new memory (no
    sort of the whole store), one matrix product per ``NEIGHBOUR_BLOCK`` new memories."""
    out: list[tuple[int, int, float, int]] = []
    for s0 in range(0, len(rows), NEIGHBOUR_BLOCK):
        block = np.asarray(rows[s0:s0 + NEIGHBOUR_BLOCK], dtype=np.int64)
        sims = mat[block] @ mat.T
        older = known[None, :] & (when[None, :] < when[block][:, None])
        masked = np.where(older, sims, -np.inf)
        kk = min(NEIGHBOURS, masked.shape[1])
        chosen = np.argpartition(-masked, kk - 1, axis=1)[:, :kk] if kk < masked.shape[1] else None
        later = None
        if outside.any():
            later = outside[None, :] & known[None, :] & ~older & (when[None, :] >= when[block][:, None]) & (sims >= COS_FLOOR)
        for r, k in enumerate(block):
            sim = masked[r]
            top = _top(sim, NEIGHBOURS, None if chosen is None else chosen[r])
            out += [(int(j), int(k), float(sim[j]), rank) for rank, j in enumerate(top) if sim[j] >= COS_FLOOR]
            if later is None:
                continue
            # existing (not new) newer memories this one may have joined
            newer = np.flatnonzero(later[r])
            newer = [j for j in newer[np.argsort(-sims[r][newer], kind="stable")]
                     if j != k and known[k] and when[k] < when[j]]
            for j in newer[:NEIGHBOURS]:
                ysim = mat @ mat[j]
                rank = int(np.sum(known & (when < when[j]) & (ysim > ysim[k])))
                if rank < NEIGHBOURS:
                    out.append((int(k), int(j), float(sims[r][j]), rank))
    return out


#: a memory that restates this many of its nearest older memories, each with other words
#: swapped, all written within ``LIST_SPAN`` of it, is an item of a list, not a revision
LIST_MIN = 3
LIST_SPAN_DAYS = 1.0


def enumerations(pairs, meta: dict) -> set[str]:
    """The new memories of ``pairs`` that are items of a list: "fact number 57 about s6"
    restates "fact number 56 about s5", "... 55 about s4" and more, written minutes
    apart. A revision chain changes one subject over days; a list of facts written at
    once looks like a chain to the pairwise rules, and would make every item supersede
    the ones above it. Such a memory gets no link."""
    restates: dict[str, list] = {}
    for old, new, cos, _ in pairs:
        if old in meta and new in meta and meta[old].before(meta[new]) and _restated(meta[old].text, meta[new].text, cos):
            restates.setdefault(new, []).append(meta[old].at)
    out = set()
    for new, times in restates.items():
        if len(times) >= LIST_MIN and (meta[new].at - min(times)).total_seconds() < LIST_SPAN_DAYS * 86400:
            out.add(new)
    return out


def _detect(con, ids: list[str], vecs: np.ndarray, graph: Graph, vetoes: set) -> int:
    """Score the pairs ``_older_neighbours`` finds (``revision_candidates``) and link those
    at ``LINK_AT`` that no veto forbids and no cycle stops; returns the links made. Its
    lists of ids can be a whole batch: they filter by ``IN (SELECT unnest(...))``, a hash
    semi-join (``list_contains`` tests every row against every id: 3.5 s for 20,000 ids
    over 200,000 entries, against 0.02 s)."""
    from .judges import ids_literal

    at = {r[0]: r[1:] for r in con.execute(
        "SELECT id, created_at, source, position FROM entries WHERE id IN (SELECT unnest(CAST(? AS VARCHAR[])))",
        [ids_literal(ids)],
    ).fetchall()} if ids else {}
    pairs = _older_neighbours(con, ids, vecs, at)
    if not pairs:
        return 0
    involved = sorted({p[0] for p in pairs} | {p[1] for p in pairs})
    meta = {
        r[0]: Memory(*r)
        for r in con.execute(
            "SELECT id, text, heading, created_at, source, position FROM entries "
            "WHERE id IN (SELECT unnest(CAST(? AS VARCHAR[])))",
            [ids_literal(involved)],
        ).fetchall()
    }
    terms = sorted({t for m in meta.values() for t in (*words(m.text), *title_words(m.heading))})
    df = dict(con.execute(
        "SELECT term, df FROM fts_main_entries.dict WHERE term IN (SELECT unnest(CAST(? AS VARCHAR[])))", [terms]
    ).fetchall()) if terms else {}
    n_docs = con.execute("SELECT count(*) FROM entries").fetchone()[0]
    existing = con.execute("SELECT old_id, new_id FROM revisions").fetchall()
    for o, n in existing:
        graph.add(o, n)
    have = {(o, n) for o, n in existing}
    # a memory dated in the future (a typo in a heading or a file name: `lethe index` says so)
    # is ordered by no one: no link is detected to or from it; a declared one still holds
    horizon = datetime.now() + FUTURE_SLACK
    pairs = [p for p in pairs if all(m in meta and (meta[m].at is None or meta[m].at <= horizon) for m in p[:2])]
    listed = enumerations(pairs, meta)
    pairs = [p for p in pairs if p[0] in meta and p[1] in meta and p[1] not in listed]
    # token vectors are read only for the pairs the model scores (not those a rule decides)
    covers = pair_covers(con, [p[:2] for p in pairs if by_rule(meta[p[0]], meta[p[1]], p[2]) is None], n_docs)
    scored: dict[tuple[str, str], tuple[float, str, bool]] = {}
    for old, new, cos, rank in pairs:
        if (old, new) in scored:
            continue
        v = classify(meta[old], meta[new], cos, rank, df, n_docs, covers.get((old, new)))
        if v.score > 0:
            scored[(old, new)] = (v.score, v.reason, v.revision)
    if scored:
        import pyarrow as pa

        keys = sorted(scored)
        con.register("_lethe_cand", pa.table({
            "old_id": [k[0] for k in keys], "new_id": [k[1] for k in keys],
            "score": pa.array([scored[k][0] for k in keys], pa.float64())}))
        con.execute("INSERT OR REPLACE INTO revision_candidates SELECT old_id, new_id, score FROM _lethe_cand")
        con.unregister("_lethe_cand")
    made = 0
    for (old, new), (score, reason, link) in sorted(scored.items(), key=lambda kv: (-kv[1][0], kv[0])):
        if not link or (old, new) in have or frozenset((old, new)) in vetoes or graph.would_cycle(old, new):
            continue
        graph.add(old, new)
        con.execute(
            "INSERT OR IGNORE INTO revisions (old_id, new_id, origin, reason, score) VALUES (?, ?, 'detected', ?, ?)",
            [old, new, reason, score],
        )
        made += 1
    return made


#: bump when a detection rule changes (``classify``'s vetoes, the restatement rule, the
#: features' definitions); the model's constants enter the fingerprint by themselves
RULES = 5


def fingerprint() -> str:
    """What detected links depend on: a store whose links were detected under another
    fingerprint has them detected again on its next ``lethe index`` (``meta.revision_model``)."""
    import hashlib

    what = (RULES, FEATURES, _MEAN, _SD, _WEIGHTS, _BIAS, _NO_COVER, LINK_AT, NEIGHBOURS, COS_FLOOR, CLIP_Z)
    return hashlib.sha256(repr(what).encode()).hexdigest()[:16]


def model_changed(con) -> bool:
    """True when the store holds memories whose links were detected under another
    ``fingerprint`` (an index built by an older version): the caller detects them again and
    then ``record_model``s, in one transaction, so that a pass that fails is retried. An
    empty store has nothing to detect again: its fingerprint is recorded here."""
    row = con.execute("SELECT value FROM meta WHERE key = 'revision_model'").fetchone()
    if row is not None and row[0] == fingerprint():
        return False
    if con.execute("SELECT count(*) FROM entries").fetchone()[0] > 0:
        return True
    record_model(con)
    return False


def record_model(con) -> None:
    """Record that the store's detected links are this version's (``meta.revision_model``)."""
    con.execute("INSERT OR REPLACE INTO meta VALUES ('revision_model', ?)", [fingerprint()])


def redetect(con, warnings: list[str]) -> int:
    """Detect links over the whole store again (``lethe index --rebuild``): detected links
    and scored pairs are dropped and every memory is scored against its neighbours."""
    from .dedup import fetch_vectors

    con.execute("DELETE FROM revisions WHERE origin = 'detected'")
    con.execute("DELETE FROM revision_candidates")
    ids, _, mat = fetch_vectors(con)
    if len(ids) > MAX_DETECT_BATCH:
        warnings.append(f"revision detection skipped: {len(ids)} memories is more than {MAX_DETECT_BATCH}")
        return 0
    graph = Graph(con.execute("SELECT old_id, new_id FROM revisions").fetchall())
    vetoes = {frozenset((a, b)) for a, b, _ in _marker_links(con, "distinct", set(), warnings)}
    return _detect(con, ids, mat, graph, vetoes) if ids else 0


def scored_pairs(con, ids: Sequence[str]) -> dict[tuple[str, str], float]:
    """Scored pairs among ``ids`` at ``PAIR_FLOOR`` or more: (old, new) -> score."""
    ids = [i for i in ids if i]
    if len(ids) < 2:
        return {}
    from .judges import ids_literal

    lit = ids_literal(sorted(set(ids)))
    return {(o, n): float(s) for o, n, s in con.execute(
        """SELECT old_id, new_id, score FROM revision_candidates
           WHERE list_contains(CAST($1 AS VARCHAR[]), old_id) AND list_contains(CAST($1 AS VARCHAR[]), new_id)
             AND score >= $2""",
        [lit, PAIR_FLOOR],
    ).fetchall()}


SIDECAR = "superseded.txt"


def write_sidecar(con, index_dir) -> None:
    """The ids of every superseded memory, one a line, in ``index_dir/superseded.txt``
    (written atomically after each index pass): what the session-start hook must not
    inject, readable without opening the database."""
    from pathlib import Path

    from .store import _atomic_write

    ids = [r[0] for r in con.execute("SELECT DISTINCT old_id FROM revisions ORDER BY old_id").fetchall()]
    path = Path(index_dir) / SIDECAR
    data = ("".join(f"{i}\n" for i in ids)).encode()
    try:
        if not path.exists() or path.read_bytes() != data:
            _atomic_write(path, data)
    except OSError:
        pass  # an unwritable index folder: the hook then reads the markers only


def read_sidecar(index_dir) -> set[str]:
    from pathlib import Path

    try:
        return set((Path(index_dir) / SIDECAR).read_text().split())
    except OSError:
        return set()


# -- reading -----------------------------------------------------------------------


@dataclass(frozen=True)
class Link:
    old_id: str
    new_id: str
    origin: str
    reason: str | None
    valid_from: datetime | None     # the old version's date
    valid_to: datetime | None       # the new version's date


@dataclass(frozen=True)
class Superseded:
    """What supersedes one memory: ``by`` every superseding memory (directly or through
    later versions) as (id, date), oldest first; ``heads`` those nothing supersedes."""

    by: tuple[tuple[str, datetime | None], ...]
    heads: tuple[str, ...]

    @property
    def ids(self) -> set[str]:
        return {i for i, _ in self.by}

    @property
    def since(self) -> datetime | None:
        """valid_to: the date of the earliest superseding memory."""
        return self.by[0][1] if self.by else None


def superseders(con, ids: Sequence[str]) -> dict[str, Superseded]:
    """For each of ``ids`` that is superseded: what supersedes it (``Superseded``)."""
    ids = [i for i in ids if i]
    if not ids or not con.execute("SELECT count(*) > 0 FROM revisions").fetchone()[0]:
        return {}
    from .judges import ids_literal

    rows = con.execute(
        """WITH RECURSIVE up(start, parent, id) AS (
               SELECT old_id, old_id, new_id FROM revisions WHERE list_contains(CAST(? AS VARCHAR[]), old_id)
               UNION
               SELECT up.start, up.id, r.new_id FROM up JOIN revisions AS r ON r.old_id = up.id)
           SELECT up.start, up.parent, up.id, e.created_at FROM up JOIN entries AS e USING (id)
           ORDER BY up.start, e.created_at NULLS FIRST, up.id""",
        [ids_literal(sorted(set(ids)))],
    ).fetchall()
    by: dict[str, dict[str, datetime | None]] = {}
    parents: dict[str, set[str]] = {}
    for start, parent, new, at in rows:
        by.setdefault(start, {})[new] = at
        parents.setdefault(start, set()).add(parent)
    out = {}
    for start, members in by.items():
        heads = tuple(m for m in members if m not in parents[start])
        out[start] = Superseded(tuple(members.items()), heads or (next(reversed(members)),))
    return out


def links(con, ids: Sequence[str] | None = None) -> list[Link]:
    """Links touching ``ids`` (every link when None), oldest first."""
    where, params = "", []
    if ids is not None:
        from .judges import ids_literal

        where = "WHERE list_contains(CAST($1 AS VARCHAR[]), r.old_id) OR list_contains(CAST($1 AS VARCHAR[]), r.new_id)"
        params = [ids_literal(sorted(set(ids)))]
    rows = con.execute(
        f"""SELECT r.old_id, r.new_id, r.origin, r.reason, o.created_at, n.created_at
            FROM revisions AS r JOIN entries AS o ON o.id = r.old_id JOIN entries AS n ON n.id = r.new_id
            {where} ORDER BY n.created_at NULLS FIRST, r.new_id, r.old_id""",
        params,
    ).fetchall()
    return [Link(*r) for r in rows]


def chain(con, eid: str) -> list[str]:
    """Every version connected to ``eid`` by links (either direction), oldest first."""
    seen, todo = {eid}, [eid]
    while todo:
        batch, todo = todo, []
        for link in links(con, batch):
            for x in (link.old_id, link.new_id):
                if x not in seen:
                    seen.add(x)
                    todo.append(x)
    rows = con.execute(
        "SELECT id FROM entries WHERE list_contains(CAST(? AS VARCHAR[]), id) ORDER BY created_at NULLS FIRST, id",
        ["[" + ",".join(sorted(seen)) + "]"],
    ).fetchall()
    return [r[0] for r in rows]
