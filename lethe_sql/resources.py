"""Locate the SQL, migration and sample folders in a wheel or a source checkout.

In an installed wheel they live inside the package (``lethe_sql/sql`` ...);
in a source checkout or editable install they are top-level folders of the
repository, one level above the package.
"""

from __future__ import annotations

import re
from pathlib import Path

_PKG = Path(__file__).resolve().parent


def resource_dir(name: str) -> Path:
    """The folder ``name`` (``sql``, ``migrations``): inside the package, else beside it."""
    for candidate in (_PKG / name, _PKG.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"lethe-sql is installed without its {name}/ folder (looked in {_PKG})")


def sql_files(name: str) -> list[Path]:
    """The ``*.sql`` files of a resource folder, in name order."""
    return sorted(resource_dir(name).glob("*.sql"))


def sql_constant(name: str) -> int:
    """The integer a ``sql/`` file defines as ``CREATE OR REPLACE MACRO <name>() AS <n>;``:
    a constant the SQL and the Python both use, written once (in SQL)."""
    pattern = re.compile(rf"CREATE OR REPLACE MACRO {re.escape(name)}\(\) AS (\d+);")
    for f in sql_files("sql"):
        m = pattern.search(f.read_text(encoding="utf-8"))
        if m:
            return int(m.group(1))
    raise LookupError(f"no constant macro {name}() in sql/")


def sample_memory_dir() -> Path:
    """The bundled sample memory folder used by ``lethe demo``."""
    return _PKG / "sample" / "memory"
