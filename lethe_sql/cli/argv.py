"""Command-line words that open with a dash and a space are text, never options.

A memory is often a bullet point: ``lethe add "- use pnpm, not npm"``. Click reads any
word that opens with a dash as an option and stops with "No such option: -". No option
of ``lethe`` has a space after its dash, so such a word is text: ``text_args`` moves it
behind a ``--`` at the end of the line (where the parser reads only arguments), unless it
is the value of the option before it (``--heading "- notes"``). A line that already holds
a ``--`` is left as typed.
"""

from __future__ import annotations

from ..client import dash_text


def text_args(argv: list[str]) -> list[str]:
    """``argv`` with its dash-and-space words behind a ``--`` (module docstring)."""
    if "--" in argv or not any(dash_text(a) for a in argv):
        return argv
    valued = _valued_options(argv)
    move = [k for k, a in enumerate(argv) if dash_text(a) and not (k and argv[k - 1] in valued)]
    if not move:
        return argv
    moved = set(move)
    return [a for k, a in enumerate(argv) if k not in moved] + ["--"] + [argv[k] for k in move]


def _valued_options(argv: list[str]) -> set[str]:
    """The names of the options that take a value, of ``lethe`` and of each (sub)command
    that ``argv`` names."""
    import typer.main

    from .app import app

    cmd = typer.main.get_command(app)  # typer's own copy of click: read by attribute
    out: set[str] = set()

    def take(c) -> None:
        for p in c.params:
            if p.param_type_name == "option" and not p.is_flag and not p.count:
                out.update(p.opts)
                out.update(p.secondary_opts)

    take(cmd)
    for a in argv:
        sub = getattr(cmd, "commands", {}).get(a)
        if sub is not None:
            cmd = sub
            take(cmd)
    return out
