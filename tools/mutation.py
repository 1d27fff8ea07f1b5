"""Mutation check: do the tests notice realistic bugs?

Each mutation below is one text substitution in ``sql/`` or a core module, the kind of
slip a change could make (an ORDER BY flipped, a constant changed, a filter or a pattern
dropped, a cache bypassed). For each one, in a temporary copy of the repository (the
files git tracks or would track, as they are in the working tree), the tool applies the
substitution, runs the fast test files mapped to it (``pytest -x``: the first failure
ends the run) and restores the file. A mutation is *killed* when a test fails, *survived*
when every test passes. Score = killed / (killed + survived).

    python tools/mutation.py                          # the working tree's tests
    python tools/mutation.py --baseline 1be3c0b       # also the tests of that revision: before/after
    python tools/mutation.py --only hybrid-asc,google-key-removed --report out.md
    python tools/mutation.py --list

Before the mutations, each test set runs once unmutated on its copy (all mapped files):
it must pass, or the check stops (a test failing anyway would count as a kill). Runs are
sequential and niced; nothing is written to the repository except ``--report``. Not part
of any installed distribution (``bench/``, the harness ``lethe_bench``, is a sibling one): run it from a source checkout with the
project's virtual environment.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from io import BytesIO
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

GOLDEN = "tests/test_golden_sql.py"


@dataclass(frozen=True)
class Mutation:
    id: str
    path: str          # file in the repository
    old: str           # text replaced (must occur exactly once)
    new: str
    tests: tuple[str, ...]
    why: str
    issue: bool = False  # one of the five mutations issue 17 names


MUTATIONS: list[Mutation] = [
    # -- the five of issue 17 ----------------------------------------------------------
    Mutation("hybrid-asc", "sql/fuse.sql",
             "row_number() OVER (ORDER BY score DESC, id) AS rank,\n       bm25_rank",
             "row_number() OVER (ORDER BY score ASC, id) AS rank,\n       bm25_rank",
             (GOLDEN, "tests/test_fusion.py", "tests/test_prepared.py", "tests/test_store.py"),
             "lethe_hybrid ranks by RRF score ascending", issue=True),
    Mutation("google-key-removed", "lethe_sql/privacy.py",
             '    ("google-api-key", re.compile(r"\\bAIza[0-9A-Za-z_\\-]{35}\\b"), 0, None),\n', "",
             ("tests/test_privacy_shapes.py", "tests/test_privacy.py"),
             "the Google API key (AIza...) pattern removed: such keys reach the index", issue=True),
    Mutation("attach-read-write", "lethe_sql/federation.py",
             'opts = [exp.AttachOption(this=exp.var("READ_ONLY"))] if read_only else []', "opts = []",
             ("tests/test_federation_readonly.py", "tests/test_federation.py"),
             "cross-project search attaches projects read-write (READ_ONLY dropped)", issue=True),
    Mutation("prepare-every-call", "lethe_sql/prepared.py",
             "        if self.name not in names:\n            self._prepare(con, names)",
             "        if True:\n            self._prepare(con, names)",
             ("tests/test_prepared_once.py", "tests/test_prepared.py", "tests/test_federation.py"),
             "Statement.execute bypasses the per-connection cache: PREPARE on every call", issue=True),
    Mutation("ctx-b-0.5", "sql/context.sql",
             "/ (tf.tf + 1.2 * (1 - 0.75 + 0.75 * (docs.len / st.avgdl)))",
             "/ (tf.tf + 1.2 * (1 - 0.5 + 0.5 * (docs.len / st.avgdl)))",
             (GOLDEN, "tests/test_context.py", "tests/test_fusion.py"),
             "context-field BM25 with b = 0.5 instead of 0.75", issue=True),
    # -- more realistic slips ----------------------------------------------------------
    Mutation("dense-asc", "sql/dense.sql",
             "SELECT id, score, row_number() OVER (ORDER BY score DESC, id) AS rank",
             "SELECT id, score, row_number() OVER (ORDER BY score ASC, id) AS rank",
             (GOLDEN, "tests/test_prepared.py", "tests/test_fusion.py", "tests/test_store.py"),
             "lethe_dense numbers its top k in ascending order"),
    Mutation("bm25-k1-2.0", "sql/bm25.sql",
             "* (tf.tf * (1.2 + 1))\n                   / (tf.tf + 1.2 *",
             "* (tf.tf * (2.0 + 1))\n                   / (tf.tf + 2.0 *",
             (GOLDEN, "tests/test_fts_incremental.py", "tests/test_fusion.py"),
             "lethe_bm25 with k1 = 2.0 instead of 1.2"),
    Mutation("rrf-k-1", "sql/fuse.sql",
             "coalesce(1.0 / (60 + b.rank), 0) + coalesce(1.0 / (60 + d.rank), 0)",
             "coalesce(1.0 / (1 + b.rank), 0) + coalesce(1.0 / (1 + d.rank), 0)",
             (GOLDEN, "tests/test_fusion.py", "tests/test_prepared.py"),
             "reciprocal-rank fusion with k = 1 instead of 60"),
    Mutation("current-keeps-superseded", "sql/revisions.sql",
             "SELECT id, valid_from, source, heading, text FROM lethe_versions WHERE is_current;",
             "SELECT id, valid_from, source, heading, text FROM lethe_versions;",
             (GOLDEN, "tests/test_revisions.py", "tests/test_db.py"),
             "lethe_current no longer filters out superseded memories"),
    Mutation("as-of-boundary", "sql/revisions.sql",
             "AND (is_current OR valid_to > CAST(ts AS TIMESTAMP));",
             "AND (is_current OR valid_to >= CAST(ts AS TIMESTAMP));",
             (GOLDEN, "tests/test_revisions.py"),
             "lethe_as_of keeps a version at the very instant it was replaced"),
    Mutation("dedup-key-ignores-digits", "lethe_sql/markdown.py",
             '_WORDS = re.compile(r"\\w+")', '_WORDS = re.compile(r"[^\\W\\d]+")',
             ("tests/test_dedup.py", "tests/test_markdown.py"),
             "dedup_key drops numbers: 'port 5432' and 'port 5433' become duplicates"),
    Mutation("private-not-scrubbed", "lethe_sql/privacy.py",
             "    out, n_private = strip_private(text)\n", "    out, n_private = text, 0\n",
             ("tests/test_privacy.py", "tests/test_privacy_shapes.py"),
             "scrub() no longer removes <private> spans"),
    Mutation("bm25-limit-minus-one", "sql/bm25.sql", "ORDER BY rank\nLIMIT k;", "ORDER BY rank\nLIMIT k - 1;",
             (GOLDEN, "tests/test_prepared.py", "tests/test_fusion.py", "tests/test_fts_incremental.py"),
             "lethe_bm25 returns k - 1 rows (k + 1 overflows: lethe_fused asks for INT64 max)"),
    Mutation("fused-ignores-ctx", "sql/fuse.sql",
             "SELECT *, (w_bm25 * z_bm25 + w_ctx * z_ctx + w_dense * z_dense)",
             "SELECT *, (w_bm25 * z_bm25 + w_dense * z_dense)",
             (GOLDEN, "tests/test_fusion.py", "tests/test_prepared.py"),
             "lethe_fused leaves the context-field z-score out of the sum"),
    Mutation("stopword-the-kept", "sql/00_tokens.sql", "'a', 'an', 'the', 'and',", "'a', 'an', 'and',",
             (GOLDEN, "tests/test_fusion.py", "tests/test_prepared.py"),
             "'the' is no longer a query stopword"),
    Mutation("apoptotic-kept", "sql/rif.sql", "WHERE e.tier <> 'apoptotic'", "WHERE TRUE",
             (GOLDEN, "tests/test_learning.py"),
             "lethe_candidates keeps apoptotic entries"),
    Mutation("suppression-added", "sql/rif.sql", "h.score - alpha * coalesce(s.s, 0) AS adjusted",
             "h.score + alpha * coalesce(s.s, 0) AS adjusted",
             (GOLDEN, "tests/test_learning.py", "tests/test_prepared.py"),
             "suppression raises the adjusted score instead of lowering it"),
    Mutation("maxsim-unweighted", "sql/judge.sql", "SELECT best.id, sum(best.sim * q.w) / sum(q.w) AS score",
             "SELECT best.id, avg(best.sim) AS score",
             (GOLDEN, "tests/test_judges.py"),
             "lethe_maxsim ignores the IDF weights"),
    Mutation("stripe-key-longer", "lethe_sql/privacy.py",
             r'("stripe-key", re.compile(r"\b(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}+"), 0, None)',
             r'("stripe-key", re.compile(r"\b(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{32,}+"), 0, None)',
             ("tests/test_privacy_shapes.py", "tests/test_privacy.py"),
             "Stripe keys need 32 characters after the prefix: real 24-character ones pass"),
]


# -- the copies ------------------------------------------------------------------------


def _git(*args: str) -> bytes:
    return subprocess.run(["git", *args], cwd=REPO, check=True, capture_output=True).stdout


def make_copy(dest: Path, tests_at: str | None) -> None:
    """The working tree's tracked and untracked-but-not-ignored files under ``dest``;
    ``tests/`` replaced by the one of revision ``tests_at`` when given."""
    files = [f for f in _git("ls-files", "-z", "--cached", "--others", "--exclude-standard").decode().split("\0") if f]
    for f in files:
        src = REPO / f
        if not src.is_file():  # deleted in the working tree
            continue
        out = dest / f
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, out)
    # the editable install maps lethe_sql.udfs to a folder beside the package: link it
    # inside so that the copy imports only its own code
    for name in ("udfs",):
        link = dest / "lethe_sql" / name
        if not link.exists():
            link.symlink_to(Path("..") / name, target_is_directory=True)
    if tests_at:
        shutil.rmtree(dest / "tests")
        with tarfile.open(fileobj=BytesIO(_git("archive", "--format=tar", tests_at, "tests"))) as tar:
            tar.extractall(dest, filter="data")


def _env(copy: Path) -> dict:
    env = dict(os.environ)
    env.pop("LETHE_UPDATE_GOLDEN", None)  # a golden must fail, never be rewritten
    env["PYTHONPATH"] = str(copy)
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # a restored module is never read from a stale .pyc
    env["LETHE_SERVE"] = "0"
    return env


_FAILED = re.compile(r"^(?:FAILED|ERROR) (\S+)", re.M)


def run_tests(copy: Path, files: list[str], timeout: float, *, stop_first: bool = True) -> tuple[str, str, float]:
    """(outcome, detail, seconds): outcome 'pass', 'fail', 'timeout' or 'none' (no test file)."""
    present = [f for f in files if (copy / f).is_file()]
    if not present:
        return "none", "no mapped test file in this test set", 0.0
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=-ra", "--no-header", *present]
    if stop_first:
        cmd.insert(4, "-x")
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, cwd=copy, env=_env(copy), capture_output=True, text=True, timeout=timeout,
                           preexec_fn=lambda: os.nice(10))
    except subprocess.TimeoutExpired:
        return "timeout", f"over {timeout:.0f} s", time.monotonic() - t0
    secs = time.monotonic() - t0
    out = p.stdout + p.stderr
    if p.returncode == 0:
        return "pass", "", secs
    m = _FAILED.search(out)
    detail = m.group(1) if m else (out.strip().splitlines() or ["?"])[-1][:160]
    return "fail", detail, secs


def apply(copy: Path, m: Mutation) -> str:
    path = copy / m.path
    text = path.read_text(encoding="utf-8")
    n = text.count(m.old)
    if n != 1:
        raise SystemExit(f"mutation {m.id}: expected the text once in {m.path}, found it {n} times (stale mutation)")
    path.write_text(text.replace(m.old, m.new), encoding="utf-8")
    return text


# -- the check ---------------------------------------------------------------------------


def check_imports(copy: Path) -> None:
    """The copy's tests must import the copy's code, not the editable install's."""
    code = "import lethe_sql, lethe_sql.udfs.embed, lethe_sql.resources as r; " \
           "print(lethe_sql.__file__); print(lethe_sql.udfs.embed.__file__); print(r.resource_dir('sql'))"
    out = subprocess.run([sys.executable, "-c", code], cwd=copy, env=_env(copy), capture_output=True, text=True,
                         check=True).stdout.split()
    real = copy.resolve()
    bad = [p for p in out if not Path(p).resolve().is_relative_to(real)]
    if bad:
        raise SystemExit(f"the copy at {copy} imports code from outside it: {bad}")


