"""The project a process works in: its root on the import path, and where stages live.

A YAML template names stages by import path (``mypkg.stages:draft``), found from the project's
root (where ``stageline.toml`` is, or the working directory), or by registered name
(``@stage(name="blog.draft")``). A registered name needs the module that registers it imported;
when a name is not registered yet, the project's declared ``stage_modules`` (stageline.toml)
and the Python files of its templates folders (``_helpers.py`` too) are imported once, then
the name is looked up again. The runner and the command line call ``use_project`` with the
settings they run under. A Python file of the project (a template, a helper) is imported once,
under a name made from its path in the project (``import_python_file``).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import re
import sys
from pathlib import Path
from typing import Any

from stageline.config import Settings
from stageline.errors import StageNotFound, TemplateError
from stageline.stages import Stage, lookup_stage

__all__ = ["find_stage", "import_project_stages", "import_python_file", "use_project"]

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


def import_project_stages() -> None:
    """Import the project's stage sources not imported yet (the stage catalog lists them)."""
    _import_sources()


def _import_sources() -> bool:
    """Import what was not imported yet; whether anything new was."""
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


def import_python_file(path: Path) -> Any:
    """The module of a Python template file, imported once per process (its errors name the
    file and line); its name is stable across processes and machines."""
    module_name = _module_name(path)
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise TemplateError("cannot import this file", source=str(path))
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(module_name, None)
        if isinstance(exc, TemplateError):
            raise
        line = _traceback_line(exc, path)
        raise TemplateError(f"{type(exc).__name__}: {exc}", source=str(path), line=line) from exc
    return module


def _traceback_line(exc: BaseException, path: Path) -> int | None:
    tb = exc.__traceback__
    line = None
    while tb is not None:
        if Path(tb.tb_frame.f_code.co_filename).resolve() == path.resolve():
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def _module_name(path: Path) -> str:
    """The import name of a template file: the same in every process and on every machine
    for the same project layout (stage names and the template's digest are made from it).

    Named after the file's path relative to its project root (the folder holding
    ``stageline.toml`` above it, else the working directory), not after an absolute path or a
    salted ``hash()``. Another file that would take the same name gets one of its own.
    """
    resolved = path.resolve()
    root = next((d for d in resolved.parents if (d / "stageline.toml").is_file()), None)
    if root is None and resolved.is_relative_to(Path.cwd().resolve()):
        root = Path.cwd().resolve()
    where = resolved.relative_to(root).as_posix() if root is not None else resolved.name
    stem = re.sub(r"\W", "_", path.stem)
    name = f"stageline_user_templates.{stem}_{hashlib.sha256(where.encode()).hexdigest()[:10]}"
    loaded = sys.modules.get(name)
    if loaded is not None and Path(getattr(loaded, "__file__", "") or "").resolve() != resolved:
        digest = hashlib.sha256(str(resolved).encode()).hexdigest()[:10]
        name = f"stageline_user_templates.{stem}_{digest}"
    return name
