"""Names that come from outside (run ids, template and node names) and the paths built from them.

A name is never a path: it matches a strict pattern at every entry (CLI, API, worker, ``db
copy``), and every file path built from one is checked to stay under its folder.
"""

from __future__ import annotations

import re
from pathlib import Path

from stageline.errors import InputError

__all__ = ["RUN_ID_PATTERN", "check_run_id", "is_run_id", "path_under"]

RUN_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
"""A run id: a letter or digit, then up to 63 letters, digits, dots, underscores or dashes."""


def is_run_id(value: object) -> bool:
    """Whether ``value`` is a well-formed run id."""
    return isinstance(value, str) and RUN_ID_PATTERN.fullmatch(value) is not None


def check_run_id(value: object, where: str = "run id") -> str:
    """``value`` if it is a well-formed run id; otherwise an ``InputError`` saying why."""
    if is_run_id(value):
        return str(value)
    shown = repr(value) if len(repr(value)) <= 80 else repr(value)[:77] + "..."
    raise InputError(
        f"{where} {shown} is not a valid run id: use 1-64 letters, digits, '.', '_' or '-', "
        "starting with a letter or digit"
    )


def path_under(base: Path, *parts: str) -> Path:
    """``base / parts...``, refusing any result that would leave ``base`` (``..``, absolute)."""
    root = base.resolve()
    target = root.joinpath(*parts).resolve()
    if target != root and root not in target.parents:
        raise InputError(f"path {'/'.join(parts)!r} leaves {base}")
    return target