def check(sets: dict[str, Path], mutations: list[Mutation], timeout: float, log) -> dict:
    """{set name: {mutation id: (result, detail, files run, seconds)}}; result 'killed',
    'survived' or 'timeout' (counted as killed)."""
    results: dict[str, dict] = {name: {} for name in sets}
    for name, copy in sets.items():
        check_imports(copy)
        files = sorted({f for m in mutations for f in m.tests})
        log(f"[{name}] unmutated run of {len([f for f in files if (copy / f).is_file()])} test files ...")
        outcome, detail, secs = run_tests(copy, files, timeout * 3, stop_first=False)
        if outcome not in ("pass", "none"):
            raise SystemExit(f"[{name}] the tests fail without any mutation ({outcome}: {detail}); fix them first")
        log(f"[{name}] unmutated: pass ({secs:.0f} s)")
    for m in mutations:
        for name, copy in sets.items():
            original = apply(copy, m)
            try:
                outcome, detail, secs = run_tests(copy, list(m.tests), timeout)
            finally:
                (copy / m.path).write_text(original, encoding="utf-8")
            result = {"fail": "killed", "timeout": "timeout", "pass": "survived", "none": "survived"}[outcome]
            ran = [f for f in m.tests if (copy / f).is_file()]
            results[name][m.id] = (result, detail, ran, secs)
            log(f"[{name}] {m.id}: {result} ({secs:.0f} s) {detail}")
    return results


