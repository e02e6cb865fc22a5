"""The project a process works in: its root on the import path, and where stages live.

A YAML template names stages by import path (``mypkg.stages:draft``), found from the project's
root (where ``stageline.toml`` is, or the working directory), or by registered name
(``@stage(name="blog.draft")``). A registered name needs the module that registers it imported;
when a name is not registered yet, the project's declared ``stage_modules`` (stageline.toml)
and the Python files of its templates folders (``_helpers.py`` too) are imported once, then
the name is looked up again. The runner and the command line call ``use_project`` with the
settings they run under.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

from stageline.config import Settings
from stageline.errors import StageNotFound, TemplateError
from stageline.stages import Stage, lookup_stage

__all__ = ["find_stage", "use_project"]

_SOURCES: dict[str, tuple[tuple[str, ...], tuple[Path, ...]]] = {}
"""The project root -> its declared stage modules and templates folders (the latest is used)."""
_IMPORTED: set[str] = set()
"""Stage modules and template files imported already, so each is imported once."""


def use_project(settings: Settings) -> None:
    """Put the project's root first on the import path (once) and remember where its stages
    live: ``stage_modules`` and the templates folders."""
    folder = str(settings.root.resolve())
    if folder not in sys.path:
        sys.path.insert(0, folder)
        importlib.invalidate_caches()
    _SOURCES.clear()  # one project per process: the last one set up wins
    _SOURCES[folder] = (tuple(settings.stage_modules), tuple(settings.template_dirs))


def find_stage(ref: str) -> Stage:
    """``lookup_stage``, after importing the project's stage sources for a name not yet
    registered (an import path ``module:attr`` is imported as it is)."""
    try:
        return lookup_stage(ref)
    except StageNotFound:
        if ":" in ref or not _import_sources():
            raise
    return lookup_stage(ref)


def _import_sources() -> bool:
    """Import what was not imported yet; whether anything new was."""
    from stageline.templates._registry import import_python_file

    fresh = False
    for modules, dirs in list(_SOURCES.values()):
        for name in modules:
            if name in _IMPORTED:
                continue
            _IMPORTED.add(name)
            fresh = True
            try:
                importlib.import_module(name)
            except ImportError as exc:
                raise StageNotFound(
                    f"cannot import stage module {name!r} (stage_modules in stageline.toml): {exc}"
                ) from exc
        for folder in dirs:
            for path in sorted(folder.glob("*.py")) if folder.is_dir() else ():
                key = str(path.resolve())
                if path.name.startswith((".", "__")) or key in _IMPORTED:
                    continue
                _IMPORTED.add(key)
                fresh = True
                try:
                    import_python_file(path)
                except TemplateError:
                    continue  # a broken template file is reported when it is loaded itself
    return fresh
