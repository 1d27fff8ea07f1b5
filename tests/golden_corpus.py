"""The fixed corpus of the golden tests (tests/test_golden_sql.py): 16 hand-written memories
in four dated memory files (one session each), indexed through the real path
(``MemoryStore.index``: markdown parsing, FTS and context tables, the real embedder, the
token index, revision detection). Ids are content hashes, so they are fixed by the text;
dates come from the file names and the heading times. One revision is declared by a
marker; others may be detected, and the goldens pin what detection found.

Changing a word here changes ids and scores: rewrite the goldens
(``LETHE_UPDATE_GOLDEN=1 pytest tests/test_golden_sql.py``) and review the diff."""

from __future__ import annotations

from pathlib import Path

from lethe_sql.markdown import content_id

# (label, file, heading, text); the label only names a memory in the golden files
MEMORIES = [
    ("pg-port-old", "2025-03-03.md", "09:00 database",
     "Staging Postgres listens on port 5432; the app reads DATABASE_URL from the environment."),
    ("deploy-days", "2025-03-03.md", "09:20 deploys",
     "We deploy on Tuesdays and Thursdays through the blue-green pipeline."),
    ("redis-ttl-old", "2025-03-03.md", "10:05 cache",
     "Redis caches user sessions with a 300 second TTL."),
    ("ci-flaky", "2025-03-03.md", "11:40 ci",
     "The reconcile test is flaky because it depends on the timezone."),
    ("pg-port-new", "2025-03-10.md", "14:00 database",
     "Staging Postgres moved to port 5433; 5432 is now the system instance."),
    ("search-rrf", "2025-03-10.md", "14:30 search",
     "The search service ranks results with BM25 and dense vectors fused by reciprocal rank."),
    ("uploads", "2025-03-10.md", "15:10 uploads",
     "Uploads are stored in the S3 bucket acme-uploads, with a lifecycle rule after 90 days."),
    ("api-limit", "2025-03-10.md", "16:00 api",
     "The public API is rate limited to 100 requests per minute per token."),
    ("deploy-merge", "2025-03-17.md", "09:00 deploys",
     "Deploys happen on every merge to main; the Tuesday and Thursday windows are gone."),
    ("gpu", "2025-03-17.md", "09:45 gpu",
     "Ranking models train overnight on two A100 GPUs."),
    ("redis-ttl-new", "2025-03-17.md", "10:30 cache",
     "Redis session TTL raised to 900 seconds after login complaints."),
    ("vpn", "2025-03-17.md", "13:00 vpn",
     "Deploying to production needs the office VPN switched on."),
    ("ci-fixed", "2025-04-01.md", "10:00 ci",
     "The timezone bug in the reconcile test was fixed by pinning TZ=UTC in CI."),
    ("backups", "2025-04-01.md", "10:20 backups",
     "Nightly Postgres backups run at 02:00 and the replica lags behind during them."),
    ("onboarding", "2025-04-01.md", "11:00 onboarding",
     "New engineers get access to staging after the security training."),
    ("search-dense", "2025-04-01.md", "11:30 search",
     "Search results in the dense list use cosine similarity of normalised MiniLM vectors."),
]

#: declared revisions: (new label, old label), written as a marker in the newer section
DECLARED = [("deploy-merge", "deploy-days")]

TEXT = {label: text for label, _, _, text in MEMORIES}
IDS = {label: content_id(text) for label, text in TEXT.items()}
LABELS = {i: label for label, i in IDS.items()}


def write_files(memory_dir: Path) -> None:
    marks = {new: old for new, old in DECLARED}
    files: dict[str, list[str]] = {}
    for label, name, heading, text in MEMORIES:
        section = f"## {heading}\n"
        if label in marks:
            section += f"<!-- lethe supersedes={IDS[marks[label]]} -->\n"
        files.setdefault(name, []).append(section + text + "\n")
    memory_dir.mkdir(parents=True, exist_ok=True)
    for name, sections in files.items():
        (memory_dir / name).write_text(f"# {name[:-3]}\n\n" + "\n".join(sections), encoding="utf-8")


def build(root: Path, embedder):
    """An indexed store of the corpus at ``root`` (open, writable)."""
    from lethe_sql import MemoryStore

    store = MemoryStore(root, embedder=embedder)
    write_files(store.memory_dir)
    store.index()
    return store, LABELS
