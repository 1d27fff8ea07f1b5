"""`lethe bench soak`: the verifier on a hand-made project, the failure rules, and one short
run end to end through the CLI (its structure, not its numbers)."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from lethe_bench import soak
from lethe_sql.errors import UsageError

LETHE = Path(sys.executable).parent / "lethe"


def test_parse_duration():
    assert soak.parse_duration("300s") == soak.parse_duration("5m") == soak.parse_duration("300") == 300
    assert soak.parse_duration("30s") == 30 and soak.parse_duration("1m30s") == 90 and soak.parse_duration("1h") == 3600
    for bad in ("abc", "0s", "5 minutes", "-3s", ""):
        with pytest.raises(UsageError):
            soak.parse_duration(bad)


def test_starting_set_is_seeded_and_distinct(tmp_path):
    a, b = soak.starting_set(50, 0), soak.starting_set(50, 0)
    assert a == b and a != soak.starting_set(50, 1)
    assert len({body for _, _, body in a}) == 50
    assert soak.write_starting_set(tmp_path, a) == 7  # 8 a day
    assert len(soak.markdown_sections(tmp_path)) == 50 + 7  # each file's "# date" title is text before a section


def _project(tmp_path, sections: list[str], entries: list[str]):
    mem = tmp_path / "memory"
    mem.mkdir()
    (mem / "2026-01-01.md").write_text("# 2026-01-01\n\n" + "\n".join(f"## 10:0{i}\n\n{s}\n" for i, s in enumerate(sections)))
    db = tmp_path / "lethe.duckdb"
    con = duckdb.connect(str(db))
    con.execute("CREATE TABLE entries (id VARCHAR, text VARCHAR)")
    con.executemany("INSERT INTO entries VALUES (?, ?)", [[str(i), t] for i, t in enumerate(entries)])
    con.close()
    return mem, db


def test_verify_reports_exactly_the_duplicated_and_the_missing_token(tmp_path):
    ok, dup, gone, failed, hook = "soak_a0_000001", "soak_a0_000002", "soak_a1_000001", "soak_a2_000001", "soak_h0_000001"
    mem, db = _project(
        tmp_path,
        sections=[f"{ok} postgres port", f"{dup} redis cache", f"{dup} redis cache", f"{failed} landed anyway",
                  f"Asked: why?\nDone: Checked {hook}: fixed."],
        entries=[f"{ok} postgres port", f"{dup} redis cache", f"{failed} landed anyway", f"Asked: why? Done: Checked {hook}: fixed."],
    )
    adds = {ok: {"ok": [True]}, dup: {"ok": [False, True]}, gone: {"ok": [True]}, failed: {"ok": [False]}}
    v = soak.verify(mem, db, adds, {hook: {"ok": True}})
    assert v["index_readable"] and v["index_entries"] == 4
    assert [e["token"] for e in v["lost_examples"]] == [gone] and v["lost"] == 1
    assert v["lost_examples"][0] == {"token": gone, "kind": "add", "in_markdown": 0, "in_index": 0}
    assert [e["token"] for e in v["duplicated_examples"]] == [dup] and v["duplicated"] == 1
    assert (v["duplicated_in_markdown"], v["duplicated_in_index"]) == (1, 0)
    assert [e["token"] for e in v["failed_but_written_examples"]] == [failed] and v["failed_but_written"] == 1
    assert v["expected"] == {"add": 3, "hook": 1}


def test_verify_counts_a_token_missing_from_the_index_only(tmp_path):
    hook, add = "soak_h1_000003", "soak_a0_000009"
    mem, db = _project(tmp_path, sections=[f"Done: {hook}", f"{add} x"], entries=[f"{add} x", f"{add} y"])
    v = soak.verify(mem, db, {add: {"ok": [True]}}, {hook: {"ok": True}})
    assert v["lost_examples"] == [{"token": hook, "kind": "hook", "in_markdown": 1, "in_index": 0}]
    assert (v["lost_missing_markdown"], v["lost_missing_index"]) == (0, 1)
    assert v["duplicated_examples"] == [{"token": add, "kind": "add", "in_markdown": 1, "in_index": 2}]


def test_markdown_sections_ignore_headings_in_code_fences(tmp_path):
    (tmp_path / "a.md").write_text("intro\n## one\ntext\n```\n## not a section\n```\n### two\nmore\n")
    assert [t.splitlines()[0] for _, t in soak.markdown_sections(tmp_path)] == ["intro", "## one", "### two"]


def test_error_line_rules():
    lock = "lethe: error: /p/.lethe/index/lethe.duckdb is locked by python3 (PID 7); it holds the database for writing."
    assert soak.error_line("add", 1, "", lock + "\n", 120) == lock
    assert soak.error_line("add", 0, "added 0123456789abcdef\n", "", 120) is None
    assert soak.error_line("index", None, "", "", 120) == "timeout: killed after 120 s"
    assert soak.error_line("index", 0, "", "lethe: warning: something\n", 120) is None
    assert soak.error_line("search", 0, "[]", "", 120) is None
    assert soak.error_line("search", 0, "no memories found", "", 120) == "search output is not a JSON list"
    said = json.dumps({"error": {"message": "it is locked", "kind": "database_locked"}})  # `search --json` failing
    assert soak.error_line("search", 1, said, "", 120) == "lethe: error: it is locked"
    assert soak.error_line("search", 2, "", "Traceback (most recent call last):\n  ...\nValueError: boom\n", 120) == "ValueError: boom"
    assert soak.error_line("hook", 0, "", "lethe: hook: recorded turn 3 of s in .lethe/memory/x.md\n", 120) is None
    assert soak.error_line("hook", 0, "", "lethe: hook: turn 3 of s was already recorded\n", 120) is None
    assert soak.error_line("hook", 0, "", "lethe: hook: database is locked\n", 120) == "lethe: hook: database is locked"


def test_a_hung_process_is_killed_with_what_it_started(tmp_path):
    fake = tmp_path / "lethe"
    fake.write_text("#!/bin/sh\nsleep 300 &\nsleep 300\n")  # a child holding stdout open too
    fake.chmod(0o755)
    rc, out, err, _ = soak.Lethe(fake, tmp_path, dict(os.environ), op_timeout=0.5).run(["index"])
    assert rc is None and soak.error_line("index", rc, out, err, 0.5) == "timeout: killed after 0.5 s"


def test_lock_holders_name_the_kind_of_operation_holding_the_lock():
    lock = "lethe: error: x is locked by /usr/bin/python3 (PID {}); it holds the database for writing."
    ops = [soak.Op("index", 0, 0.0, 1.0, 0, "", None, pid=11),
           soak.Op("add", 0, 0.5, 9.0, 1, "", lock.format(11), pid=12),
           soak.Op("search", 0, 0.6, 9.0, 1, "", lock.format(12), pid=13),
           soak.Op("search", 1, 0.7, 9.0, 1, "", lock.format(99), pid=14)]
    assert soak.lock_holders(ops) == {"index": 1, "add": 1, "other": 1}
    errors = soak.distinct_errors(ops, Path("/p"))
    assert len(errors) == 1 and errors[0]["count"] == 3 and errors[0]["kinds"] == {"add": 1, "search": 2}


def test_percentile():
    assert soak.percentile([], 0.5) is None
    assert soak.percentile([3.0], 0.95) == 3.0
    assert soak.percentile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5


def _env(tmp_path):
    return dict(os.environ, HOME=str(tmp_path / "home"), LETHE_CACHE=str(tmp_path / "cache"), PYTHONUNBUFFERED="1")


def _cmd(tmp_path, duration, *extra):
    return [str(LETHE), "bench", "soak", duration, "--adders", "1", "--searchers", "1", "--indexers", "0",
            "--hooks", "1", "--size", "12", "--seed", "3", "--workdir", str(tmp_path / "work"), *extra]


@pytest.mark.slow
def test_soak_end_to_end(tmp_path):
    out = tmp_path / "out"
    p = subprocess.run(_cmd(tmp_path, "4s", "--out", str(out), "--json", "--quiet"), capture_output=True, text=True,
                       env=_env(tmp_path), timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    r = json.loads(p.stdout)
    assert r["dataset"] == "soak" and r["completed"] and not r["interrupted"]
    assert r["command"].startswith("lethe bench soak 4s --adders 1 --searchers 1 --indexers 0 --hooks 1 --size 12")
    assert r["params"]["size"] == 12 and r["index_start"]["entries"] == 12
    assert {"add", "search", "hook"} <= set(r["ops"]) and "index" not in r["ops"]
    for kind, s in r["ops"].items():
        assert s["attempted"] >= 1 and 0 <= s["failed"] <= s["attempted"]
        assert 0 < s["p50_s"] <= s["p95_s"] <= s["max_s"]
    v = r["verification"]
    for key in ("lost", "duplicated", "failed_but_written", "lost_missing_markdown", "lost_missing_index"):
        assert isinstance(v[key], int) and v[key] >= 0
    assert v["index_readable"] and r["index_end"]["entries"] >= 12
    assert r["settle"]["settled"] and r["duckdb_readonly"]["ok"]
    assert r["machine"]["cpu_count"] and r["lethe"]["version"].startswith("lethe-sql")
    assert isinstance(r["errors"], list)
    saved = json.loads((out / "results.json").read_text())
    assert saved["ops"] == r["ops"] and "op_records" not in saved
    report = (out / "report.md").read_text()
    assert r["command"] in report and "| add |" in report and "lost" in report
    records = [json.loads(ln) for ln in (out / "ops.jsonl").read_text().splitlines()]
    assert len(records) == sum(s["attempted"] for s in r["ops"].values())
    assert {"kind", "start", "seconds", "rc", "stderr_first", "error"} <= set(records[0])
    assert not list((tmp_path / "work").iterdir())  # the temporary project is gone


@pytest.mark.slow
def test_soak_ctrl_c_gives_a_partial_report(tmp_path):
    out = tmp_path / "out"
    p = subprocess.Popen(_cmd(tmp_path, "10m", "--out", str(out)), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=_env(tmp_path))
    try:
        for line in p.stderr:
            if "loops started" in line:
                break
        p.send_signal(signal.SIGINT)
        stdout, _ = p.communicate(timeout=600)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130
    r = json.loads((out / "results.json").read_text())
    assert r["interrupted"] and not r["completed"] and r["loop_wall_s"] < 600
    assert "INTERRUPTED" in stdout and "interrupted (partial report)" in (out / "report.md").read_text()
    assert not list((tmp_path / "work").iterdir())
