"""`lethe config get|set|unset|list` over .lethe/config.toml."""

from __future__ import annotations

import json
import subprocess
import tomllib

import pytest
from typer.testing import CliRunner

from conftest import BIN, write


@pytest.fixture()
def root(tmp_path, monkeypatch):
    r = tmp_path / "proj"
    (r / ".lethe" / "memory").mkdir(parents=True)
    for k in ("LETHE_TOP_K", "LETHE_JUDGE", "LETHE_AUTO_REGISTER", "LETHE_DISABLE_GLOBAL_REGISTRY", "LETHE_RIF_ALPHA"):
        monkeypatch.delenv(k, raising=False)
    return r


def cli(root, *args, env=None):
    from lethe_sql.cli import app

    return CliRunner().invoke(app, ["--root", str(root), "config", *args], env=env)


def test_set_get_unset_round_trip(root):
    from lethe_sql.settings import load_settings

    assert cli(root, "get", "top_k").output.strip() == "10"
    r = cli(root, "set", "top_k", "20")
    assert r.exit_code == 0, r.output
    assert cli(root, "set", "judge", "none").exit_code == 0
    assert cli(root, "get", "judge").output.strip() == "none"
    assert cli(root, "set", "rerank_threshold", "0.4").exit_code == 0
    assert cli(root, "set", "rerank_threshold", "none").exit_code == 0
    assert cli(root, "set", "judge", "late-interaction").exit_code == 0
    assert cli(root, "set", "rif", "off").exit_code == 0
    assert cli(root, "set", "rif_alpha", "0.25").exit_code == 0
    assert cli(root, "set", "auto_register", "false").exit_code == 0
    cfg = root / ".lethe" / "config.toml"
    data = tomllib.loads(cfg.read_text())
    assert data == {"top_k": 20, "judge": "late-interaction", "rif": False, "rif_alpha": 0.25, "auto_register": False}
    s = load_settings(root, env={})
    assert (s.top_k, s.judge, s.rif, s.rif_alpha) == (20, "late-interaction", False, 0.25)
    assert cli(root, "get", "top_k").output.strip() == "20"
    got = json.loads(cli(root, "get", "rif_alpha", "--json").output)
    assert got["value"] == 0.25 and got["source"] == "config" and got["env"] == "LETHE_RIF_ALPHA"
    assert cli(root, "unset", "top_k").exit_code == 0
    assert cli(root, "set", "rif_alpha", "default").exit_code == 0
    assert "top_k" not in tomllib.loads(cfg.read_text()) and "rif_alpha" not in tomllib.loads(cfg.read_text())
    from lethe_sql.registry import auto_register_enabled

    assert auto_register_enabled(root, env={}) is False


def test_other_keys_tables_and_comments_are_kept(root):
    cfg = write(root / ".lethe" / "config.toml",
                "# my settings\ntop_k = 5  # few\n\n[search]\n# the pool\nk_shallow = 40\ncustom_thing = \"keep me\"\n\n"
                "[rif]\nrif_rate = 0.2\n")
    assert cli(root, "set", "k_shallow", "50").exit_code == 0
    assert cli(root, "set", "embed_model", "models/my model").exit_code == 0
    text = cfg.read_text()
    assert text.startswith("# my settings\ntop_k = 5  # few\n")
    assert "# the pool\nk_shallow = 50\ncustom_thing = \"keep me\"" in text and "[rif]\nrif_rate = 0.2" in text
    data = tomllib.loads(text)
    assert data["search"] == {"k_shallow": 50, "custom_thing": "keep me"} and data["embed_model"] == "models/my model"
    assert data["embed_model"] == "models/my model" and text.index("embed_model") < text.index("[search]")
    assert not list(cfg.parent.glob("*.tmp"))


@pytest.mark.parametrize("args, message", [
    (("set", "topk", "3"), "unknown config key 'topk'; `lethe config list` shows the keys"),
    (("set", "top_k", "ten"), "top_k takes an integer, got 'ten'"),
    (("set", "top_k", "0"), "top_k must be at least 1, got 0"),
    (("set", "rif", "maybe"), "rif takes true or false, got 'maybe'"),
    (("set", "rif_alpha", "nan"), "rif_alpha takes a number, got 'nan'"),
    (("set", "judge", "gpt"), "judge takes one of auto, cross-encoder, late-interaction, none, got 'gpt'"),
    (("get", "nope"), "unknown config key 'nope'; `lethe config list` shows the keys"),
])
def test_bad_keys_and_values_are_one_line_errors(root, args, message):
    r = cli(root, *args)
    assert r.exit_code == 2
    assert r.output.strip().splitlines() == [f"lethe: error: {message}"]
    assert not (root / ".lethe" / "config.toml").exists()


def test_invalid_toml_is_reported_not_rewritten(root):
    cfg = write(root / ".lethe" / "config.toml", "top_k = = 3\n")
    r = cli(root, "set", "top_k", "4")
    assert r.exit_code == 2 and "is not valid TOML" in r.output and cfg.read_text() == "top_k = = 3\n"


