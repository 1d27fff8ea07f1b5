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
# question, a checklist, a status report, a check that something works ("Checked the new
# printer", "Confirmed the override works", "Looked at 60 passes since the change").
# Later notes on a subject are often such notes, and they are rarely its new version
# (``note_kind``; of the 38 notes of p01-p85 that open with such a check, 4 are one).
_NOTE_KIND = re.compile(
    r"^\W*(?:incident|outage|post-?mortem|reminder|how-?to|question|q|faq|checklist|status|progress|"
    r"readout|todo|fyi|note to self|heads up|checked|confirmed|verified|re-?checked|double-checked|"
    r"looked at|follow-?up)\b",
    re.I,
)
# A note that opens by saying how long something has run, then reports on it ("A week on
# External ID: 418 members signed in, ...", "Three nights since the commit-interval change:
# ...", "FYI: three weeks of mail through Brevo: ..."), or whose title ends so ("MySQL 8.4 a
# month on", "Waiver PDFs, one week in", "85% first week"): an account of how the current
# setting went, not a new version of it (``reports_elapsed``). The span is spelt in words:
# "30 days of retention: ..." states a setting
_SPAN = r"(?:days?|nights?|weeks?|fortnight|months?)"
_ELAPSED = re.compile(
    r"^\W*(?:(?:update|fyi|note)\s*:\s*)?(?:the\s+)?(?:first|a|an|one|two|three|four|five|six|seven|eight|nine|ten)"
    rf"\s+(?:full\s+|whole\s+)?{_SPAN}\s+(?:of|on|in|with|at|since|after|into|running)\b[^.:\n]{{0,80}}:",
    re.I,
)
_ELAPSED_TITLE = re.compile(
    rf"\b(?:(?:a|one|two|three|four|five|six)\s+{_SPAN}\s+(?:in|on|later)|first\s+(?:full\s+)?"
    r"(?:day|night|week|fortnight|month))\W*$",
    re.I,
)
# A note that opens as an instruction ("To roll back: in Argo CD open ...", "To add a page:
# create ..."): a how-to that uses the current setting, not a new version of it (``instructs``;
# all 23 such notes of p01-p101)
_INSTRUCTION = re.compile(r"^\W*to\s+[a-z][\w-]*\b[^.:\n]{0,80}:", re.I)
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
            "note_kind", "scope_apart", "new_length", "length_ratio", "token_cover")
