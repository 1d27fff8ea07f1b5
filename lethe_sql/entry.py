"""The ``lethe`` executable: hand the command to the running service, else run it here.

Only the standard library is imported before the service answers (``client.py``); a
command the service does not run, or any command when none answers, goes to the full
CLI (``cli.py``) in this process.
"""

from __future__ import annotations

import os
import sys


def main() -> None:
    argv = sys.argv[1:]
    from . import client

    if any(client.dash_text(a) for a in argv):
        from .cli.app import text_args  # "- a bullet point" is text (imports the CLI: rare)

        argv = text_args(argv)
        sys.argv[1:] = argv

    command = client.command_of(argv)
    if command in client.SERVED and client.enabled() and os.environ.get("LETHE_IN_SERVICE") != "1":
        code = client.run(argv, command)
        if code is not None:
            sys.stdout.flush()
            sys.exit(code)
    from .cli import main as cli_main

    cli_main()


if __name__ == "__main__":  # pragma: no cover
    main()