def test_list_shows_sources_and_environment_wins(root):
    write(root / ".lethe" / "config.toml", "[search]\ntop_k = 7\n")
    rows = {r["key"]: r for r in json.loads(cli(root, "list", "--json", env={"LETHE_JUDGE": "none"}).output)}
    assert {"top_k", "judge", "n_clusters", "rerank_threshold", "auto_register", "embed_model", "rerank_model"} <= set(rows)
    assert (rows["top_k"]["value"], rows["top_k"]["source"]) == (7, "config")
    assert (rows["judge"]["value"], rows["judge"]["source"]) == ("none", "env LETHE_JUDGE")
    assert (rows["n_clusters"]["value"], rows["n_clusters"]["source"]) == (30, "default")
    assert all(r["description"] for r in rows.values())
    text = cli(root, "list").output
    assert "rerank_threshold" in text and "(unset)" in text
    r = cli(root, "set", "judge", "auto", env={"LETHE_JUDGE": "none"})
    assert r.exit_code == 0 and "LETHE_JUDGE is set in the environment" in r.output


def test_help_documents_the_environment():
    p = subprocess.run([str(BIN / "lethe"), "--help"], capture_output=True, text=True)
    out = " ".join(p.stdout.split())
    for word in ("LETHE_HOME", "LETHE_DISABLE_GLOBAL_REGISTRY", "LETHE_AUTO_REGISTER", "lethe config list"):
        assert word in out
    for cmd in ("projects", "config", "sql"):
        assert cmd in p.stdout


def test_every_key_is_documented():
    from conftest import REPO
    from lethe_sql.config import DESCRIPTIONS, keys

    doc = (REPO / "docs" / "config.md").read_text(encoding="utf-8")
    for key in keys():
        assert f"| `{key}` |" in doc, key
        assert DESCRIPTIONS.get(key), key


def test_model_paths_from_the_config_take_effect(root, tmp_path):
    import os

    assert cli(root, "set", "embed_model", "models/none-here").exit_code == 0
    env = {k: v for k, v in os.environ.items() if k not in ("LETHE_EMBED_MODEL",)}
    env["HOME"] = str(tmp_path / "home")
    p = subprocess.run([str(BIN / "lethe"), "--root", str(root), "status", "--json"], env=env,
                       capture_output=True, text=True, timeout=120)
    missing = json.loads(p.stdout)["embedder"]["missing"] if p.returncode == 0 else p.stderr
    assert str(root / "models" / "none-here") in missing


BAD_SETTINGS = [
    # (environment, config.toml, command, the one line expected on stderr; {cfg}: the file)
    ({"LETHE_TOP_K": "abc"}, None, ["search", "port"], "lethe: error: LETHE_TOP_K takes an integer, got 'abc'"),
    ({"LETHE_THREADS": "abc"}, None, ["index"], "lethe: error: LETHE_THREADS takes an integer, got 'abc'"),
    ({"LETHE_MAX_FILE_BYTES": "abc"}, None, ["index"],
     "lethe: error: LETHE_MAX_FILE_BYTES takes an integer, got 'abc'"),
    ({}, "top_k = = 3\n", ["search", "port"],
     "lethe: error: {cfg} is not valid TOML (Invalid value (at line 1, column 9)); fix it by hand"),
    ({}, '[search]\ntop_k = "abc"\n', ["search", "port"], "lethe: error: top_k in {cfg} takes an integer, got 'abc'"),
    # the ranges: the same rules and texts as `lethe config set`
    ({"LETHE_TOP_K": "0"}, None, ["search", "port"], "lethe: error: LETHE_TOP_K must be at least 1, got 0"),
    ({}, "depth = 5000\n", ["explain", "port"], "lethe: error: depth in {cfg} must be at most 1000, got 5000"),
    ({}, 'judge = "gpt"\n', ["add", "a memory"],
     "lethe: error: judge in {cfg} takes one of auto, cross-encoder, late-interaction, none, got 'gpt'"),
    ({"LETHE_THREADS": "-2"}, None, ["index"], "lethe: error: LETHE_THREADS must be at least 0, got -2"),
    ({"LETHE_LOCK_TIMEOUT": "soon"}, None, ["status"], "lethe: error: LETHE_LOCK_TIMEOUT takes a number, got 'soon'"),
]


@pytest.mark.parametrize("env, toml, args, line", BAD_SETTINGS, ids=[
    "LETHE_TOP_K=abc", "LETHE_THREADS=abc", "LETHE_MAX_FILE_BYTES=abc", "config-not-toml", "config-top_k=abc",
    "LETHE_TOP_K=0", "config-depth=5000", "config-judge=gpt", "LETHE_THREADS=-2", "LETHE_LOCK_TIMEOUT=soon"])
def test_bad_settings_are_one_line_and_exit_2_never_a_traceback(tmp_path, cli_env, env, toml, args, line):
    root = tmp_path / "p"
    write(root / ".lethe" / "memory" / "2026-11-01.md", "## a\nthe staging port is 5433\n")
    cfg = root / ".lethe" / "config.toml"
    if toml is not None:
        write(cfg, toml)
    bad_env = {**cli_env, **env}
    p = subprocess.run([str(BIN / "lethe"), "--root", str(root), *args], env=bad_env, capture_output=True, text=True,
                       timeout=300)
    assert (p.returncode, p.stderr.splitlines()) == (2, [line.format(cfg=cfg)]), p.stderr
    # whatever the environment and the config say, --help and --version work
    everything_bad = {**cli_env, "LETHE_TOP_K": "abc", "LETHE_THREADS": "abc", "LETHE_MAX_FILE_BYTES": "abc",
                      "LETHE_LOCK_TIMEOUT": "soon", **env}
    for flag in ("--help", "--version"):
        ok = subprocess.run([str(BIN / "lethe"), "--root", str(root), flag], env=everything_bad, cwd=root,
                            capture_output=True, text=True, timeout=300)
        assert ok.returncode == 0 and ok.stderr == "" and ok.stdout, (flag, ok.stderr)