# A logistic model over the standardised inputs (``model_inputs``: the features and their
# pairwise products), fitted on the development update sets' projects p01-p93
# (bench/data/updates, dev-a to dev-x; dev-y is held out) with LoCoMo conversation pairs as
# negatives (bench/lever_study/revision_fit.py --projects p01,...,p93 prints these). Until
# the seventeenth session the fit was p01-p49 (14,319 candidate pairs, 1,267 true); that
# session added ``new_length`` (log words of the newer note) and ``length_ratio`` (log of
# its length over the older one's): a note that reports how a setting went ("a week in: 14
# messages retried, none parked") is shorter than the note it follows, a restatement is
# not. Fitted on p01-p77 and scored on the later sets, average precision of the candidate
# pairs: p78-p85 0.859 -> 0.875, p86-p89 0.641 -> 0.683, p90-p93 0.780 -> 0.807 (the p01-p49
# fit without them: 0.845, 0.623, 0.765); through the product on p78-p93 (n = 256 current /
# 192 past / 336 static) cur@1 0.793 -> 0.805, cur_first 0.938 -> 0.945, stale@1 0.047 ->
# 0.035, past@5 0.948 -> 0.953, static@5 0.970 -> 0.976 (the shipped p01-p49 model against
# the p01-p77 fit with them). ``note_kind`` and
# ``scope_apart`` joined on 2026-11-25 (twelfth session): seven folds over p01-p49, pairs
# of a fold scored by a model fitted on the others, precision at ``LINK_AT`` 0.820 -> 0.836,
# recall 0.798 -> 0.803, average precision 0.881 -> 0.892 (false links 222 -> 199); fitted
# on p01-p49 and scored on p50-p57, recall 0.677 -> 0.714, precision 0.907 -> 0.906.
# ``note_kind`` also reads the title's last word (``note_head``) since the thirteenth
# session (refitted on p01-p49): seven folds, average precision 0.892 -> 0.895, recall
# 0.803 -> 0.809 at precision 0.838; fitted on p01-p49 and scored on p50-p61, average
# precision 0.854 -> 0.855; on dev-q (p62-p65, whose misses suggested it) 0.869 -> 0.914.
# Since the fifteenth session the fit also sees a quarter of the true pairs that announce
# their change in words once more without them (``revision_fit.unannounced``): 93% of the
# true pairs of p01-p49 hold such a word, so the model had learned that a revision says
# "now" or "instead", and on a blind set whose writer was asked to vary that (dev-t, 49%)
# it linked 0.51 of the true pairs. Seven folds over p01-p49, average precision as written
# 0.897 -> 0.889, with the change words taken away 0.791 -> 0.834; fitted on p01-p49,
# p50-p65 0.864 -> 0.855, p70-p73 0.870 -> 0.866, dev-t (p74-p77, read) 0.815 -> 0.858.
# Since the sixteenth session ``note_kind`` also reads a note that opens with a check
# ("Checked ...", "Confirmed ...", "Looked at ...": ``_NOTE_KIND``; refitted on p01-p49):
# seven folds, average precision 0.889 -> 0.888; fitted on p01-p49, p50-p65 + p70-p81
# 0.849 -> 0.849 (such notes are rare there), dev-v (p82-p85, whose misses suggested it)
# 0.775 -> 0.824, precision at ``LINK_AT`` 0.719 -> 0.810 at recall 0.667.
_MEAN = (0.49608, 0.36268, 0.10883, 0.10051, 0.23955, 0.37027, 0.00018218, 0.61271, 0.081024,
    0.23926, 0.025782, 0.012914, 0.2239, 0.097284, 0.048925, 0.020283, 0.66943, 0.017757, 0.37289,
    0.18879, 0.062176, 0.057314, 0.12632, 0.16715, 0.00010204, 0.31957, 0.046417, 0.1439, 0.012955,
    0.0083117, 0.094512, 0.041237, 0.019822, 0.0083671, 0.32995, 0.010762, 0.19359, 0.047745,
    0.043887, 0.093682, 0.13675, 0.00014169, 0.20822, 0.034111, 0.085041, 0.016109, 0.0037651,
    0.095188, 0.03635, 0.018723, 0.0081099, 0.24319, 0.0056701, 0.14403, 0.018357, 0.033879,
    0.036675, 4.6057e-05, 0.072161, 0.015238, 0.037098, 0.0049393, 0.0030061, 0.019365, 0.0091186,
    0.003595, 0.0016288, 0.072547, 0.0092463, 0.045889, 0.0314, 0.030913, 3.2045e-05, 0.066283,
    0.014058, 0.033079, 0.0043858, 0.0033216, 0.018333, 0.0079805, 0.0034508, 0.0016288, 0.06463,
    -0.0034099, 0.042591, 0.084608, 5.738e-05, 0.15357, 0.024009, 0.069145, 0.0074406, 0.0024605,
    0.04686, 0.020271, 0.010011, 0.004208, 0.16221, 0.0049831, 0.094704, 0.00016194, 0.21308,
    0.024886, 0.054318, 0.015411, 0.00052629, 0.11902, 0.097284, 0.022631, 0.0084207, 0.25813,
    0.019685, 0.13484, 0.00011844, 2.4711e-05, 2.3472e-05, 4.0484e-05, 0, 4.0484e-05, 4.0484e-05,
    0, 0, 0.00013217, 3.5471e-05, 8.8438e-05, 0.054053, 0.1761, 0.013365, 0.0099804, 0.11124,
    0.052515, 0.027526, 0.0097238, 0.40806, 0.014089, 0.23399, 0.027716, 0.0032033, 0.0021548,
    0.013516, 0.0061662, 0.0024579, 0.0012259, 0.052935, 0.0021489, 0.033999, 0.0043974, 0.0061696,
    0.016522, 0.0075268, 0.0024766, 0.00095511, 0.15712, 0.010292, 0.098694, 1.3495e-05, 0.013029,
    0.0055126, 0.0022604, 0.00053979, 0.017976, 0.00095519, 0.011305, 4.0484e-05, 0, 0, 0,
    0.0057567, -0.0008236, 0.0045979, 0.03678, 0.02178, 0.0057285, 0.15416, 0.00095212, 0.082147,
    0.0017003, 0.0029149, 0.067899, 0.0047623, 0.035, 0.0017003, 0.033406, 0.00015253, 0.016836,
    0.013967, -0.00030965, 0.0070103, 0.021697, 0.24953, 0.006828)
