"""``lethe install codex``: wire lethe into Codex.

What it changes, all under ``$CODEX_HOME`` (default ``~/.codex``):

* ``config.toml``: two blocks between marker comments, nothing else. TOML puts
  every key written after a ``[table]`` header into that table, so the top-level
  ``notify`` program (``lethe hook codex-notify``, called by Codex after each
  turn with a JSON payload: it records a summary like the Claude Code stop hook)
  goes in a block at the top of the file, before the first table. When the file
  already sets its own ``notify``, lethe leaves it alone and says so. A second block,
  at the end of the file, registers ``lethe mcp`` as the MCP server
  ``[mcp_servers.lethe]`` (``--no-mcp`` leaves it out). A second
  run replaces lethe's own blocks and nothing else; ``--uninstall`` removes them.
* ``skills/lethe-recall/SKILL.md`` and ``skills/lethe-recall-global/SKILL.md``:
  the recall skills. Assumption: Codex discovers skills as
  ``$CODEX_HOME/skills/<name>/SKILL.md`` (a folder per skill holding a SKILL.md
  with ``name`` / ``description`` front matter), the layout it shares with
  Claude Code's skills. The same text is also printed by ``lethe install codex
  --print-skill`` for pasting into ``AGENTS.md`` where skills are unavailable.

The file is parsed with ``tomllib`` before and after the edit: an unreadable
``config.toml`` is reported and left untouched, and nothing is written unless the
result parses.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from ..errors import UsageError
from .mine import codex_home

BEGIN = "# >>> lethe (managed by `lethe install codex`; edits here are replaced) >>>"
END = "# <<< lethe <<<"
_BLOCK = re.compile(r"\n?^# >>> lethe \(managed by .*?>>>\n.*?^# <<< lethe <<<(?:\n\n|\n|\Z)", re.M | re.S)
SKILLS = ("recall", "recall-global")


@dataclass
class InstallReport:
    config: str
    changed: bool
    notify: bool
    skills: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def skill_text(name: str) -> str:
    return (resources.files("lethe_sql") / "skills" / name / "SKILL.md").read_text(encoding="utf-8")


def _strip_blocks(text: str) -> str:
    return _BLOCK.sub("", text)


def _load(text: str, what: str) -> dict:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{what} is not valid TOML ({exc}); fix it first, nothing was changed") from None


def render_config(
    text: str, *, lethe_cmd: str = "lethe", uninstall: bool = False, mcp: bool = True
) -> tuple[str, bool, list[str]]:
    """``config.toml`` text -> (new text, whether lethe's notify is set, notes)."""
    notes: list[str] = []
    base = _strip_blocks(text)
    if uninstall:
        return base, False, notes
    theirs = _load(base, "config.toml")
    new, notify = base, False
    if "notify" in theirs:
        notes.append("config.toml already sets `notify`; left as is (lethe's turn summaries are off for Codex)")
    else:
        block = f'{BEGIN}\nnotify = ["{lethe_cmd}", "hook", "codex-notify"]\n{END}\n'
        new, notify = block + ("\n" if base else "") + base, True  # the blank line belongs to the block
    if mcp:
        if "lethe" in (theirs.get("mcp_servers") or {}):
            notes.append("config.toml already has [mcp_servers.lethe]; left as is")
        else:
            # a table goes last: keys after a [table] header belong to it
            new += f'\n{BEGIN}\n[mcp_servers.lethe]\ncommand = "{lethe_cmd}"\nargs = ["mcp"]\n{END}\n'
    _load(new, "the edited config.toml")
    return new, notify, notes


def install_codex(
    *, uninstall: bool = False, skills: bool = True, mcp: bool = True, lethe_cmd: str = "lethe"
) -> InstallReport:
    home = codex_home()
    cfg = home / "config.toml"
    old = cfg.read_text(encoding="utf-8") if cfg.exists() else ""
    _load(old, str(cfg))
    new, notify, notes = render_config(old, lethe_cmd=lethe_cmd, uninstall=uninstall, mcp=mcp)
    changed = new != old
    if changed:
        from ..store import _atomic_write

        home.mkdir(parents=True, exist_ok=True)
        _atomic_write(cfg, new.encode("utf-8"))
    report = InstallReport(str(cfg), changed, notify, notes=notes)
    for name in SKILLS if skills else ():
        dest = home / "skills" / f"lethe-{name}" / "SKILL.md"
        if uninstall:
            if dest.exists():
                dest.unlink()
                try:
                    dest.parent.rmdir()
                except OSError:
                    pass
            continue
        text = re.sub(r"^name: .*$", f"name: lethe-{name}", skill_text(name), count=1, flags=re.M)
        dest.parent.mkdir(parents=True, exist_ok=True)
        if not dest.exists() or dest.read_text(encoding="utf-8") != text:
            dest.write_text(text, encoding="utf-8")
        report.skills.append(str(dest))
    return report
