"""The ``lethe`` command line (typer): ``app`` and ``main``.

One module per command group (``memory``, ``rif``, ``curate``, ``dedup``, ``models``,
``projects``, ``config``, ``doctor``, ``agents``, ``tui``, ``bench``), all sharing
``common`` (errors, ``--json``, the store, the hit renderer); ``app`` registers them, and
``service`` runs them for ``lethe serve``. Nothing outside this package imports typer.
"""

from .app import app, main

__all__ = ["app", "main"]