_SD = (0.14035, 0.30134, 0.10819, 0.10066, 0.12945, 0.48288, 0.013496, 0.25554, 0.068935, 0.25555,
    0.10388, 0.11291, 0.41685, 0.29634, 0.21571, 0.14097, 0.083336, 0.22614, 0.079728, 0.18532,
    0.074971, 0.071142, 0.087143, 0.23078, 0.0078563, 0.18632, 0.050366, 0.16042, 0.056231,
    0.073659, 0.18297, 0.13025, 0.089674, 0.059756, 0.096632, 0.12509, 0.092038, 0.080279,
    0.072353, 0.10435, 0.2547, 0.011322, 0.20013, 0.052667, 0.14762, 0.077943, 0.044176, 0.23352,
    0.1447, 0.10608, 0.071305, 0.20558, 0.096003, 0.14148, 0.035942, 0.041645, 0.077486, 0.0038823,
    0.08588, 0.030272, 0.06137, 0.026825, 0.038255, 0.056623, 0.041913, 0.022513, 0.016042,
    0.071758, 0.0446, 0.054708, 0.039552, 0.062847, 0.0025944, 0.081842, 0.02922, 0.055513,
    0.022799, 0.04281, 0.051447, 0.03561, 0.021642, 0.015676, 0.058254, 0.040716, 0.05173, 0.13363,
    0.0042562, 0.11905, 0.026397, 0.087553, 0.030831, 0.024301, 0.10087, 0.069935, 0.050372,
    0.0326, 0.094297, 0.065499, 0.0626, 0.012724, 0.30855, 0.048417, 0.16092, 0.082312, 0.022935,
    0.32382, 0.29634, 0.14872, 0.091377, 0.33893, 0.12278, 0.18259, 0.0088452, 0.0021036,
    0.0031196, 0.0036733, 1e-09, 0.0063626, 0.0063626, 1e-09, 1e-09, 0.0098029, 0.0032439,
    0.0067289, 0.057532, 0.20098, 0.058936, 0.09045, 0.23035, 0.16948, 0.1292, 0.075571, 0.17614,
    0.16358, 0.11976, 0.040763, 0.017032, 0.022372, 0.037258, 0.026761, 0.015065, 0.011381,
    0.042734, 0.023884, 0.036871, 0.035756, 0.055244, 0.093745, 0.065695, 0.034055, 0.021971,
    0.17202, 0.095036, 0.11061, 0.0021209, 0.07611, 0.050536, 0.030096, 0.014684, 0.073086,
    0.017904, 0.048807, 0.0063626, 1e-09, 1e-09, 1e-09, 0.052057, 0.052303, 0.041424, 0.18822,
    0.14597, 0.07547, 0.28819, 0.077912, 0.15775, 0.0412, 0.053911, 0.20766, 0.056027, 0.1099,
    0.0412, 0.1477, 0.035088, 0.075797, 0.097386, 0.023769, 0.049681, 0.15131, 0.061617, 0.083461)
