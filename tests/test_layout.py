"""The package's layout, read from the source with ``ast`` (nothing is imported).

* ``lethe_sql`` is the core; ``lethe_sql.cli`` the command line (typer); ``lethe_sql.agents``
  the agent integration (hooks, mining, install, MCP, enrichment).
* No import cycle among lethe_sql's modules at module level: the graph of top-level
  imports (``import``/``from ... import`` statements outside any function or class; an
  import under ``if TYPE_CHECKING`` counts too) is acyclic. Imports inside functions are
  allowed to close a cycle: they run when the function runs, after every module has loaded,
  and are how the CLI keeps ``lethe --help`` from loading DuckDB or the models.
* The core, anywhere in a module (function-local imports included), imports neither typer,
  click, sqlglot nor the CLI package, with the exceptions listed in ``ALLOWED``. The agents
  never import the CLI package either.
* ``lethe bench`` without the harness installed is one line and exit status 2.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parent.parent / "lethe_sql"
CLI, AGENTS = "lethe_sql.cli", "lethe_sql.agents"
FORBIDDEN_IN_CORE = ("typer", "click", "sqlglot", CLI)

#: (core module, what it may import that the core otherwise may not), each with its reason
ALLOWED = {
    ("lethe_sql.federation", "sqlglot"),  # federation: sqlglot qualifies sql/ text; being rewritten
    ("lethe_sql.entry", CLI),  # the console script: runs the CLI when the service did not answer
}


def module_name(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def modules() -> dict[str, Path]:
    """Every module of lethe_sql (``udfs``, ``sql`` and ``migrations`` are mapped from folders
    beside the package: ``udfs`` is walked from there)."""
    found = {module_name(p): p for p in PKG.rglob("*.py")}
    udfs = PKG.parent / "udfs"
    for p in udfs.glob("*.py"):
        found["lethe_sql.udfs" + ("" if p.stem == "__init__" else "." + p.stem)] = p
    return found


def _resolve(mod: str, is_pkg: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports(mod: str, path: Path, *, top_level: bool) -> set[str]:
    """The modules ``mod`` imports: all of them, or only those imported at module level."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    is_pkg = path.name == "__init__.py"
    nodes = list(_top_level(tree.body)) if top_level else list(ast.walk(tree))
    out: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(mod, is_pkg, node)
            out.add(target)
            out.update(f"{target}.{a.name}" for a in node.names)  # `from . import x` imports module x
    return out


def _top_level(body):
    """The statements that run when the module loads (into if/try/with blocks, not into defs or classes)."""
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        yield node
        for field in ("body", "orelse", "finalbody", "handlers"):
            yield from _top_level(getattr(node, field, []) or [])


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def _ancestor(package: str, mod: str) -> bool:
    """A module's own packages: loaded before it, so importing them closes no cycle."""
    return mod.startswith(package + ".")


def _with_packages(names: set[str]) -> set[str]:
    """Importing ``a.b.c`` runs ``a`` and ``a.b`` first."""
    return {".".join(n.split(".")[:k]) for n in names for k in range(1, n.count(".") + 2)}


def graph() -> dict[str, set[str]]:
    mods = modules()
    return {m: {i for i in _with_packages(imports(m, p, top_level=True))
                if i in mods and i != m and not _ancestor(i, m)}
            for m, p in mods.items()}


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for n in sorted(edges.get(m, ())):
            if state.get(n) == 1:
                return stack[stack.index(n):] + [n]
            if n not in state and (found := visit(n)):
                return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(edges):
        if m not in state and (found := visit(m)):
            return found
    return None


def test_the_walk_sees_the_packages():
    mods = modules()
    assert {"lethe_sql.store", "lethe_sql.cli.app", "lethe_sql.cli.common", "lethe_sql.agents.hooks",
            "lethe_sql.udfs.embed"} <= mods.keys()
    assert not any(_within(m, "lethe_sql.bench") for m in mods)  # the harness is its own distribution


def test_no_import_cycle_at_module_level():
    cycle = find_cycle(graph())
    assert cycle is None, " -> ".join(cycle)


def test_the_cycle_check_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def core_violations() -> list[str]:
    bad = []
    for m, p in modules().items():
        if _within(m, CLI):
            continue
        forbidden = (CLI,) if _within(m, AGENTS) else FORBIDDEN_IN_CORE
        for target in sorted(imports(m, p, top_level=False)):
            for f in forbidden:
                if _within(target, f) and (m, f) not in ALLOWED:
                    bad.append(f"{m} imports {target}")
    return sorted(set(bad))


def test_the_core_imports_no_cli_typer_click_or_sqlglot():
    assert core_violations() == []


def test_every_exception_is_still_needed():
    """An exception nobody uses any more is removed from ALLOWED."""
    mods = modules()
    for m, f in ALLOWED:
        assert any(_within(t, f) for t in imports(m, mods[m], top_level=False)), (m, f)


def test_sub_apps_never_import_the_app():
    mods = modules()
    for m, p in mods.items():
        if _within(m, CLI) and m not in (CLI, f"{CLI}.app", f"{CLI}.__main__", f"{CLI}.service"):
            seen = {i for i in imports(m, p, top_level=False) if not _ancestor(i, m)}
            assert not {f"{CLI}.app", CLI} & seen, m


@pytest.mark.slow
def test_lethe_bench_without_the_harness_says_how_to_install_it(tmp_path):
    code = ("import sys; sys.modules['lethe_bench'] = None; sys.argv = ['lethe', 'bench', 'locomo', 'x']; "
            "from lethe_sql.cli import main; main()")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert p.returncode == 2
    assert p.stdout == ""
    assert p.stderr.count("\n") == 1 and "pip install -e ./bench" in p.stderr, p.stderr
