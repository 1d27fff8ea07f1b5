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
# Words that name a change as a thing or an event ("the change", "after the migration",
# "the cutover went fine", "the new timetable", "done", "finished", "starting") are left
# out: a note that reports on a change uses them as often as one that makes it (over the
# candidate pairs of p01-p109 scored 0.2 or more, 70% of them true, a pair whose newer note
# holds "new" is true 68% of the time, "change" 53%, "migration" 57%, "done" 59%, "cutover"
# 47%; "now" 84%, "moved" 84%). Refitted without them on p01-p93, the detection's average
# precision over the candidate pairs rose on every set outside the fit: p94-p97 0.834 ->
# 0.847, p98-p101 0.863 -> 0.885, p102-p105 0.835 -> 0.836, p106-p109 0.940 -> 0.944, its
# link precision with it (0.756 -> 0.805, 0.740 -> 0.743, 0.692 -> 0.705, 0.807 -> 0.817;
# bench/lever_study/README.md, eighteenth session).
_CHANGE = re.compile(
    r"\b(now|instead|replac\w*|switch\w*|mov(?:e|ed|es|ing)|migrat(?:e|ed|es|ing)|chang(?:ed|ing)|no longer|"
    r"any ?more|updat\w*|renam\w*|bump\w*|upgrad\w*|downgrad\w*|revert\w*|dropp?\w*|deprecat\w*|"
    r"supersed\w*|rais\w*|lower\w*|increas\w*|decreas\w*|reduc\w*|extend\w*|shorten\w*|"
    r"from\b.{1,60}?\bto\b|was\b.{1,60}?\bis\b|handed|took over|takes over|reassign\w*|"
    r"retir\w*|remov\w*|delet\w*|decommission\w*|sunset\w*|back to|again|"
    r"effective|going forward|correct(?:ion|ions|ed|ing)|amend\w*|turns? out|scratch that|disregard\w*|"
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
# create ...", "How to swap an on-call week: in Ringside ..."): a how-to that uses the current
# setting, not a new version of it (``instructs``; all 23 such notes of p01-p101; "How to"
# since the twentieth session, found in dev-ag's misses: of the 36 notes of p01-p133 that
# open so, none is a version of a chain)
_INSTRUCTION = re.compile(r"^\W*(?:how\s+)?to\s+[a-z][\w-]*\b[^.:\n]{0,80}:", re.I)
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
# Refitted on p01-p93 in the eighteenth session with ``_CHANGE`` narrowed (above): on the fit,
# precision at ``LINK_AT`` 0.793 -> 0.804, recall 0.804 -> 0.813.
_MEAN = (0.49607, 0.36238, 0.10867, 0.10039, 0.23955, 0.30126, 0.00020251, 0.61281, 0.080922,
    0.23914, 0.025861, 0.01292, 0.2239, 0.081571, 0.048927, 0.020312, 0.66943, 0.017771, 0.37284,
    0.18864, 0.062084, 0.057249, 0.12632, 0.13266, 0.00011425, 0.31964, 0.046359, 0.14382,
    0.013009, 0.0083154, 0.094528, 0.034734, 0.019837, 0.0083848, 0.32994, 0.010772, 0.19356,
    0.047573, 0.043745, 0.093608, 0.11299, 0.00016201, 0.20814, 0.03399, 0.084763, 0.016192,
    0.0037668, 0.095148, 0.030363, 0.018749, 0.0081439, 0.24301, 0.0057193, 0.14386, 0.018303,
    0.033833, 0.02911, 4.4552e-05, 0.072091, 0.01519, 0.037031, 0.0049359, 0.0030075, 0.019327,
    0.0078158, 0.0035971, 0.0016307, 0.072437, 0.009244, 0.045801, 0.031365, 0.024731, 3.1877e-05,
    0.066228, 0.014026, 0.033021, 0.0043979, 0.0033231, 0.018308, 0.0067356, 0.0034573, 0.001633,
    0.064548, -0.0034141, 0.042528, 0.066634, 6.3804e-05, 0.1536, 0.023978, 0.069117, 0.0074691,
    0.0024616, 0.046863, 0.017105, 0.01001, 0.0042168, 0.16222, 0.0049986, 0.094692, 0.00016201,
    0.16872, 0.019705, 0.036336, 0.013811, 0.00024301, 0.10563, 0.081571, 0.016808, 0.0071486,
    0.21056, 0.016783, 0.10904, 0.00013545, 2.3147e-05, 3.0233e-05, 4.0502e-05, 0, 6.0753e-05,
    4.0502e-05, 0, 0, 0.00014838, 4.0698e-05, 9.7028e-05, 0.054005, 0.17607, 0.013408, 0.0099849,
    0.1113, 0.043859, 0.027527, 0.0097419, 0.40813, 0.014122, 0.23401, 0.027669, 0.0032059,
    0.0021557, 0.01349, 0.0052394, 0.0024629, 0.0012276, 0.052863, 0.0021434, 0.033943, 0.0044484,
    0.0061724, 0.016343, 0.0064285, 0.0024976, 0.00097658, 0.15703, 0.010287, 0.098623, 1.3501e-05,
    0.013035, 0.0048198, 0.0022614, 0.00051978, 0.018035, 0.00097223, 0.011346, 4.0502e-05, 0, 0,
    0, 0.0057593, -0.00082397, 0.0046, 0.032017, 0.02175, 0.0056703, 0.15415, 0.00095568, 0.082145,
    0.00060753, 0.0024099, 0.057223, 0.0048108, 0.029504, 0.0017011, 0.033406, 0.00013316,
    0.016846, 0.013983, -0.00031243, 0.0070239, 0.021713, 0.2495, 0.0068371)
_SD = (0.14037, 0.30105, 0.108, 0.1006, 0.12946, 0.4588, 0.014229, 0.2556, 0.068848, 0.25539,
    0.10384, 0.11293, 0.41685, 0.27371, 0.21571, 0.14106, 0.083358, 0.22619, 0.079672, 0.1852,
    0.074858, 0.071131, 0.087153, 0.21251, 0.008305, 0.18638, 0.050324, 0.16031, 0.056233,
    0.073676, 0.18302, 0.1208, 0.089763, 0.059845, 0.09662, 0.12512, 0.092018, 0.07994, 0.072176,
    0.10429, 0.23823, 0.012185, 0.20015, 0.052463, 0.14687, 0.078101, 0.044186, 0.23341, 0.1328,
    0.10625, 0.071565, 0.20545, 0.096105, 0.14125, 0.035896, 0.041597, 0.070384, 0.003579,
    0.085803, 0.03021, 0.061232, 0.02652, 0.038263, 0.056502, 0.039306, 0.022594, 0.016012,
    0.071589, 0.044627, 0.054579, 0.03954, 0.057796, 0.0024382, 0.081828, 0.029216, 0.055393,
    0.02278, 0.04282, 0.051447, 0.032955, 0.021737, 0.015719, 0.058185, 0.040713, 0.051703,
    0.12026, 0.0044883, 0.11908, 0.026375, 0.087526, 0.030833, 0.024307, 0.10088, 0.064714,
    0.05037, 0.032642, 0.094312, 0.065525, 0.062595, 0.012727, 0.28153, 0.044297, 0.13556,
    0.078077, 0.015587, 0.30736, 0.27371, 0.12855, 0.084247, 0.32244, 0.10595, 0.17204, 0.0095929,
    0.0018489, 0.0034621, 0.0036741, 1e-09, 0.0077942, 0.006364, 1e-09, 1e-09, 0.010441, 0.0034439,
    0.0069781, 0.057504, 0.20097, 0.058798, 0.09047, 0.23047, 0.15574, 0.1292, 0.075648, 0.1762,
    0.16364, 0.1198, 0.040671, 0.016933, 0.022377, 0.037205, 0.024944, 0.015159, 0.011382,
    0.042645, 0.023875, 0.036822, 0.036357, 0.055257, 0.092889, 0.060295, 0.034428, 0.022477,
    0.17192, 0.095003, 0.1105, 0.0021213, 0.075948, 0.04757, 0.030103, 0.014142, 0.073048, 0.01784,
    0.048772, 0.006364, 1e-09, 1e-09, 1e-09, 0.052069, 0.052315, 0.041433, 0.17605, 0.14587,
    0.075088, 0.28817, 0.077867, 0.15775, 0.024641, 0.049031, 0.19276, 0.051651, 0.10201, 0.041209,
    0.1477, 0.034996, 0.075861, 0.097422, 0.023774, 0.049747, 0.15138, 0.061556, 0.083479)
_WEIGHTS = (-0.31536, -0.21639, 0.64163, 0.46124, 0.16983, -0.0082864, 0.04953, 0.23259, -0.035167,
    1.2709, -0.19674, 0.030849, -0.35606, -0.027356, -0.10221, 0.0065767, -0.16613, 0.08424,
    0.82249, 0.30159, -0.041483, -0.061962, -0.6943, 0.0035511, 0.046929, -0.88764, -0.50162,
    -0.80878, 0.21882, 0.022677, 0.5505, 0.011356, -0.13169, -0.013739, -0.099282, -0.15788,
    0.14064, 0.25275, 0.31133, 0.33331, 0.23587, 0.044401, 0.70553, -0.37083, -0.28056, -0.2175,
    -0.10144, -0.25902, 0.30874, -0.16604, -0.15691, -0.26502, 0.37442, 0.24843, -0.0032518,
    -0.32036, 0.26512, 0.039761, 0.45205, -0.2901, -0.19474, -0.087047, -0.068421, -0.0254,
    -0.038844, -0.15695, -0.13075, 0.80607, -0.28482, 0.21133, -0.55891, 0.2073, 0.043189, 0.33273,
    -0.24572, 0.42033, -0.068761, 0.0028455, -0.042571, 0.14305, -0.15939, -0.10941, 0.6736,
    0.52964, 0.080539, 0.16, 0.049439, -0.30673, -0.67511, -0.25954, 0.26147, -0.024013, 0.43757,
    -0.082533, -0.069854, 0.0057042, -0.020295, -0.14775, -0.14019, -0.0063292, 0.28181, -0.12844,
    0.0070542, -0.25491, 0.028766, -0.12954, -0.027356, 0.23762, -0.18096, -0.52049, -0.046605,
    0.14418, 0.048914, 0.040153, 0.048407, 0.034327, 0, 0.015957, 0.041067, 0, 0, 0.049414,
    0.098554, 0.047737, -0.23537, -0.43105, 0.42671, 0.012912, 0.62277, 0.19781, -0.19713, 0.18319,
    0.13853, -0.2275, -0.11239, -0.47201, 0.099678, -0.034764, -0.11826, -0.18889, -0.15076,
    -0.10332, -0.012522, -0.2612, -0.25681, 0.23254, 0.020966, 0.30908, 0.20226, -0.16605,
    -0.13743, 0.83437, -0.27641, -0.018552, 0.10313, -0.22871, 0.039406, 0.11296, 0.081258,
    -0.15942, 0.11694, 0.060555, 0.10313, 0, 0, 0, 0.011598, -0.20898, 0.012914, -0.21588,
    -0.020939, -0.026826, -0.64433, 0.047771, 0.083582, 0.053504, -0.20502, -0.083704, 0.11723,
    -0.074711, 0.13579, -0.10542, 0.16226, -0.12597, 0.0041416, 0.092733, -0.0080773, 0.15696,
    0.68076, 0.33839)
_BIAS = -5.6896
# The same fit without ``token_cover``: for a pair whose memories have no token vectors (a
# store indexed with ``token_index=False``).
_NO_COVER = (
    (0.49607, 0.36238, 0.10867, 0.10039, 0.23955, 0.30126, 0.00020251, 0.61281, 0.080922, 0.23914,
        0.025861, 0.01292, 0.2239, 0.081571, 0.048927, 0.020312, 0.66943, 0.017771, 0.18864,
        0.062084, 0.057249, 0.12632, 0.13266, 0.00011425, 0.31964, 0.046359, 0.14382, 0.013009,
        0.0083154, 0.094528, 0.034734, 0.019837, 0.0083848, 0.32994, 0.010772, 0.047573, 0.043745,
        0.093608, 0.11299, 0.00016201, 0.20814, 0.03399, 0.084763, 0.016192, 0.0037668, 0.095148,
        0.030363, 0.018749, 0.0081439, 0.24301, 0.0057193, 0.018303, 0.033833, 0.02911, 4.4552e-05,
        0.072091, 0.01519, 0.037031, 0.0049359, 0.0030075, 0.019327, 0.0078158, 0.0035971,
        0.0016307, 0.072437, 0.009244, 0.031365, 0.024731, 3.1877e-05, 0.066228, 0.014026,
        0.033021, 0.0043979, 0.0033231, 0.018308, 0.0067356, 0.0034573, 0.001633, 0.064548,
        -0.0034141, 0.066634, 6.3804e-05, 0.1536, 0.023978, 0.069117, 0.0074691, 0.0024616,
        0.046863, 0.017105, 0.01001, 0.0042168, 0.16222, 0.0049986, 0.00016201, 0.16872, 0.019705,
        0.036336, 0.013811, 0.00024301, 0.10563, 0.081571, 0.016808, 0.0071486, 0.21056, 0.016783,
        0.00013545, 2.3147e-05, 3.0233e-05, 4.0502e-05, 0, 6.0753e-05, 4.0502e-05, 0, 0,
        0.00014838, 4.0698e-05, 0.054005, 0.17607, 0.013408, 0.0099849, 0.1113, 0.043859, 0.027527,
        0.0097419, 0.40813, 0.014122, 0.027669, 0.0032059, 0.0021557, 0.01349, 0.0052394,
        0.0024629, 0.0012276, 0.052863, 0.0021434, 0.0044484, 0.0061724, 0.016343, 0.0064285,
        0.0024976, 0.00097658, 0.15703, 0.010287, 1.3501e-05, 0.013035, 0.0048198, 0.0022614,
        0.00051978, 0.018035, 0.00097223, 4.0502e-05, 0, 0, 0, 0.0057593, -0.00082397, 0.032017,
        0.02175, 0.0056703, 0.15415, 0.00095568, 0.00060753, 0.0024099, 0.057223, 0.0048108,
        0.0017011, 0.033406, 0.00013316, 0.013983, -0.00031243, 0.021713),
    (0.14037, 0.30105, 0.108, 0.1006, 0.12946, 0.4588, 0.014229, 0.2556, 0.068848, 0.25539,
        0.10384, 0.11293, 0.41685, 0.27371, 0.21571, 0.14106, 0.083358, 0.22619, 0.1852, 0.074858,
        0.071131, 0.087153, 0.21251, 0.008305, 0.18638, 0.050324, 0.16031, 0.056233, 0.073676,
        0.18302, 0.1208, 0.089763, 0.059845, 0.09662, 0.12512, 0.07994, 0.072176, 0.10429, 0.23823,
        0.012185, 0.20015, 0.052463, 0.14687, 0.078101, 0.044186, 0.23341, 0.1328, 0.10625,
        0.071565, 0.20545, 0.096105, 0.035896, 0.041597, 0.070384, 0.003579, 0.085803, 0.03021,
        0.061232, 0.02652, 0.038263, 0.056502, 0.039306, 0.022594, 0.016012, 0.071589, 0.044627,
        0.03954, 0.057796, 0.0024382, 0.081828, 0.029216, 0.055393, 0.02278, 0.04282, 0.051447,
        0.032955, 0.021737, 0.015719, 0.058185, 0.040713, 0.12026, 0.0044883, 0.11908, 0.026375,
        0.087526, 0.030833, 0.024307, 0.10088, 0.064714, 0.05037, 0.032642, 0.094312, 0.065525,
        0.012727, 0.28153, 0.044297, 0.13556, 0.078077, 0.015587, 0.30736, 0.27371, 0.12855,
        0.084247, 0.32244, 0.10595, 0.0095929, 0.0018489, 0.0034621, 0.0036741, 1e-09, 0.0077942,
        0.006364, 1e-09, 1e-09, 0.010441, 0.0034439, 0.057504, 0.20097, 0.058798, 0.09047, 0.23047,
        0.15574, 0.1292, 0.075648, 0.1762, 0.16364, 0.040671, 0.016933, 0.022377, 0.037205,
        0.024944, 0.015159, 0.011382, 0.042645, 0.023875, 0.036357, 0.055257, 0.092889, 0.060295,
        0.034428, 0.022477, 0.17192, 0.095003, 0.0021213, 0.075948, 0.04757, 0.030103, 0.014142,
        0.073048, 0.01784, 0.006364, 1e-09, 1e-09, 1e-09, 0.052069, 0.052315, 0.17605, 0.14587,
        0.075088, 0.28817, 0.077867, 0.024641, 0.049031, 0.19276, 0.051651, 0.041209, 0.1477,
        0.034996, 0.097422, 0.023774, 0.15138),
    (0.11686, -0.14005, 0.77007, 0.58177, 0.16266, 0.045785, 0.055519, 0.18582, -0.10704, 1.3695,
        -0.18484, 0.017429, -0.31926, -0.023665, -0.12044, 0.012031, 0.055821, 0.15923, 0.62093,
        0.0027277, -0.016239, -0.64406, 0.21525, 0.052994, -0.86283, -0.57976, -0.83514, 0.34798,
        0.0095037, 0.75112, 0.020907, -0.14901, -0.0076933, 0.39677, -0.065323, 0.26063, 0.41844,
        0.31692, 0.17022, 0.050539, 0.664, -0.51143, -0.27089, -0.26649, -0.1056, -0.27561,
        0.32407, -0.15905, -0.14148, -0.27553, 0.4113, 0.20417, -0.24457, 0.2493, 0.046033,
        0.48355, -0.32233, -0.24125, -0.058184, -0.055628, 0.06659, -0.037032, -0.16028, -0.11223,
        0.97108, -0.75821, -0.54285, 0.36895, 0.049362, 0.3327, -0.28003, 0.53717, -0.090117,
        -0.012768, -0.013331, 0.14409, -0.15775, -0.087197, 0.92334, 1.144, 0.11732, 0.055431,
        -0.40889, -0.74067, -0.37719, 0.32859, -0.036156, 0.44147, -0.14442, -0.082173, 0.010941,
        0.003611, -0.05571, -0.0029075, 0.27387, -0.24748, -0.0037646, -0.25066, 0.053944,
        -0.14205, -0.023665, 0.25701, -0.21476, -0.53066, -0.017555, 0.054921, 0.046414, 0.047129,
        0.016282, 0, -0.0017944, 0.040037, 0, 0, 0.055406, 0.086968, -0.35401, -0.40869, 0.42626,
        0.00077818, 0.67404, 0.23765, -0.20853, 0.18443, 0.15318, -0.17077, -0.53885, 0.062229,
        -0.048761, -0.26604, -0.24165, -0.15445, -0.081543, -0.028401, -0.35833, 0.2655, 0.0046844,
        0.32052, 0.21296, -0.18218, -0.16745, 0.84361, -0.32505, 0.14101, -0.27465, 0.018923,
        0.14449, 0.0031557, -0.17536, 0.12707, 0.14101, 0, 0, 0, -0.00080578, -0.16234, -0.26135,
        -0.073306, -0.12282, -0.64282, 0.087367, 0.034238, -0.21815, -0.086678, 0.099291, 0.1164,
        -0.12355, 0.19391, 0.0096671, 0.067602, 0.063832),
    -5.5214,
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
        1.0 if title_announces_change(new) else 0.0,
        1.0 if note_kind(new) else 0.0,
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


def title_announces_change(m: Memory) -> bool:
    """Whether a memory's title holds a word of ``_CHANGE`` (the ``title_change`` feature)."""
    return bool(_CHANGE.search(title_of(m)))


def reports_elapsed(m: Memory) -> bool:
    """Whether a note opens by saying how long something has run and reports on it, or its
    title ends so (``_ELAPSED``, ``_ELAPSED_TITLE``)."""
    title = title_of(m)
    # the title's end is read from its last 80 characters: the search stays linear in them
    return bool(_ELAPSED.search(m.text or "") or _ELAPSED.search(title) or _ELAPSED_TITLE.search(title[-80:]))


def instructs(m: Memory) -> bool:
    """Whether a note opens as an instruction, "To <do something>: ..." or "How to <do
    something>: ..." (``_INSTRUCTION``)."""
    return bool(_INSTRUCTION.search(m.text or ""))


def note_kind(m: Memory) -> bool:
    """Whether a note is not a statement of how things are: its title or text opens as an
    incident, a reminder, a check ... (``_NOTE_KIND``), or its title ends in such a noun
    (``note_head``): the ``note_kind`` feature."""
    title = title_of(m)
    return bool(_NOTE_KIND.search(title) or _NOTE_KIND.search(m.text or "") or note_head(title))


#: what kind of note a memory is, read from its own words alone (``note_signals``)
NOTE_SIGNALS = ("title_change", "change_words", "corrects", "note_kind", "instructs", "reports_elapsed")


def note_signals(m: Memory) -> tuple[float, ...]:
    """``NOTE_SIGNALS`` of one memory, each 0 or 1: its title announces a change
    (``_CHANGE``), its title or text does (``announces_change``), it opens as a correction
    (``corrects``), it is an incident, a check, a question ... (``note_kind``), a how-to
    (``instructs``), a report of how a setting went (``reports_elapsed``). A version of a
    subject tends to say that it changes something; a note that uses the current version
    tends to be one of the latter kinds (``present.py`` reads them of every candidate)."""
    return (float(title_announces_change(m)), float(announces_change(m)), float(corrects(m)),
            float(note_kind(m)), float(instructs(m)), float(reports_elapsed(m)))


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