_WEIGHTS = (-0.33724, -0.16602, 0.66426, 0.45099, 0.16493, 0.066327, 0.029413, 0.26248, -0.021209,
    1.2505, -0.19531, 0.027227, -0.35672, -0.08708, -0.10664, -0.014222, -0.15657, 0.12679,
    0.79917, 0.22471, -0.017563, -0.051947, -0.67726, 0.096194, 0.02665, -0.9493, -0.48275,
    -0.72856, 0.18009, 0.019144, 0.55175, -0.01116, -0.13551, -0.034205, -0.086857, -0.2024,
    0.12466, 0.2094, 0.36603, 0.30455, 0.18023, 0.02409, 0.71617, -0.29819, -0.20555, -0.20148,
    -0.10393, -0.26142, 0.28263, -0.15883, -0.17739, -0.2705, 0.37899, 0.20167, -0.018993,
    -0.30437, 0.24068, 0.020561, 0.43626, -0.29887, -0.33106, -0.061037, -0.07154, -0.07293,
    0.036764, -0.14326, -0.15139, 0.80895, -0.25779, 0.26779, -0.60414, 0.19053, 0.023205, 0.34889,
    -0.32764, 0.41984, -0.069609, 0.0063016, -0.060833, 0.13946, -0.14435, -0.12764, 0.71992,
    0.52714, 0.091361, 0.074947, 0.02932, -0.32048, -0.6739, -0.29577, 0.26241, -0.027252, 0.47268,
    0.011924, -0.06396, -0.013172, -0.029508, -0.22077, -0.14051, 0.02318, 0.15765, -0.17921,
    -0.076526, -0.19629, 0.037595, -0.14964, -0.08708, 0.098991, 0.01679, -0.39608, -0.061944,
    0.11234, 0.028828, 0.01993, 0.04174, 0.041338, 0, 0.012641, 0.04604, 0, 0, 0.029326, 0.058558,
    0.027488, -0.25469, -0.4611, 0.49119, 0.009452, 0.6238, 0.24912, -0.21829, 0.16832, 0.18804,
    -0.22556, -0.12943, -0.4593, 0.065579, -0.038493, -0.11373, -0.16785, -0.13404, -0.12199,
    0.014478, -0.27221, -0.21428, 0.25755, 0.017514, 0.30322, 0.3014, -0.21384, -0.17311, 0.83967,
    -0.26511, 0.0047462, 0.10242, -0.19086, 0.023453, 0.12268, 0.069463, -0.2241, 0.11255,
    0.032872, 0.10242, 0, 0, 0, 0.0081731, -0.21889, 0.0094872, -0.21938, 0.093807, 0.13499,
    -0.60788, 0.07034, 0.088964, 0.028039, -0.23864, -0.10858, 0.099744, -0.08335, 0.13649,
    -0.10982, 0.25847, -0.12984, -0.016625, 0.09044, -0.028596, 0.21548, 0.66846, 0.35474)
