"""``python -m lethe_sql.cli``: the ``lethe`` command line."""

from .app import main

main()
