"""``lethe bench soak DURATION``: many agents, one store, through the real ``lethe`` binary.

A black box: every operation is a whole ``lethe`` process, as an agent runs it. On a fresh
temporary project (``lethe init``, then ``--size`` seeded memories written as markdown files
and indexed with ``lethe index``), concurrent loops run for DURATION:

* adders: ``lethe add "<text>"`` back to back; each text starts with a unique token
  (``soak_a<worker>_<n>``, one BM25 term) followed by a seeded sentence. A seeded 10% of adds
  are retried at once with the same text whatever the first result was (what an agent does
  after a timeout): a retry must not write a second copy;
* searchers: ``lethe search "<query>" --json`` back to back; queries are seeded words of one
  starting memory, or (30%) the token of a recent successful add (a read-your-writes probe:
  is it in the results?);
* indexers: ``lethe index`` back to back;
* hooks: the Claude Code Stop hook as Claude Code runs it: one new user + assistant exchange
  appended to a fake session's transcript JSONL (the answer holds a unique token
  ``soak_h<worker>_<n>``), then ``lethe hook stop`` with the JSON payload on stdin
  (``LETHE_SUMMARY_CMD=none``: an extractive summary, then a background reindex).

Each operation records its start, wall time (the whole process), exit status and stderr's
first line. It failed when it exited non-zero, printed a ``lethe: error:`` line (or, for a
hook, a ``lethe: hook:`` line that is not one of its status lines), was killed after
``--op-timeout`` seconds, or (search) printed something that is not a JSON list.

After DURATION the loops stop (running processes finish), background work settles (the
single-flight reindex lock is free and ``lethe index`` finds nothing new; bounded), then the
store is verified from the outside: the markdown files (split into sections here, by
``##``/``###`` lines) and the index (``entries.text`` read with a plain read-only DuckDB
connection):

* lost: a token of an add that exited cleanly (or of a hook call that did) that is missing
  from the markdown or from the index;
* duplicated: a token in more than one markdown section or more than one entry;
* failed-but-written: the token of an add (or hook call) that failed and landed anyway
  (reported apart; not an error by itself);
* a seeded sample of up to 20 expected add tokens is also looked up through
  ``lethe search TOKEN --mode bm25 --json -k 5 --read-only`` (the black-box view);
* the database opens read-only in a separate plain ``duckdb`` client process.

The children get ``LETHE_SUMMARY_CMD=none`` and a private ``LETHE_HOME`` (so ``lethe index``
registers the temporary project in a throwaway registry); everything else, the lock timeout
included, is the caller's environment. The run's exit status is 0 when it completed, whatever
it measured.
"""

from __future__ import annotations

import collections
import contextlib
import json
import math
import os
import random
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from datetime import date, timedelta
from pathlib import Path
from typing import Callable

from lethe_sql.errors import UsageError
from lethe_sql.locks import DEFAULT_TIMEOUT as DEFAULT_LOCK_TIMEOUT

DEFAULTS = {"adders": 3, "searchers": 2, "indexers": 1, "hooks": 1, "size": 200, "seed": 0, "op_timeout": 120.0}
KINDS = ("add", "add-retry", "search", "index", "hook")
RETRY_RATE = 0.10          # share of adds retried at once with the same text
PROBE_RATE = 0.30          # share of searches that ask for a recent add's token
SETTLE_TIMEOUT = 120.0     # bound on waiting for background work after the loops stop
SPOT_CHECKS = 20           # black-box BM25 look-ups of expected add tokens
MAX_LISTED = 20            # examples kept per verification list
MAX_ERRORS = 10            # distinct error lines reported

TOKEN_RE = re.compile(r"\bsoak_[ah]\d+_\d{6}\b")
_SECTION_START = re.compile(r"^#{2,3}[ \t]+")
_FENCE = re.compile(r"^[ \t]{0,3}(`{3,}|~{3,})")
# what `lethe hook stop` says on stderr when it did its job (hooks always exit 0)
HOOK_STATUS = ("recorded turn", "turn ", "no exchange", "no transcript", "no .lethe", "nested session",
               "summarising", "already recorded")


# -- words ------------------------------------------------------------------------------

SUBJECTS = ["the staging postgres", "the billing worker", "pgbouncer", "the redis cache", "the nginx ingress",
            "the celery beat schedule", "the kafka consumer group", "the terraform state", "the docker compose file",
            "the pytest suite", "the webpack build", "the grpc gateway", "the auth service", "the nightly export job",
            "the s3 upload path", "the ci pipeline", "the helm chart", "the feature flag service",
            "the search indexer", "the payments webhook", "the rate limiter", "the audit log writer"]
FACTS = ["listens on port {port}", "needs {env} set before it starts", "times out after {n} seconds under load",
         "reads its config from {path}", "was moved to {path} in the last refactor",
         "fails on Mondays because the cron runs in UTC", "must be restarted after a schema migration",
         "uses a pool of {n} connections", "is pinned to version {ver}", "breaks when {env} is empty",
         "logs to {path}", "retries {n} times with exponential backoff", "runs {n} replicas in production",
         "caches responses for {n} minutes"]
FOLLOWUPS = ["{person} confirmed it on the {day}th", "do not change it without telling {person}",
             "the fix is in {path}", "see the runbook in docs/{word}.md",
             "we chose this because the old setup leaked connections", "tests cover it in tests/test_{word}.py",
             "{person} wants a ticket before anyone touches it", "it broke the {word} dashboard once"]
PEOPLE = ["Kofi", "Ana", "Priya", "Lars", "Mei", "Diego", "Sam", "Noor"]
ENVS = ["DATABASE_URL", "REDIS_URL", "SENTRY_DSN", "LOG_LEVEL", "WORKER_CONCURRENCY", "FEATURE_FLAGS_PATH", "S3_BUCKET"]
PATHS = ["config/settings.toml", "deploy/compose.yml", "src/jobs/reconcile.py", "infra/main.tf", "ops/nginx.conf",
         "src/api/routes.py", "scripts/migrate.sh", ".github/workflows/ci.yml", "src/billing/invoice.py"]
WORDS = ["deploy", "billing", "ingest", "auth", "cache", "export", "search", "payments", "webhooks", "metrics"]
QUESTIONS = ["why does {s} keep failing", "what changed in {s}", "how do we configure {s}", "who owns {s}",
             "can you check {s} before the release"]


def sentence(rng: random.Random) -> str:
    """A seeded, realistic one- or two-clause memory about a piece of a project."""
    fill = {"port": rng.randint(1024, 9999), "env": rng.choice(ENVS), "n": rng.randint(2, 90),
            "path": rng.choice(PATHS), "ver": f"{rng.randint(1, 9)}.{rng.randint(0, 30)}.{rng.randint(0, 9)}",
            "person": rng.choice(PEOPLE), "day": rng.randint(4, 28), "word": rng.choice(WORDS)}
    subject = rng.choice(SUBJECTS)
    text = f"{subject} {rng.choice(FACTS).format(**fill)}; {rng.choice(FOLLOWUPS).format(**fill)}."
    return text[0].upper() + text[1:]