_BIAS = -5.6306
# The same fit without ``token_cover``: for a pair whose memories have no token vectors (a
# store indexed with ``token_index=False``).
_NO_COVER = (
    (0.49608, 0.36268, 0.10883, 0.10051, 0.23955, 0.37027, 0.00018218, 0.61271, 0.081024, 0.23926,
        0.025782, 0.012914, 0.2239, 0.097284, 0.048925, 0.020283, 0.66943, 0.017757, 0.18879,
        0.062176, 0.057314, 0.12632, 0.16715, 0.00010204, 0.31957, 0.046417, 0.1439, 0.012955,
        0.0083117, 0.094512, 0.041237, 0.019822, 0.0083671, 0.32995, 0.010762, 0.047745, 0.043887,
        0.093682, 0.13675, 0.00014169, 0.20822, 0.034111, 0.085041, 0.016109, 0.0037651, 0.095188,
        0.03635, 0.018723, 0.0081099, 0.24319, 0.0056701, 0.018357, 0.033879, 0.036675, 4.6057e-05,
        0.072161, 0.015238, 0.037098, 0.0049393, 0.0030061, 0.019365, 0.0091186, 0.003595,
        0.0016288, 0.072547, 0.0092463, 0.0314, 0.030913, 3.2045e-05, 0.066283, 0.014058, 0.033079,
        0.0043858, 0.0033216, 0.018333, 0.0079805, 0.0034508, 0.0016288, 0.06463, -0.0034099,
        0.084608, 5.738e-05, 0.15357, 0.024009, 0.069145, 0.0074406, 0.0024605, 0.04686, 0.020271,
        0.010011, 0.004208, 0.16221, 0.0049831, 0.00016194, 0.21308, 0.024886, 0.054318, 0.015411,
        0.00052629, 0.11902, 0.097284, 0.022631, 0.0084207, 0.25813, 0.019685, 0.00011844,
        2.4711e-05, 2.3472e-05, 4.0484e-05, 0, 4.0484e-05, 4.0484e-05, 0, 0, 0.00013217,
        3.5471e-05, 0.054053, 0.1761, 0.013365, 0.0099804, 0.11124, 0.052515, 0.027526, 0.0097238,
        0.40806, 0.014089, 0.027716, 0.0032033, 0.0021548, 0.013516, 0.0061662, 0.0024579,
        0.0012259, 0.052935, 0.0021489, 0.0043974, 0.0061696, 0.016522, 0.0075268, 0.0024766,
        0.00095511, 0.15712, 0.010292, 1.3495e-05, 0.013029, 0.0055126, 0.0022604, 0.00053979,
        0.017976, 0.00095519, 4.0484e-05, 0, 0, 0, 0.0057567, -0.0008236, 0.03678, 0.02178,
        0.0057285, 0.15416, 0.00095212, 0.0017003, 0.0029149, 0.067899, 0.0047623, 0.0017003,
        0.033406, 0.00015253, 0.013967, -0.00030965, 0.021697),
    (0.14035, 0.30134, 0.10819, 0.10066, 0.12945, 0.48288, 0.013496, 0.25554, 0.068935, 0.25555,
        0.10388, 0.11291, 0.41685, 0.29634, 0.21571, 0.14097, 0.083336, 0.22614, 0.18532, 0.074971,
        0.071142, 0.087143, 0.23078, 0.0078563, 0.18632, 0.050366, 0.16042, 0.056231, 0.073659,
        0.18297, 0.13025, 0.089674, 0.059756, 0.096632, 0.12509, 0.080279, 0.072353, 0.10435,
        0.2547, 0.011322, 0.20013, 0.052667, 0.14762, 0.077943, 0.044176, 0.23352, 0.1447, 0.10608,
        0.071305, 0.20558, 0.096003, 0.035942, 0.041645, 0.077486, 0.0038823, 0.08588, 0.030272,
        0.06137, 0.026825, 0.038255, 0.056623, 0.041913, 0.022513, 0.016042, 0.071758, 0.0446,
        0.039552, 0.062847, 0.0025944, 0.081842, 0.02922, 0.055513, 0.022799, 0.04281, 0.051447,
        0.03561, 0.021642, 0.015676, 0.058254, 0.040716, 0.13363, 0.0042562, 0.11905, 0.026397,
        0.087553, 0.030831, 0.024301, 0.10087, 0.069935, 0.050372, 0.0326, 0.094297, 0.065499,
        0.012724, 0.30855, 0.048417, 0.16092, 0.082312, 0.022935, 0.32382, 0.29634, 0.14872,
        0.091377, 0.33893, 0.12278, 0.0088452, 0.0021036, 0.0031196, 0.0036733, 1e-09, 0.0063626,
        0.0063626, 1e-09, 1e-09, 0.0098029, 0.0032439, 0.057532, 0.20098, 0.058936, 0.09045,
        0.23035, 0.16948, 0.1292, 0.075571, 0.17614, 0.16358, 0.040763, 0.017032, 0.022372,
        0.037258, 0.026761, 0.015065, 0.011381, 0.042734, 0.023884, 0.035756, 0.055244, 0.093745,
        0.065695, 0.034055, 0.021971, 0.17202, 0.095036, 0.0021209, 0.07611, 0.050536, 0.030096,
        0.014684, 0.073086, 0.017904, 0.0063626, 1e-09, 1e-09, 1e-09, 0.052057, 0.052303, 0.18822,
        0.14597, 0.07547, 0.28819, 0.077912, 0.0412, 0.053911, 0.20766, 0.056027, 0.0412, 0.1477,
        0.035088, 0.097386, 0.023769, 0.15131),
    (0.074414, -0.10451, 0.80207, 0.56999, 0.15515, 0.1221, 0.032171, 0.20853, -0.090379, 1.3625,
        -0.18225, 0.01394, -0.3338, -0.092064, -0.12625, -0.010486, 0.072384, 0.19461, 0.5311,
        0.040914, 0.0003078, -0.62961, 0.28548, 0.029481, -0.93371, -0.55555, -0.74024, 0.28768,
        0.0060791, 0.75554, -3.7545e-05, -0.15431, -0.029939, 0.39651, -0.1151, 0.22561, 0.44934,
        0.28757, 0.1338, 0.026989, 0.67082, -0.4163, -0.20694, -0.23831, -0.10919, -0.2796,
        0.29114, -0.15202, -0.16617, -0.29431, 0.41195, 0.20908, -0.20931, 0.21189, 0.023554,
        0.47473, -0.32676, -0.39515, -0.019093, -0.061771, 0.033594, 0.03687, -0.1462, -0.13674,
        0.99198, -0.73172, -0.58827, 0.36867, 0.026128, 0.34102, -0.36316, 0.53797, -0.11006,
        -0.0054755, -0.037441, 0.15886, -0.1408, -0.10942, 0.96112, 1.144, 0.00098347, 0.03208,
        -0.42364, -0.73878, -0.41225, 0.32259, -0.039461, 0.49044, -0.047182, -0.07552, -0.010034,
        -0.0035162, -0.12497, 0.024347, 0.17126, -0.30142, -0.089275, -0.19971, 0.039348, -0.15803,
        -0.092064, 0.10719, -0.018061, -0.41583, -0.02556, 0.031601, 0.02294, 0.040836, 0.029992,
        0, -0.00024454, 0.044398, 0, 0, 0.032086, 0.047784, -0.36822, -0.44279, 0.48138,
        -0.0027088, 0.68123, 0.29213, -0.23331, 0.15317, 0.20031, -0.16947, -0.51858, 0.018524,
        -0.052259, -0.27201, -0.21804, -0.13726, -0.10358, 0.001817, -0.37497, 0.30602, 0.0012493,
        0.32289, 0.30283, -0.21789, -0.20939, 0.84941, -0.3033, 0.14106, -0.2395, 0.0086388,
        0.1425, 0.00326, -0.23567, 0.11691, 0.14106, 0, 0, 0, -0.0041977, -0.187, -0.26441, 0.0389,
        0.052236, -0.61762, 0.10028, 0.011212, -0.23203, -0.124, 0.098758, 0.12014, -0.12934,
        0.30491, -0.012825, 0.054762, 0.13679),
    -5.4794,
)