def score(res: dict) -> tuple[int, int]:
    killed = sum(1 for r, *_ in res.values() if r in ("killed", "timeout"))
    return killed, len(res)


def report(results: dict, mutations: list[Mutation], command: str, sets: dict[str, str]) -> str:
    names = list(results)
    rev = _git("rev-parse", "--short", "HEAD").decode().strip()
    dirty = " (with uncommitted changes)" if _git("status", "--porcelain", "--untracked-files=no").strip() else ""
    lines = [
        "# Mutation check",
        "",
        f"Command: `{command}`",
        "",
        f"Code at `{rev}`{dirty}, {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, Python {sys.version.split()[0]}.",
        "Test sets: " + "; ".join(f"**{n}**: {desc}" for n, desc in sets.items()) + ".",
        "",
        "A mutation is one text substitution in a temporary copy of the repository; *killed* when a mapped "
        "test file fails (`pytest -x`), *survived* when all pass. Score = killed / mutations.",
        "",
        "| " + " | ".join(f"{n} score" for n in names) + " |",
        "|" + "---|" * len(names),
        "| " + " | ".join("{}/{} ({:.0%})".format(*score(results[n]), score(results[n])[0] / score(results[n])[1])
                          for n in names) + " |",
        "",
        "| mutation | file | what it breaks | " + " | ".join(names) + " |",
        "|---|---|---|" + "---|" * len(names),
    ]
    for m in mutations:
        cells = []
        for n in names:
            r, detail, ran, secs = results[n][m.id]
            cell = f"**{r}**" if r != "survived" else "survived"
            if detail and r != "survived":
                cell += f" by `{detail}`"
            elif not ran:
                cell += " (no mapped test file)"
            cells.append(cell)
        tag = " (issue 17)" if m.issue else ""
        lines.append(f"| `{m.id}`{tag} | `{m.path}` | {m.why} | " + " | ".join(cells) + " |")
    lines += ["", "Test files run per mutation (those present in each set):", ""]
    for m in mutations:
        lines.append(f"- `{m.id}`: " + ", ".join(f"`{t}`" for t in m.tests))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline", metavar="REV", help="also run the tests of revision REV (the 'before' column)")
    ap.add_argument("--only", help="comma-separated mutation ids")
    ap.add_argument("--list", action="store_true", help="list the mutations and exit")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per test run (default 300)")
    ap.add_argument("--report", type=Path, help="write the markdown report here")
    args = ap.parse_args(argv)

    mutations = MUTATIONS
    if args.only:
        wanted = args.only.split(",")
        unknown = set(wanted) - {m.id for m in MUTATIONS}
        if unknown:
            ap.error(f"unknown mutation(s): {', '.join(sorted(unknown))}")
        mutations = [m for m in MUTATIONS if m.id in wanted]
    if args.list:
        for m in mutations:
            print(f"{m.id:26} {m.path:26} {m.why}")
        return 0

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    with tempfile.TemporaryDirectory(prefix="lethe-mutation-") as tmp:
        sets: dict[str, Path] = {}
        desc: dict[str, str] = {}
        if args.baseline:
            base = _git("rev-parse", "--short", args.baseline).decode().strip()
            sets["before"] = Path(tmp) / "before"
            make_copy(sets["before"], args.baseline)
            desc["before"] = f"`tests/` as of `{base}` ({args.baseline})"
        sets["after"] = Path(tmp) / "after"
        make_copy(sets["after"], None)
        desc["after"] = "`tests/` of the working tree"
        results = check(sets, mutations, args.timeout, log)
    command = "python tools/mutation.py" + (" " + " ".join(argv if argv is not None else sys.argv[1:])).rstrip()
    text = report(results, mutations, command, desc)
    if args.report:
        args.report.parent.mkdir(parents=True, exist_ok=True)
        args.report.write_text(text, encoding="utf-8")
    print(text)
    killed, total = score(results["after"])
    return 0 if killed == total else 1


if __name__ == "__main__":
    sys.exit(main())