def starting_set(size: int, seed: int) -> list[tuple[date, str, str]]:
    """``size`` memories (file date, heading, body), seeded; each names its own ticket so
    no two are the same words."""
    rng = random.Random(f"{seed}:start")
    out = []
    first = date(2025, 3, 3)
    for i in range(size):
        day = first + timedelta(days=i // 8)
        heading = f"{8 + (i % 8):02d}:{rng.randint(0, 59):02d} {rng.choice(WORDS)} {rng.choice(['note', 'fix', 'decision', 'gotcha'])}"
        out.append((day, heading, f"{sentence(rng)} Ticket OPS-{1000 + i}."))
    return out


def write_starting_set(memory_dir: Path, memories: list[tuple[date, str, str]]) -> int:
    """One file per day (``# date`` then ``## heading`` sections); returns the files written."""
    by_day: dict[date, list[str]] = collections.defaultdict(list)
    for day, heading, body in memories:
        by_day[day].append(f"## {heading}\n\n{body}\n")
    memory_dir.mkdir(parents=True, exist_ok=True)
    for day, sections in by_day.items():
        (memory_dir / f"{day:%Y-%m-%d}.md").write_text(f"# {day:%Y-%m-%d}\n\n" + "\n".join(sections), encoding="utf-8")
    return len(by_day)


# -- durations, percentiles ---------------------------------------------------------------


def parse_duration(text: str) -> float:
    """``300s``, ``5m``, ``30s``, ``1h``, ``1m30s`` or a plain number of seconds."""
    raw = str(text).strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", raw):
        seconds = float(raw)
    else:
        parts = re.findall(r"(\d+(?:\.\d+)?)\s*(h|m|s)", raw)
        if not parts or re.sub(r"(\d+(?:\.\d+)?)\s*(h|m|s)", "", raw).strip():
            raise UsageError(f"soak: {text!r} is not a duration (e.g. 30s, 5m, 300)")
        seconds = sum(float(n) * {"h": 3600, "m": 60, "s": 1}[u] for n, u in parts)
    if seconds <= 0:
        raise UsageError("soak: the duration must be positive")
    return seconds


def percentile(xs: list[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default)."""
    if not xs:
        return None
    s = sorted(xs)
    pos = (len(s) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def _r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(x, nd)


# -- running lethe ----------------------------------------------------------------------


@dataclass
class Op:
    kind: str
    worker: int
    start: float              # seconds since the loops started
    seconds: float            # wall time of the whole process
    rc: int | None            # None: killed after the timeout
    stderr_first: str
    error: str | None         # why it counts as failed, None when it did not
    token: str | None = None
    pid: int | None = None
    extra: dict = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return self.error is not None


class Lethe:
    """Runs ``lethe`` processes in the project, each in its own session so a hung one can be
    killed with everything it started in the foreground (and Ctrl-C reaches only the harness)."""

    def __init__(self, exe: Path, root: Path, env: dict, op_timeout: float) -> None:
        self.exe, self.root, self.env, self.op_timeout = exe, root, env, op_timeout
        self._live: set[subprocess.Popen] = set()
        self._lock = threading.Lock()

    def run(self, args: list[str], stdin: str | None = None, timeout: float | None = None, pid: list | None = None):
        """(rc or None when killed, stdout, stderr, seconds); the process id is appended to ``pid``."""
        t = time.monotonic()
        p = subprocess.Popen([str(self.exe), *args], cwd=self.root, env=self.env, text=True,
                             stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        with self._lock:
            self._live.add(p)
        if pid is not None:
            pid.append(p.pid)
        try:
            try:
                out, err = p.communicate(stdin, timeout=timeout or self.op_timeout)
                rc = p.returncode
            except subprocess.TimeoutExpired:
                self._kill(p)
                out, err = p.communicate()
                rc = None
            except BaseException:
                self._kill(p)
                p.communicate()
                raise
        finally:
            with self._lock:
                self._live.discard(p)
        return rc, out or "", err or "", time.monotonic() - t

    @staticmethod
    def _kill(p: subprocess.Popen) -> None:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def kill_all(self) -> None:
        with self._lock:
            live = list(self._live)
        for p in live:
            self._kill(p)


def error_line(kind: str, rc: int | None, out: str, err: str, timeout: float) -> str | None:
    """Why an operation counts as failed, or None."""
    if rc is None:
        return f"timeout: killed after {timeout:g} s"
    lines = [ln.strip() for ln in err.splitlines() if ln.strip()]
    for ln in lines:
        if ln.startswith("lethe: error:"):
            return ln
        if kind == "hook" and ln.startswith("lethe: hook: ") and not ln[13:].startswith(HOOK_STATUS):
            return ln
    if rc != 0:
        said = json_error(out)  # a command run with --json says its error on stdout
        if said is not None:
            return f"lethe: error: {said}"
        if any(ln.startswith("Traceback") for ln in lines):
            return lines[-1]
        return f"exit {rc}: {lines[0] if lines else '(no stderr)'}"
    if kind == "search":
        try:
            ok = isinstance(json.loads(out), list)
        except ValueError:
            ok = False
        if not ok:
            return "search output is not a JSON list"
    return None


def json_error(out: str) -> str | None:
    """The message of ``{"error": {"message": ...}}``, what a ``--json`` command prints when it fails."""
    try:
        data = json.loads(out)
    except ValueError:
        return None
    if isinstance(data, dict) and isinstance(data.get("error"), dict):
        return str(data["error"].get("message", ""))
    return None


def _first_line(err: str) -> str:
    return next((ln.strip() for ln in err.splitlines() if ln.strip()), "")


# -- the loops --------------------------------------------------------------------------


class Soak:
    def __init__(self, lethe: Lethe, root: Path, seed: int, start_words: list[list[str]], transcripts: Path) -> None:
        self.lethe, self.root, self.seed = lethe, root, seed
        self.start_words = start_words
        self.transcripts = transcripts
        self.ops: list[Op] = []
        self.adds: dict[str, dict] = {}      # token -> {"text", "ok": [bool per attempt]}
        self.hooks: dict[str, dict] = {}     # token -> {"ok": bool, "status"}
        self.recent: collections.deque = collections.deque(maxlen=50)
        self.harness_errors: list[str] = []
        self.stop = threading.Event()
        self.t0 = time.monotonic()
        self._lock = threading.Lock()

    def _op(self, kind: str, worker: int, args: list[str], stdin: str | None = None, token: str | None = None) -> tuple[Op, str, str]:
        start = time.monotonic() - self.t0
        pid: list[int] = []
        try:
            rc, out, err, secs = self.lethe.run(args, stdin=stdin, pid=pid)
            why = error_line(kind.split("-")[0], rc, out, err, self.lethe.op_timeout)
        except OSError as exc:  # could not start a process (the machine is out of something): a failure
            rc, out, err, secs = -1, "", "", time.monotonic() - self.t0 - start
            why = f"could not start lethe: {exc}"
            time.sleep(0.5)
        op = Op(kind, worker, round(start, 3), round(secs, 4), rc, _first_line(err)[:300], why, token,
                pid[0] if pid else None)
        with self._lock:
            self.ops.append(op)
        return op, out, err

    def loop(self, body: Callable[[], None]) -> None:
        """At least one operation, then until told to stop. A bug of the harness itself is
        recorded (``harness_errors``) and the loop goes on."""
        while True:
            try:
                body()
            except Exception as exc:  # noqa: BLE001
                with self._lock:
                    self.harness_errors.append(f"{type(exc).__name__}: {exc}"[:300])
                time.sleep(0.5)
            if self.stop.is_set():
                return

    def adder(self, w: int) -> None:
        rng = random.Random(f"{self.seed}:add:{w}")
        n = 0

        def once():
            nonlocal n
            n += 1
            token = f"soak_a{w}_{n:06d}"
            text = f"{token} {sentence(rng)}"
            retry = rng.random() < RETRY_RATE
            rec = {"text": text, "ok": []}
            with self._lock:
                self.adds[token] = rec
            for kind in (("add", "add-retry") if retry else ("add",)):
                op, out, _ = self._op(kind, w, ["add", text], token=token)
                rec["ok"].append(not op.failed)
                op.extra["said"] = out.strip().split(" ")[0] if out.strip() else ""
                if not op.failed:
                    self.recent.append(token)

        self.loop(once)

    def searcher(self, w: int) -> None:
        rng = random.Random(f"{self.seed}:search:{w}")

        def once():
            recent = list(self.recent)
            probe = None
            if recent and rng.random() < PROBE_RATE:
                probe = rng.choice(recent)
                query = probe
            else:
                words = rng.choice(self.start_words)
                query = " ".join(rng.sample(words, min(len(words), rng.randint(2, 4))))
            op, out, _ = self._op("search", w, ["search", query, "--json"])
            if probe is not None:
                op.extra["probe"] = probe
                if not op.failed:
                    op.extra["probe_hit"] = any(probe in (h.get("content") or "") for h in json.loads(out))

        self.loop(once)

    def indexer(self, w: int) -> None:
        self.loop(lambda: self._op("index", w, ["index"]))

    def hook(self, w: int) -> None:
        rng = random.Random(f"{self.seed}:hook:{w}")
        session = f"soak-h{w}-{self.seed}"
        transcript = self.transcripts / f"{session}.jsonl"
        transcript.parent.mkdir(parents=True, exist_ok=True)
        n = 0

        def once():
            nonlocal n
            n += 1
            token = f"soak_h{w}_{n:06d}"
            subject = rng.choice(SUBJECTS)
            user = rng.choice(QUESTIONS).format(s=subject) + "?"
            answer = f"Checked {token}: {sentence(rng)} Nothing else needed changing."
            with open(transcript, "a", encoding="utf-8") as fh:
                for row in claude_rows(session, str(self.root), n, user, answer):
                    fh.write(json.dumps(row) + "\n")
            payload = {"session_id": session, "transcript_path": str(transcript), "cwd": str(self.root),
                       "hook_event_name": "Stop", "stop_hook_active": False}
            op, _, err = self._op("hook", w, ["hook", "stop"], stdin=json.dumps(payload), token=token)
            status = next((ln[13:] for ln in err.splitlines() if ln.startswith("lethe: hook: ")), "")
            op.extra["status"] = status[:120]
            with self._lock:
                self.hooks[token] = {"ok": not op.failed, "status": status[:120]}

        self.loop(once)


def claude_rows(session: str, cwd: str, turn: int, user: str, answer: str) -> list[dict]:
    """One Claude Code exchange as its transcript JSONL holds it: the prompt, a tool call and
    its result, the answer."""
    stamp = f"2026-01-01T{(turn // 3600) % 24:02d}:{(turn // 60) % 60:02d}:{turn % 60:02d}.000Z"
    base = {"sessionId": session, "cwd": cwd, "isSidechain": False, "timestamp": stamp, "version": "2.0.0"}
    u = f"{session}-{turn}"
    return [
        {**base, "type": "user", "uuid": f"{u}-1", "message": {"role": "user", "content": user}},
        {**base, "type": "assistant", "uuid": f"{u}-2", "message": {"role": "assistant", "content": [
            {"type": "tool_use", "id": f"{u}-t", "name": "Bash", "input": {"command": "git status"}}]}},
        {**base, "type": "user", "uuid": f"{u}-3", "message": {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": f"{u}-t", "content": "nothing to commit"}]}},
        {**base, "type": "assistant", "uuid": f"{u}-4", "message": {"role": "assistant", "content": [
            {"type": "text", "text": answer}]}},
    ]


# -- settling and verifying -----------------------------------------------------------------


def _reindex_lock_free(index_dir: Path) -> bool:
    """Whether no background ``lethe hook reindex`` holds the single-flight lock."""
    import fcntl

    lock = index_dir / ".reindex.lock"
    if not lock.exists():
        return True
    with open(lock, "a") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(fh, fcntl.LOCK_UN)
    return True


def settle(lethe: Lethe, root: Path, bound: float = SETTLE_TIMEOUT) -> dict:
    """Wait for background reindexing, then run ``lethe index`` until it finds nothing new."""
    t = time.monotonic()
    deadline = t + bound
    index_dir = root / ".lethe" / "index"
    rounds = []
    while time.monotonic() < deadline:
        while not _reindex_lock_free(index_dir) and time.monotonic() < deadline:
            time.sleep(0.2)
        rc, out, err, secs = lethe.run(["index", "--json"], timeout=max(1.0, deadline - time.monotonic()))
        rep = None
        if rc == 0:
            try:
                rep = json.loads(out)
            except ValueError:
                rep = None
        quiet = bool(rep) and not (rep.get("files_indexed") or rep.get("entries_added") or rep.get("entries_removed"))
        rounds.append({"rc": rc, "seconds": round(secs, 3), "files_indexed": (rep or {}).get("files_indexed"),
                       "entries_added": (rep or {}).get("entries_added"),
                       "error": None if rep is not None else (error_line("index", rc, out, err, lethe.op_timeout)
                                                               or "index --json printed no report")})
        if quiet and _reindex_lock_free(index_dir) and not (index_dir / ".reindex.pending").exists():
            return {"settled": True, "seconds": round(time.monotonic() - t, 2), "rounds": rounds}
        time.sleep(0.5)
    return {"settled": False, "seconds": round(time.monotonic() - t, 2), "rounds": rounds}


def markdown_sections(memory_dir: Path) -> list[tuple[str, str]]:
    """(file, section text) for every ``##``/``###`` section of every ``*.md`` under the
    memory folder; text before a file's first section is a section of its own."""
    out = []
    for f in sorted(memory_dir.rglob("*.md")):
        try:
            lines = f.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            continue
        cur: list[str] = []
        fence = None
        rel = f.relative_to(memory_dir).as_posix()
        for ln in lines:
            m = _FENCE.match(ln)
            if m:
                fence = None if fence and m.group(1)[0] == fence else (fence or m.group(1)[0])
            if fence is None and _SECTION_START.match(ln) and not m:
                if cur:
                    out.append((rel, "\n".join(cur)))
                cur = []
            cur.append(ln)
        if cur:
            out.append((rel, "\n".join(cur)))
    return out


def read_entries(db_path: Path, wait: float = 30.0) -> tuple[list[str] | None, str | None]:
    """``entries.text`` through a plain read-only DuckDB connection (retried while a writer
    holds the file), or (None, why)."""
    import duckdb

    deadline = time.monotonic() + wait
    while True:
        try:
            con = duckdb.connect(str(db_path), read_only=True)
        except duckdb.Error as exc:
            if time.monotonic() >= deadline:
                return None, str(exc).splitlines()[0]
            time.sleep(0.5)
            continue
        try:
            return [r[0] for r in con.execute("SELECT text FROM entries").fetchall()], None
        except duckdb.Error as exc:
            return None, str(exc).splitlines()[0]
        finally:
            con.close()


def _counts(texts) -> collections.Counter:
    c: collections.Counter = collections.Counter()
    for t in texts:
        c.update(set(TOKEN_RE.findall(t)))
    return c


def verify(memory_dir: Path, db_path: Path, adds: dict, hooks: dict) -> dict:
    """Lost, duplicated and failed-but-written tokens (module docstring).

    ``adds``: token -> {"ok": [bool per attempt]}; ``hooks``: token -> {"ok": bool}."""
    sections = markdown_sections(memory_dir)
    md = _counts(t for _, t in sections)
    entries, why = read_entries(db_path)
    ix = _counts(entries) if entries is not None else collections.Counter()
    expected: dict[str, tuple[str, bool]] = {}
    for tok, rec in adds.items():
        expected[tok] = ("add", any(rec["ok"]))
    for tok, rec in hooks.items():
        expected[tok] = ("hook", bool(rec["ok"]))
    lost, fbw = [], []
    for tok in sorted(expected):
        kind, ok = expected[tok]
        where = {"token": tok, "kind": kind, "in_markdown": md[tok], "in_index": ix[tok]}
        if ok and (md[tok] == 0 or (entries is not None and ix[tok] == 0)):
            lost.append(where)
        elif not ok and (md[tok] or ix[tok]):
            fbw.append(where)
    dup = [{"token": t, "kind": expected.get(t, ("?",))[0], "in_markdown": md[t], "in_index": ix[t]}
           for t in sorted(set(md) | set(ix)) if md[t] > 1 or ix[t] > 1]

    def summary(rows, kind):
        return sum(1 for r in rows if r["kind"] == kind)

    return {
        "index_readable": entries is not None, "index_error": why,
        "markdown_sections": len(sections), "index_entries": None if entries is None else len(entries),
        "expected": {"add": sum(1 for k, ok in expected.values() if k == "add" and ok),
                     "hook": sum(1 for k, ok in expected.values() if k == "hook" and ok)},
        "lost": len(lost), "lost_by_kind": {"add": summary(lost, "add"), "hook": summary(lost, "hook")},
        "lost_missing_markdown": sum(1 for r in lost if r["in_markdown"] == 0),
        "lost_missing_index": sum(1 for r in lost if r["in_index"] == 0),
        "duplicated": len(dup),
        "duplicated_in_markdown": sum(1 for r in dup if r["in_markdown"] > 1),
        "duplicated_in_index": sum(1 for r in dup if r["in_index"] > 1),
        "failed_but_written": len(fbw),
        "failed_but_written_by_kind": {"add": summary(fbw, "add"), "hook": summary(fbw, "hook")},
        "lost_examples": lost[:MAX_LISTED], "duplicated_examples": dup[:MAX_LISTED],
        "failed_but_written_examples": fbw[:MAX_LISTED],
    }


def spot_check(lethe: Lethe, adds: dict, seed: int, n: int = SPOT_CHECKS) -> dict:
    """``lethe search TOKEN --mode bm25 --json -k 5 --read-only`` for a seeded sample of
    expected add tokens: is each in its top 5?"""
    pool = sorted(t for t, rec in adds.items() if any(rec["ok"]))
    sample = random.Random(f"{seed}:spot").sample(pool, min(n, len(pool)))
    found, failed, missing = 0, 0, []
    for tok in sample:
        rc, out, err, _ = lethe.run(["search", tok, "--mode", "bm25", "--json", "-k", "5", "--read-only"])
        if error_line("search", rc, out, err, lethe.op_timeout) is not None:
            failed += 1
            continue
        if any(tok in (h.get("content") or "") for h in json.loads(out)):
            found += 1
        else:
            missing.append(tok)
    return {"n": len(sample), "found_top5": found, "search_failed": failed, "missing": missing}


def plain_duckdb_open(db_path: Path) -> dict:
    """Open the index read-only with a plain ``duckdb`` client in its own process."""
    code = ("import duckdb, sys\n"
            "con = duckdb.connect(sys.argv[1], read_only=True)\n"
            "print(con.execute('SELECT count(*) FROM entries').fetchone()[0])\n"
            "con.close()\n")
    t = time.monotonic()
    try:
        p = subprocess.run([sys.executable, "-c", code, str(db_path)], capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": "timeout after 120 s", "seconds": 120.0, "entries": None}
    ok = p.returncode == 0
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    return {"ok": ok, "error": None if ok else (lines[-1] if lines else f"exit {p.returncode}"),
            "seconds": round(time.monotonic() - t, 3), "entries": int(p.stdout.strip()) if ok else None}


# -- report ------------------------------------------------------------------------------


def _normalise(line: str, root: Path) -> str:
    line = line.replace(str(root), "<project>")
    return re.sub(r"\d+", "N", line)


def op_stats(ops: list[Op], seconds: float) -> dict:
    out = {}
    for kind in KINDS:
        mine = [o for o in ops if o.kind == kind]
        if not mine:
            continue
        d = [o.seconds for o in mine]
        failed = [o for o in mine if o.failed]
        out[kind] = {
            "attempted": len(mine), "failed": len(failed),
            "failed_locked": sum(1 for o in failed if "is locked by" in o.error),
            "failed_timeout": sum(1 for o in failed if o.rc is None),
            "ok_per_min": round(60 * (len(mine) - len(failed)) / seconds, 1) if seconds > 0 else None,
            "p50_s": _r(percentile(d, 0.5)), "p95_s": _r(percentile(d, 0.95)), "max_s": _r(max(d)),
        }
        if kind == "search":
            probes = [o for o in mine if "probe" in o.extra and not o.failed]
            out[kind]["probes"] = len(probes)
            out[kind]["probe_hits"] = sum(1 for o in probes if o.extra.get("probe_hit"))
        if kind in ("add", "add-retry"):
            said = collections.Counter(o.extra.get("said", "") for o in mine if not o.failed)
            out[kind]["said"] = dict(sorted(said.items()))
    return out


_HOLDER = re.compile(r"is locked by .*?\(PID (\d+)\)")


def lock_holders(ops: list[Op]) -> dict:
    """For each lock failure, what the process named as the holder was: one of this run's
    operations (by kind) or not (``other``: a background ``lethe hook reindex``, or a process
    outside the run)."""
    by_pid = {o.pid: o.kind for o in ops if o.pid is not None}
    out: collections.Counter = collections.Counter()
    for o in ops:
        m = _HOLDER.search(o.error or "")
        if m:
            out[by_pid.get(int(m.group(1)), "other")] += 1
    return dict(out.most_common())


def distinct_errors(ops: list[Op], root: Path) -> list[dict]:
    seen: dict[str, dict] = {}
    for o in sorted(ops, key=lambda o: o.start):
        if not o.failed:
            continue
        key = _normalise(o.error, root)
        if key not in seen:
            seen[key] = {"error": o.error.replace(str(root), "<project>"), "count": 0, "kinds": {}, "first_at_s": o.start}
        e = seen[key]
        e["count"] += 1
        e["kinds"][o.kind] = e["kinds"].get(o.kind, 0) + 1
    return list(seen.values())[:MAX_ERRORS]


def _proc_cpu(skip_under: Path) -> dict | None:
    """CPU seconds so far of every process on the machine (Linux /proc), keyed by (pid, start
    time), with a short command: what else was running. Left out: this process and any
    process whose working folder is under ``skip_under`` (this run's ``lethe`` processes)."""
    proc = Path("/proc")
    if not (proc / "self" / "stat").exists():
        return None
    tck = os.sysconf("SC_CLK_TCK")
    me, skip = os.getpid(), str(skip_under)
    out = {}
    for d in proc.iterdir():
        if not d.name.isdigit() or int(d.name) == me:
            continue
        try:
            stat = (d / "stat").read_text()
            rest = stat[stat.rfind(")") + 2:].split()
            cpu = (int(rest[11]) + int(rest[12])) / tck
            try:
                if os.readlink(d / "cwd").startswith(skip):
                    continue
            except OSError:
                pass
            argv = [a for a in (d / "cmdline").read_bytes().split(b"\0") if a][:4]
        except (OSError, ValueError, IndexError):
            continue
        # a short, safe name: the program and its first arguments, never anything that looks like a value
        words = [a.decode(errors="replace") for a in argv]
        words = [Path(words[0]).name if words else stat[stat.find("(") + 1: stat.rfind(")")]] + [
            w[:60] for w in words[1:] if not re.search(r"[={}@:]", w)]
        out[(int(d.name), rest[19])] = (cpu, " ".join(words)[:120])
    return out


def _cpu_now() -> dict | None:
    """The machine's busy CPU seconds so far (/proc/stat), and this process's own and its
    waited-for children's (the run's ``lethe`` processes)."""
    import resource

    try:
        with open("/proc/stat") as fh:
            f = [int(x) for x in fh.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    tck = os.sysconf("SC_CLK_TCK")
    busy = (f[0] + f[1] + f[2] + sum(f[5:8])) / tck  # user nice system irq softirq steal
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"busy": busy, "self": me.ru_utime + me.ru_stime, "children": kids.ru_utime + kids.ru_stime}


def machine_cpu(before: dict | None, after: dict | None, wall: float) -> dict | None:
    """Who used the machine's CPU during the loops, in CPU seconds."""
    if before is None or after is None:
        return None
    d = {k: after[k] - before[k] for k in before}
    return {"busy_s": round(d["busy"], 1), "capacity_s": round((os.cpu_count() or 1) * wall, 1),
            "run_lethe_s": round(d["children"], 1), "harness_s": round(d["self"], 1),
            "rest_s": round(d["busy"] - d["children"] - d["self"], 1),
            "note": "rest: every other process, this run's detached background reindexes included"}


def other_cpu(before: dict | None, after: dict | None, wall: float) -> dict | None:
    """What the machine's other processes used during the loops (CPU seconds)."""
    if before is None or after is None:
        return None
    used = []
    for key, (cpu, cmd) in after.items():
        delta = cpu - before.get(key, (0.0, ""))[0]
        if delta >= 0.05:
            used.append((delta, key[0], cmd))
    used.sort(reverse=True)
    cores = os.cpu_count() or 1
    return {"cpu_s": round(sum(u[0] for u in used), 1), "capacity_cpu_s": round(cores * wall, 1),
            "top": [{"pid": pid, "cpu_s": round(d, 1), "command": cmd} for d, pid, cmd in used[:8]],
            "note": "processes alive at the end of the loops, other than this run's; ones that started and "
                    "ended during the loops are not seen"}


def _tested_git(exe: Path) -> dict | None:
    """The git state of the package the tested ``lethe`` runs (from its script's interpreter)."""
    try:
        first = exe.read_text(errors="replace").splitlines()[0]
    except (OSError, IndexError):
        return None
    if not first.startswith("#!"):
        return None
    py = first[2:].strip().split()[0]
    try:
        p = subprocess.run([py, "-c", "import lethe_sql, os; print(os.path.dirname(lethe_sql.__file__))"],
                           capture_output=True, text=True, timeout=30)
        where = p.stdout.strip()
        if p.returncode != 0 or not where:
            return None
    except (OSError, subprocess.SubprocessError):
        return None
    from . import meta

    c = meta.checkout(Path(where))
    if c is None:
        return {"package": where, "commit": None}
    return {"package": where, "commit": c["commit"], "dirty": c["dirty"]}


def _db_bytes(db_path: Path) -> int:
    return sum(p.stat().st_size for p in (db_path, db_path.with_name(db_path.name + ".wal")) if p.exists())


def resolve_lethe(path: str | None) -> Path:
    if path:
        exe = Path(path).expanduser()
        if not exe.is_file():
            found = shutil.which(path)
            if not found:
                raise UsageError(f"soak: no lethe executable at {path}")
            exe = Path(found)
        return exe.resolve()
    beside = Path(sys.executable).parent / "lethe"
    if beside.is_file():
        return beside
    found = shutil.which("lethe")
    if not found:
        raise UsageError("soak: no `lethe` beside this Python or on PATH; pass --lethe PATH")
    return Path(found)


def command_line(duration: str, opts: dict) -> str:
    parts = ["lethe", "bench", "soak", str(duration)]
    for flag, value in opts.items():
        if value is None or value is False:
            continue
        parts += [flag] if value is True else [flag, str(value)]
    return shlex.join(parts)


def run(duration: str, *, adders: int = 3, searchers: int = 2, indexers: int = 1, hooks: int = 1,
        size: int = 200, seed: int = 0, lethe: str | None = None, workdir: Path | None = None,
        keep: bool = False, op_timeout: float = 120.0, command: str = "",
        log: Callable[[str], None] = lambda m: None) -> dict:
    """One soak run; returns the result (``interrupted`` is True after Ctrl-C)."""
    from . import meta

    seconds = parse_duration(duration)
    for name, n in (("adders", adders), ("searchers", searchers), ("indexers", indexers), ("hooks", hooks)):
        if n < 0:
            raise UsageError(f"soak: --{name} must be 0 or more")
    if adders + searchers + indexers + hooks == 0:
        raise UsageError("soak: nothing to run (every loop count is 0)")
    if size < 1:
        raise UsageError("soak: --size must be at least 1")
    exe = resolve_lethe(lethe)
    machine_start = meta.machine()
    started = meta.now_iso()
    if workdir is not None:
        Path(workdir).mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="lethe-soak-", dir=workdir))
    root = tmp / "project"
    root.mkdir()
    env = dict(os.environ, LETHE_SUMMARY_CMD="none", LETHE_HOME=str(tmp / "lethe-home"), PYTHONUNBUFFERED="1")
    env.pop("LETHE_HOOK_NESTED", None)
    runner = Lethe(exe, root, env, op_timeout)
    db_path = root / ".lethe" / "index" / "lethe.duckdb"
    result: dict = {
        "dataset": "soak", "protocol": "soak", "command": command, "started": started,
        "duration_s": seconds, "seed": seed,
        "params": {"adders": adders, "searchers": searchers, "indexers": indexers, "hooks": hooks, "size": size,
                   "op_timeout_s": op_timeout, "retry_rate": RETRY_RATE, "probe_rate": PROBE_RATE,
                   "settle_timeout_s": SETTLE_TIMEOUT},
        "lethe": {"path": str(exe)}, "harness_git": meta.git_state(),
        "env": {"LETHE_SUMMARY_CMD": "none", "LETHE_HOME": "<temporary>",
                "LETHE_LOCK_TIMEOUT": os.environ.get("LETHE_LOCK_TIMEOUT", f"(default: {DEFAULT_LOCK_TIMEOUT:g})")},
        "machine": machine_start,
        "interrupted": False, "completed": False,
    }
    state = {"sigint": 0}
    soak: Soak | None = None
    old_handler = None
    in_main = threading.current_thread() is threading.main_thread()

    def on_sigint(signum, frame):  # noqa: ARG001
        state["sigint"] += 1
        result["interrupted"] = True
        if soak is not None:
            soak.stop.set()
        if state["sigint"] > 1:
            raise KeyboardInterrupt
        log("Ctrl-C: stopping the loops (running processes finish); Ctrl-C again to skip verification")

    if in_main:
        old_handler = signal.signal(signal.SIGINT, on_sigint)
    try:
        rc, out, err, _ = runner.run(["--version"])
        result["lethe"]["version"] = out.strip() if rc == 0 else None
        result["lethe"]["git"] = _tested_git(exe)
        rc, out, err, secs = runner.run(["init"])
        if rc != 0:
            raise UsageError(f"soak: `lethe init` failed: {_first_line(err) or rc}")
        memories = starting_set(size, seed)
        files = write_starting_set(root / ".lethe" / "memory", memories)
        rc, out, err, idx_secs = runner.run(["index", "--json"])
        if rc != 0:
            raise UsageError(f"soak: indexing the starting set failed: {json_error(out) or _first_line(err) or rc}")
        entries0, why = read_entries(db_path)
        result["setup"] = {"init_s": round(secs, 3), "start_memories": size, "start_files": files,
                           "start_index_s": round(idx_secs, 3)}
        result["index_start"] = {"entries": None if entries0 is None else len(entries0), "bytes": _db_bytes(db_path),
                                 "error": why}
        log(f"project {root}: {size} memories in {files} files indexed in {idx_secs:.1f} s")
        if state["sigint"]:
            raise KeyboardInterrupt
        start_words = [[w for w in re.findall(r"[a-z]{4,}", body.lower())] or ["postgres"] for _, _, body in memories]
        soak = Soak(runner, root, seed, start_words, tmp / "claude" / "projects" / "soak")
        threads = []
        for kind, n, fn in (("add", adders, soak.adder), ("search", searchers, soak.searcher),
                            ("index", indexers, soak.indexer), ("hook", hooks, soak.hook)):
            for w in range(n):
                th = threading.Thread(target=fn, args=(w,), name=f"soak-{kind}-{w}", daemon=True)
                threads.append(th)
        cpu_before, machine_before = _proc_cpu(tmp), _cpu_now()
        soak.t0 = time.monotonic()
        for th in threads:
            th.start()
        log(f"loops started: {adders} adders, {searchers} searchers, {indexers} indexers, {hooks} hooks for {seconds:g} s")
        loads, next_log = [], soak.t0 + 30
        end = soak.t0 + seconds
        while not soak.stop.is_set():
            now = time.monotonic()
            if now >= end:
                break
            soak.stop.wait(min(5.0, end - now))
            try:
                loads.append(os.getloadavg()[0])
            except OSError:
                pass
            if time.monotonic() >= next_log:
                next_log += 30
                ops = list(soak.ops)
                log(f"{time.monotonic() - soak.t0:5.0f} s: {len(ops)} operations, {sum(o.failed for o in ops)} failed")
        soak.stop.set()
        log("stopping: waiting for running processes to finish")
        for th in threads:
            while th.is_alive():
                th.join(1.0)
        loop_s = time.monotonic() - soak.t0
        result["other_processes"] = other_cpu(cpu_before, _proc_cpu(tmp), loop_s)
        result["machine_cpu"] = machine_cpu(machine_before, _cpu_now(), loop_s)
        result["loop_wall_s"] = round(loop_s, 2)
        result["load_1min_during"] = ({"min": round(min(loads), 2), "mean": round(sum(loads) / len(loads), 2),
                                       "max": round(max(loads), 2), "samples": len(loads)} if loads else None)
        result["ops"] = op_stats(soak.ops, loop_s)
        result["errors"] = distinct_errors(soak.ops, root)
        result["lock_holders"] = lock_holders(soak.ops)
        result["harness_errors"] = soak.harness_errors[:MAX_ERRORS]
        result["op_records"] = [asdict(o) for o in sorted(soak.ops, key=lambda o: o.start)]
        log(f"loops done in {loop_s:.1f} s: {len(soak.ops)} operations; settling")
        result["settle"] = settle(runner, root)
        log("verifying")
        v = verify(root / ".lethe" / "memory", db_path, soak.adds, soak.hooks)
        v["bm25_spot_check"] = spot_check(runner, soak.adds, seed)
        result["verification"] = v
        result["duckdb_readonly"] = plain_duckdb_open(db_path)
        result["index_end"] = {"entries": v["index_entries"], "bytes": _db_bytes(db_path), "error": v["index_error"]}
        result["completed"] = not result["interrupted"]
    except KeyboardInterrupt:
        result["interrupted"] = True
        runner.kill_all()
        if soak is not None:
            soak.stop.set()
            if "ops" not in result:
                ops = list(soak.ops)
                loop_s = time.monotonic() - soak.t0
                result["loop_wall_s"] = round(loop_s, 2)
                result["ops"] = op_stats(ops, loop_s)
                result["errors"] = distinct_errors(ops, root)
                result["lock_holders"] = lock_holders(ops)
                result["op_records"] = [asdict(o) for o in sorted(ops, key=lambda o: o.start)]
        log("interrupted: partial report")
    finally:
        runner.kill_all()
        # the `lethe serve` the loops' commands started (their private LETHE_HOME) goes too
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run([str(exe), "serve", "--stop"], env=env, capture_output=True, timeout=60)
        if in_main and old_handler is not None:
            signal.signal(signal.SIGINT, old_handler)
        result["finished"] = meta.now_iso()
        result["machine_end"] = {"load_avg_1_5_15": meta.machine().get("load_avg_1_5_15")}
        if keep:
            result["kept"] = str(tmp)
            log(f"kept the project at {root}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return result


# -- output -------------------------------------------------------------------------------


def _fmt(x) -> str:
    return "-" if x is None else (f"{x:.3f}" if isinstance(x, float) else str(x))


def summary_lines(r: dict) -> list[str]:
    p = r["params"]
    lines = [f"soak {r['duration_s']:g} s: {p['adders']} adders, {p['searchers']} searchers, {p['indexers']} indexers, "
             f"{p['hooks']} hooks; {p['size']} starting memories; seed {r['seed']}"
             + ("  (INTERRUPTED: partial)" if r.get("interrupted") else "")]
    for kind, s in (r.get("ops") or {}).items():
        lines.append(f"  {kind:<10} attempted {s['attempted']:>5}  failed {s['failed']:>5} "
                     f"(locked {s['failed_locked']}, timeout {s['failed_timeout']})  "
                     f"p50 {_fmt(s['p50_s'])} s  p95 {_fmt(s['p95_s'])} s  max {_fmt(s['max_s'])} s")
    v = r.get("verification")
    if v:
        lines.append(f"  lost {v['lost']} (add {v['lost_by_kind']['add']}, hook {v['lost_by_kind']['hook']}; "
                     f"not in markdown {v['lost_missing_markdown']}, not in index {v['lost_missing_index']})  "
                     f"duplicated {v['duplicated']}  failed-but-written {v['failed_but_written']}")
        sc = v.get("bm25_spot_check") or {}
        lines.append(f"  bm25 spot check: {sc.get('found_top5')}/{sc.get('n')} in top 5"
                     + (f" ({sc['search_failed']} searches failed)" if sc.get("search_failed") else ""))
    if r.get("index_start") or r.get("index_end"):
        lines.append(f"  index entries: start {(r.get('index_start') or {}).get('entries')}, "
                     f"end {(r.get('index_end') or {}).get('entries')}")
    if r.get("settle"):
        lines.append(f"  settled: {r['settle']['settled']} in {r['settle']['seconds']} s")
    if r.get("duckdb_readonly"):
        d = r["duckdb_readonly"]
        lines.append(f"  plain duckdb read-only open: {'ok' if d['ok'] else 'FAILED: ' + str(d['error'])}")
    mc = r.get("machine_cpu")
    if mc:
        lines.append(f"  machine CPU during the loops: {mc['busy_s']} of {mc['capacity_s']} s busy: this run's lethe "
                     f"processes {mc['run_lethe_s']}, harness {mc['harness_s']}, rest {mc['rest_s']}")
    oc = r.get("other_processes")
    if oc:
        lines.append(f"  other processes used {oc['cpu_s']} of {oc['capacity_cpu_s']} CPU s during the loops"
                     + (": " + ", ".join(f"{t['command'][:40]} {t['cpu_s']}" for t in oc["top"][:3]) if oc["top"] else ""))
    if r.get("harness_errors"):
        lines.append(f"  harness errors (bugs of the soak itself): {r['harness_errors']}")
    if r.get("lock_holders"):
        lines.append("  lock failures by what held the lock: " + ", ".join(f"{k} {n}" for k, n in r["lock_holders"].items()))
    for e in r.get("errors") or []:
        lines.append(f"  error x{e['count']} {dict(e['kinds'])}: {e['error'][:200]}")
    return lines


def markdown(r: dict) -> str:
    m, p = r["machine"], r["params"]
    lt = r.get("lethe") or {}
    git = lt.get("git") or r.get("harness_git") or {}
    L = ["# lethe bench: soak (many agents, one store)", "",
         f"- command: `{r['command']}`",
         f"- started {r['started']}, finished {r.get('finished')}; loops ran {r.get('loop_wall_s')} s "
         f"(asked {r['duration_s']:g} s)" + ("; **interrupted (partial report)**" if r.get("interrupted") else ""),
         f"- lethe: {lt.get('version')} at `{lt.get('path')}`; commit {git.get('commit')}"
         + (" (with local changes)" if git.get("dirty") else ""),
         f"- machine: {m.get('processor', '?')}, {m.get('cpu_count', '?')} cores, {m.get('memory_gib', '?')} GiB, "
         f"{m.get('platform')}; Python {m.get('python')}, duckdb {m.get('duckdb')}, onnxruntime {m.get('onnxruntime')}",
         f"- load average (1, 5, 15 min): at start {m.get('load_avg_1_5_15')}, at end "
         f"{(r.get('machine_end') or {}).get('load_avg_1_5_15')}; 1-min load during the loops "
         + (f"min {r['load_1min_during']['min']}, mean {r['load_1min_during']['mean']}, max {r['load_1min_during']['max']}"
            if r.get("load_1min_during") else "-"),
         f"- environment of the `lethe` processes: LETHE_SUMMARY_CMD=none, a private LETHE_HOME, "
         f"LETHE_LOCK_TIMEOUT {r['env']['LETHE_LOCK_TIMEOUT']}",
         f"- loops: {p['adders']} adders, {p['searchers']} searchers, {p['indexers']} indexers, {p['hooks']} hooks; "
         f"{p['size']} starting memories in {(r.get('setup') or {}).get('start_files')} files; seed {r['seed']}; "
         f"{int(p['retry_rate'] * 100)}% of adds retried with the same text; per-operation timeout {p['op_timeout_s']:g} s",
         "", "## Operations", "",
         "Every operation is a whole `lethe` process; times are wall seconds (process start to exit), "
         "over all attempts, failed ones included.", "",
         "| kind | attempted | failed | locked | timeout | ok/min | p50 s | p95 s | max s |",
         "|---|---|---|---|---|---|---|---|---|"]
    for kind, s in (r.get("ops") or {}).items():
        L.append(f"| {kind} | {s['attempted']} | {s['failed']} | {s['failed_locked']} | {s['failed_timeout']} | "
                 f"{s['ok_per_min']} | {_fmt(s['p50_s'])} | {_fmt(s['p95_s'])} | {_fmt(s['max_s'])} |")
    s = (r.get("ops") or {}).get("search")
    if s and s.get("probes"):
        L += ["", f"Read-your-writes probes (searches for a recent successful add's token, default mode): "
                  f"{s['probe_hits']} of {s['probes']} found it."]
    for kind in ("add", "add-retry"):
        said = ((r.get("ops") or {}).get(kind) or {}).get("said")
        if said:
            L.append(f"`lethe {kind.replace('-retry', '')}` answers{' on retry' if 'retry' in kind else ''} (ok ones): "
                     + ", ".join(f"{k or '(nothing)'} {n}" for k, n in said.items()) + ".")
    v = r.get("verification")
    if v:
        sc = v.get("bm25_spot_check") or {}
        L += ["", "## Verification", "",
              f"After the loops: settled {r['settle']['settled']} in {r['settle']['seconds']} s "
              f"({len(r['settle']['rounds'])} `lethe index` round(s)).", "",
              "| what | count |", "|---|---|",
              f"| adds that succeeded (expected in markdown and index) | {v['expected']['add']} |",
              f"| hook calls that succeeded | {v['expected']['hook']} |",
              f"| **lost** (add / hook) | **{v['lost']}** ({v['lost_by_kind']['add']} / {v['lost_by_kind']['hook']}) |",
              f"| lost: not in the markdown | {v['lost_missing_markdown']} |",
              f"| lost: not in the index | {v['lost_missing_index']} |",
              f"| **duplicated** (in markdown / in index) | **{v['duplicated']}** ({v['duplicated_in_markdown']} / "
              f"{v['duplicated_in_index']}) |",
              f"| failed but written (add / hook) | {v['failed_but_written']} ({v['failed_but_written_by_kind']['add']} / "
              f"{v['failed_but_written_by_kind']['hook']}) |",
              f"| markdown sections (a file's title block counts as one) / index entries at the end | {v['markdown_sections']} / {v['index_entries']} |",
              f"| index entries at start / end | {(r.get('index_start') or {}).get('entries')} / "
              f"{(r.get('index_end') or {}).get('entries')} |",
              f"| index bytes (db + wal) at start / end | {(r.get('index_start') or {}).get('bytes')} / "
              f"{(r.get('index_end') or {}).get('bytes')} |",
              f"| BM25 spot check through `lethe search --mode bm25 -k 5` | {sc.get('found_top5')} of {sc.get('n')} found"
              + (f", {sc['search_failed']} searches failed" if sc.get("search_failed") else "") + " |"]
        d = r.get("duckdb_readonly") or {}
        L.append(f"| plain `duckdb.connect(path, read_only=True)` afterwards | "
                 + ("ok" if d.get("ok") else f"FAILED: {d.get('error')}") + " |")
        for name in ("lost", "duplicated", "failed_but_written"):
            ex = v.get(f"{name}_examples")
            if ex:
                L += ["", f"{name.replace('_', ' ')} (first {len(ex)}): "
                      + ", ".join(f"{e['token']} (md {e['in_markdown']}, index {e['in_index']})" for e in ex)]
    if r.get("lock_holders"):
        L += ["", "Lock failures by what held the lock (the PID the error names, matched to this run's operations; "
                  "`other`: a background `lethe hook reindex` or a process outside the run): "
              + ", ".join(f"{k} {n}" for k, n in r["lock_holders"].items()) + "."]
    if r.get("harness_errors"):
        L += ["", "Errors of the harness itself (its bugs, not lethe's): " + "; ".join(r["harness_errors"])]
    if r.get("errors"):
        L += ["", "## First distinct errors (numbers in a line ignored when grouping)", "", "| count | kinds | first at s | line |", "|---|---|---|---|"]
        for e in r["errors"]:
            line = e["error"].replace("|", "\\|")
            L.append(f"| {e['count']} | {', '.join(f'{k} {n}' for k, n in e['kinds'].items())} | {e['first_at_s']} | `{line}` |")
    mc, oc = r.get("machine_cpu"), r.get("other_processes")
    if mc or oc:
        L += ["", "## What else was running during the loops", ""]
    if mc:
        L += [f"The machine's CPUs were busy {mc['busy_s']} of {mc['capacity_s']} CPU seconds: this run's `lethe` "
              f"processes {mc['run_lethe_s']}, the harness {mc['harness_s']}, the rest {mc['rest_s']} ({mc['note']}).", ""]
    if oc:
        L += [f"Processes of others used {oc['cpu_s']} CPU seconds of the machine's {oc['capacity_cpu_s']} "
              f"({oc['note']}):", "", "| pid | CPU s | command |", "|---|---|---|"]
        L += [f"| {t['pid']} | {t['cpu_s']} | `{t['command']}` |" for t in oc["top"]]
    L += ["", "Failed: exit status != 0, a `lethe: error:` line (for a hook, a `lethe: hook:` line that is not a "
          "status line), killed after the per-operation timeout, or (search) output that is not a JSON list. "
          "Lost: the unique token of an operation that succeeded is missing from the markdown sections or from "
          "`entries.text`. Duplicated: a token in more than one section or entry. Per-operation records: "
          "`ops.jsonl` beside this report."]
    return "\n".join(L) + "\n"


def write(r: dict, out: Path) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    records = r.get("op_records") or []
    slim = {k: v for k, v in r.items() if k != "op_records"}
    paths = {"results": out / "results.json", "report": out / "report.md", "ops": out / "ops.jsonl"}
    paths["results"].write_text(json.dumps(slim, indent=2, default=str) + "\n")
    paths["report"].write_text(markdown(slim))
    paths["ops"].write_text("".join(json.dumps(o, separators=(",", ":")) + "\n" for o in records))
    return paths


def cli_main(duration: str, *, adders, searchers, indexers, hooks, size, seed, lethe, out, json_out, workdir,
             keep, op_timeout, quiet) -> int:
    """What ``lethe bench soak`` does; returns the exit status (0: the run completed,
    130: interrupted, the partial report written)."""
    from .meta import Log

    command = command_line(duration, {"--adders": adders, "--searchers": searchers, "--indexers": indexers,
                                      "--hooks": hooks, "--size": size, "--seed": seed,
                                      "--op-timeout": op_timeout if op_timeout != DEFAULTS["op_timeout"] else None,
                                      "--lethe": lethe, "--workdir": workdir, "--keep": keep,
                                      "--out": out, "--json": json_out})
    log = Log(not quiet)
    r = run(duration, adders=adders, searchers=searchers, indexers=indexers, hooks=hooks, size=size, seed=seed,
            lethe=lethe, workdir=workdir, keep=keep, op_timeout=op_timeout, command=command, log=log)
    if out is not None:
        paths = write(r, Path(out))
        if not json_out:
            print("wrote " + ", ".join(str(p) for p in paths.values()))
    if json_out:
        print(json.dumps({k: v for k, v in r.items() if k != "op_records"}, indent=2, default=str))
    else:
        print("\n".join(summary_lines(r)))
    return 130 if r.get("interrupted") else 0