def _idf(df: dict[str, int], n_docs: int):
    def idf(t: str) -> float:
        d = df.get(t, 0)
        return math.log((n_docs - d + 0.5) / (d + 0.5) + 1.0)

    return idf


def title_of(m: Memory) -> str:
    """A memory's heading without its leading date and time ("" when it has none)."""
    return _TIMESTAMP.sub("", m.heading or "")


def pair_features(old: Memory, new: Memory, cos: float, rank: int, df: dict[str, int], n_docs: int,
                  cover: float | None = None) -> list[float]:
    """The features of the pair (``FEATURES``): ``cos`` the cosine of their embeddings,
    ``rank`` the place of ``old`` among ``new``'s nearest older memories (0: nearest),
    ``df``/``n_docs`` the BM25 document frequencies of the store (IDF weights), ``cover``
    their ``token_cover`` (None where a memory has no token vectors: NaN, and
    ``probability`` uses the model without it). ``new_length``: log(1 + words of the
    newer text) / 5; ``length_ratio``: log((words of the newer + 1) / (words of the older +
    1)) / 2."""
    idf = _idf(df, n_docs)
    a, b = set(words(old.text)), set(words(new.text))
    n_old, n_new = len(_WORD.findall(old.text or "")), len(_WORD.findall(new.text or ""))
    shared = a & b
    w_a = sum(idf(t) for t in a) or 1.0
    w_b = sum(idf(t) for t in b) or 1.0
    w_s = sum(idf(t) for t in shared)
    rarest = max((idf(t) for t in shared), default=0.0)
    gap_days = max((new.at - old.at).days, 0) if old.at and new.at else 0
    new_title = title_of(new)
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
        1.0 if announces_change(new) else 0.0,
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
        math.log1p(n_new) / 5.0,
        math.log((n_new + 1) / (n_old + 1)) / 2.0,
        math.nan if cover is None else float(cover),
    ]


