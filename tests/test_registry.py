"""The global registry: $LETHE_HOME/projects.json, written atomically under a lock."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from conftest import write


@pytest.fixture()
def home(tmp_path, monkeypatch):
    h = tmp_path / "lethe-home"
    monkeypatch.setenv("LETHE_HOME", str(h))
    monkeypatch.delenv("LETHE_DISABLE_GLOBAL_REGISTRY", raising=False)
    monkeypatch.delenv("LETHE_AUTO_REGISTER", raising=False)
    return h


def _project(path):
    (path / ".lethe" / "memory").mkdir(parents=True)
    return path


def cli(args, env=None):
    from lethe_sql.cli import app

    r = CliRunner().invoke(app, args, env=env)
    return r


def test_add_list_remove_prune(home, tmp_path):
    from lethe_sql.registry import Registry

    reg = Registry()
    assert reg.path == home / "projects.json" and reg.projects() == []
    a = _project(tmp_path / "Payments")
    b = _project(tmp_path / "infra")
    pa, new = reg.add(a)
    assert new and pa.slug == "payments" and pa.root == str(a.resolve()) and pa.registered_at.endswith("+00:00")
    assert reg.add(a) == (pa, False)  # stable: same root, same slug, same time
    reg.add(b)
    data = json.loads((home / "projects.json").read_text())
    assert data["version"] == 1 and [p["slug"] for p in data["projects"]] == ["infra", "payments"]
    assert set(data["projects"][0]) == {"slug", "root", "registered_at"}  # never content
    assert reg.find("payments") == pa and reg.find(str(a)) == pa
    assert reg.remove(str(b)).slug == "infra"
    with pytest.raises(Exception, match="no registered project 'infra'"):
        reg.remove("infra")
    c = _project(tmp_path / "old")
    reg.add(c)
    import shutil

    shutil.rmtree(c)
    assert [p.slug for p in reg.prune()] == ["old"]
    assert [p.slug for p in reg.projects()] == ["payments"]
    assert not list(home.glob("*.tmp"))


def test_slug_collisions_and_reserved_names_get_a_hash(home, tmp_path):
    from lethe_sql.registry import Registry

    reg = Registry()
    one = reg.add(_project(tmp_path / "a" / "api"))[0]
    two = reg.add(_project(tmp_path / "b" / "api"))[0]
    mem = reg.add(_project(tmp_path / "memory"))[0]
    digits = reg.add(_project(tmp_path / "2024 notes"))[0]
    assert one.slug == "api" and two.slug.startswith("api_") and len(two.slug) == 10
    assert mem.slug.startswith("memory_") and digits.slug == "p_2024_notes"
    # the slug does not depend on registration order: it comes from the root
    assert Registry().add(tmp_path / "b" / "api")[0].slug == two.slug


def test_not_a_project_and_broken_file_are_one_line_errors(home, tmp_path):
    from lethe_sql.registry import Registry

    with pytest.raises(Exception, match="not a lethe project"):
        Registry().add(tmp_path)
    write(home / "projects.json", "{not json")
    r = cli(["projects", "list"])
    assert r.exit_code == 1
    assert "projects.json is not a valid lethe registry" in r.output and "Traceback" not in r.output


def test_concurrent_writers_lose_nothing(home, tmp_path):
    roots = [_project(tmp_path / f"p{i}") for i in range(8)]
    code = "import sys; from lethe_sql.registry import Registry; Registry().add(sys.argv[1])"
    procs = [subprocess.Popen([sys.executable, "-c", code, str(r)], env=dict(os.environ)) for r in roots]
    assert all(p.wait(timeout=120) == 0 for p in procs)
    from lethe_sql.registry import Registry

    assert sorted(p.slug for p in Registry().projects()) == sorted(f"p{i}" for i in range(8))


def test_index_registers_unless_told_not_to(home, tmp_path, monkeypatch):
    from lethe_sql.registry import Registry

    a = _project(tmp_path / "auto")
    r = cli(["--root", str(a), "index", "--json"])
    assert r.exit_code == 0, r.output
    assert [p.slug for p in Registry().projects()] == ["auto"]

    b = _project(tmp_path / "flagged")
    assert cli(["--root", str(b), "index", "--no-register"]).exit_code == 0
    c = _project(tmp_path / "configured")
    write(c / ".lethe" / "config.toml", "[search]\ntop_k = 5\nauto_register = false\n")
    assert cli(["--root", str(c), "index"]).exit_code == 0
    d = _project(tmp_path / "disabled")
    assert cli(["--root", str(d), "index"], env={"LETHE_DISABLE_GLOBAL_REGISTRY": "1"}).exit_code == 0
    assert [p.slug for p in Registry().projects()] == ["auto"]


def test_projects_cli(home, tmp_path):
    a = _project(tmp_path / "alpha")
    r = cli(["projects", "add", str(a), "--json"])
    assert r.exit_code == 0 and json.loads(r.output)["slug"] == "alpha"
    rows = json.loads(cli(["projects", "list", "--json"]).output)
    assert [(x["slug"], x["root"], x["indexed"]) for x in rows] == [("alpha", str(a.resolve()), False)]
    assert "alpha" in cli(["projects", "list"]).output
    bad = cli(["projects", "remove", "zzz"])
    assert bad.exit_code == 2 and "no registered project 'zzz'" in bad.output
    assert cli(["projects", "remove", "alpha"]).exit_code == 0
    assert "no projects registered" in cli(["projects", "list"]).output
    nothing = cli(["search", "x", "--all"])
    assert nothing.exit_code == 2 and "no projects registered" in nothing.output
