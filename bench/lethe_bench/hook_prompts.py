"""The fixed prompt set of the prompt hook's abstain/inject measurement (``bench/data/prompts``).

* ``needed.json`` (generated here, then committed): every ``static`` and ``current``
  question of the update dev set (``bench/data/updates/*.json``), phrased as a request
  to a coding agent by one of a few fixed wrappers (chosen by the question's position in
  its project, so the set never changes), with the memory it needs: the ``target`` of a
  static question, the ``current`` version of a current one. Past questions are left out
  (their memory is superseded, which the hook never injects).
* ``unrelated.txt`` (written by hand): generic coding requests about other subjects,
  one a line, that no project of the dev set has a memory about.

    python -m lethe_bench.hook_prompts            # rewrites bench/data/prompts/needed.json
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent  # bench/: its data/ folder
UPDATES = HERE / "data" / "updates"
OUT = HERE / "data" / "prompts"

WRAPPERS = (
    "{q}",
    "Quick question before I start on the next change: {q}",
    "{q} I need it for the change I'm making now.",
    "Before you touch anything, tell me: {ql}",
    "Can you check our project notes and tell me {ql}",
)


def _lower_first(q: str) -> str:
    return q[:1].lower() + q[1:] if q[:2] != q[:2].upper() else q


def needed() -> list[dict]:
    out = []
    for f in sorted(UPDATES.glob("*.json")):
        for p in json.loads(f.read_text(encoding="utf-8"))["projects"]:
            i = 0
            for q in p["queries"]:
                if q["kind"] not in ("static", "current"):
                    continue
                want = q["current"] if q["kind"] == "current" else q["target"]
                text = WRAPPERS[i % len(WRAPPERS)].format(q=q["question"], ql=_lower_first(q["question"]))
                out.append({"id": q["id"], "project": p["id"], "kind": q["kind"], "prompt": text, "want": want})
                i += 1
    return out


def unrelated() -> list[str]:
    return [line.strip() for line in (OUT / "unrelated.txt").read_text(encoding="utf-8").splitlines() if line.strip()]


def load_needed() -> list[dict]:
    return json.loads((OUT / "needed.json").read_text(encoding="utf-8"))


if __name__ == "__main__":
    rows = needed()
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "needed.json").write_text(json.dumps(rows, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"{len(rows)} needed prompts, {len(unrelated())} unrelated prompts")