#: a note that opens as a correction of an earlier one, in its title or its text
#: ("Correction: local API port", "Correction to this morning's note: ...", "Oops, the
#: topic names I wrote down ...", "Actually the backup runs at 03:30", "Scratch the earlier
#: figure", "Had that wrong at lunchtime")
_CORRECTS = re.compile(
    r"^\W*(?:correction|corrected|erratum|errata|oops|actually|scratch (?:that|the|my|this)|"
    r"(?:had|got) (?:that|it|this) wrong|(?:i|we) (?:was|were) wrong|my (?:mistake|bad))\b",
    re.I,
)
#: ...or whose title ends by saying it is a corrected version ("Retention, take two",
#: "Deadline (fixed)", "Visibility timeout, corrected")
_CORRECTED_TITLE = re.compile(r"(?:\btake (?:two|2)|\bfixed|\bcorrected|\bcorrection)\)?\W*$", re.I)
#: the value a correction says was wrong: "120 seconds, not 180", "10 days, not 14"
_NOT_VALUE = re.compile(r"\bnot\s+(\w*\d\w*)", re.I)
#: a correction corrects a note written at most this many days before it
CORRECTS_WITHIN_DAYS = 7
#: the score of a link made by the correction rule (``by_rule``)
CORRECTION_SCORE = 0.9


def corrects(m: Memory) -> bool:
    """Whether a memory opens as a correction of an earlier note, or its title ends as one
    (``_CORRECTS``, ``_CORRECTED_TITLE``)."""
    title = title_of(m)
    return bool(_CORRECTS.search(title) or _CORRECTS.search(m.text or "") or _CORRECTED_TITLE.search(title))


def correction_ties(old: Memory, new: Memory) -> tuple[str, ...]:
    """What ties a correction to an older note it may correct: the content words their
    titles share (labels such as "Correction" left out), the values the correction says
    were wrong ("not 180") that the older note holds, and the names of things both texts
    hold (identifiers with a letter: "tm-segments", "s3://nvo-pass-archive"). Empty when
    ``new`` is no correction (``corrects``) or ``old`` was not written in the
    ``CORRECTS_WITHIN_DAYS`` before it.
    A correction says outright that it replaces an earlier note; its own words are often
    few ("Correction: 120 seconds, not 180"), so the pair model, which reads how alike two
    notes are, scores it low. Of several older notes tied to one correction, ``_detect``
    links the one ``correction_rank`` puts first."""
    if not corrects(new) or not old.before(new) or new.at - old.at > timedelta(days=CORRECTS_WITHIN_DAYS):
        return ()
    shared = (title_words(old.heading) & title_words(new.heading)) - _LABELS
    held = set(_WORD.findall((old.text or "").lower()))
    named = {v.lower() for v in _NOT_VALUE.findall(new.text or "")} & held
    things = {x for x in _id_parts(old.text) & _id_parts(new.text) if len(x) >= 3 and any(c.isalpha() for c in x)}
    return (tuple(sorted(shared)) + tuple(f"not {v}" for v in sorted(named - shared))
            + tuple(sorted(things - shared)))


