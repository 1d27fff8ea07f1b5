"""The built wheel carries sql/, migrations/, udfs/ and the sample, and `lethe` runs from it."""

import json
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from conftest import REPO

pytestmark = pytest.mark.slow


def sh(cmd, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kw)
    assert p.returncode == 0, f"{cmd} failed:\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}"
    return p


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("wheel")
    dist = tmp / "dist"
    sh([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(dist), str(REPO)])
    (wheel,) = dist.glob("lethe_sql-*.whl")
    venv = tmp / "venv"
    sh([sys.executable, "-m", "venv", str(venv)])
    py = venv / "bin" / "python"
    sh([str(py), "-m", "pip", "install", "--no-deps", "--no-index", "--quiet", str(wheel)])
    # Dependencies come from this test run's environment, but not its editable lethe_sql:
    # a bare path line does not run the editable finder's .pth in that folder.
    site = Path(sh([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip())
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv, wheel


def test_wheel_contains_the_resource_folders(fresh_venv):
    import zipfile

    _, wheel = fresh_venv
    names = zipfile.ZipFile(wheel).namelist()
    for expected in [
        "lethe_sql/sql/bm25.sql",
        "lethe_sql/migrations/001_initial.sql",
        "lethe_sql/udfs/embed.py",
        "lethe_sql/bench/__init__.py",
    ]:
        assert expected in names
    assert any(n.startswith("lethe_sql/sample/memory/") and n.endswith(".md") for n in names)


def test_lethe_runs_from_the_wheel_outside_the_checkout(fresh_venv, tmp_path, cli_env):
    venv, _ = fresh_venv
    lethe = str(venv / "bin" / "lethe")
    work = tmp_path / "elsewhere"
    work.mkdir()
    where = sh([str(venv / "bin" / "python"), "-c",
                "import lethe_sql, lethe_sql.resources as r; print(lethe_sql.__file__); print(r.resource_dir('sql'))"],
               cwd=work).stdout.split()
    assert all(str(venv) in w for w in where), where
    sh([lethe, "init"], cwd=work, env=cli_env)
    sh([lethe, "add", "The wheel install found its SQL macros."], cwd=work, env=cli_env)
    hits = json.loads(sh([lethe, "search", "wheel macros", "--json"], cwd=work, env=cli_env).stdout)
    assert hits[0]["content"].endswith("The wheel install found its SQL macros.")
    demo = sh([lethe, "demo", "--top-k", "1"], cwd=work, env=cli_env).stdout
    assert "indexed" in demo and " 1. [" in demo