def correction_rank(ties: tuple[str, ...], cos: float) -> tuple[int, float]:
    """The order in which the older notes tied to one correction (``ties``: their
    ``correction_ties``) are its candidates (the first is what it corrects): more ties,
    then the nearer in meaning."""
    return len(ties), cos


def announces_change(m: Memory) -> bool:
    """Whether a memory's title or text holds a word of ``_CHANGE`` (the ``change_words``
    feature; ``by_rule`` asks it of a note written the same day as the one it may revise)."""
    return bool(_CHANGE.search(title_of(m)) or _CHANGE.search(m.text or ""))


def reports_elapsed(m: Memory) -> bool:
    """Whether a note opens by saying how long something has run and reports on it, or its
    title ends so (``_ELAPSED``, ``_ELAPSED_TITLE``)."""
    title = title_of(m)
    # the title's end is read from its last 80 characters: the search stays linear in them
    return bool(_ELAPSED.search(m.text or "") or _ELAPSED.search(title) or _ELAPSED_TITLE.search(title[-80:]))


def instructs(m: Memory) -> bool:
    """Whether a note opens as an instruction, "To <do something>: ..." (``_INSTRUCTION``)."""
    return bool(_INSTRUCTION.search(m.text or ""))


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
    two speakers, an assistant's answer, a restatement, a correction, a report of how a
    setting went, a how-to, a silent note of the same day), or None when the model decides."""
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
    ties = correction_ties(old, new)
    if ties:
        return Verdict(True, CORRECTION_SCORE, f"corrects it ({', '.join(ties[:4])})")
    if reports_elapsed(new):
        # 25 of the 27 such notes of p01-p101 report on the current setting; the other two
        # go on to decide a new value in a later sentence
        return Verdict(False, 0.0, "reports how a setting went, not a new version")
    if instructs(new):
        return Verdict(False, 0.0, "a how-to that uses the setting, not a new version")
    if old.at.date() == new.at.date() and not announces_change(new) and not corrects(new):
        # two notes of one day whose bodies read alike, the later one saying nothing of a
        # change, are two items of a list ("Dashboard cache" / "Session store") more often
        # than a fact and its silent correction
        return Verdict(False, 0.0, "written the same day, announcing no change")
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
    return by_model(old, new, cos, rank, df, n_docs, cover)


def by_model(old: Memory, new: Memory, cos: float, rank: int, df: dict[str, int], n_docs: int,
             cover: float | None = None) -> Verdict:
    """The pair model's verdict (``classify`` without its rules)."""
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
    # a correction corrects one note: of the older notes tied to it, the one
    # ``correction_rank`` puts first; the others are left to the model
    tied = {(old, new): ties for old, new, *_ in pairs if (ties := correction_ties(meta[old], meta[new]))}
    corrected: dict[str, tuple[tuple[int, float], str]] = {}
    for old, new, cos, _ in pairs:
        if (old, new) in tied:
            key = (correction_rank(tied[old, new], cos), old)
            corrected[new] = max(corrected.get(new, key), key)
    # token vectors are read only for the pairs the model scores (not those a rule decides)
    covers = pair_covers(con, [p[:2] for p in pairs if p[:2] in tied
                               or by_rule(meta[p[0]], meta[p[1]], p[2]) is None], n_docs)
    scored: dict[tuple[str, str], tuple[float, str, bool]] = {}
    for old, new, cos, rank in pairs:
        if (old, new) in scored:
            continue
        if (old, new) in tied and corrected[new][1] != old:
            v = by_model(meta[old], meta[new], cos, rank, df, n_docs, covers.get((old, new)))
        else:
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
RULES = 9


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
