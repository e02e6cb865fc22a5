"""Finding templates: built-ins, the ``stageline.templates`` entry points, ``templates/``, paths."""

from __future__ import annotations

import hashlib
import importlib
import os
import sys
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from stageline.errors import TemplateError, TemplateNotFound
from stageline.templates._builder import Template
from stageline.templates._langgraph_json import graph_files, langgraph_graphs, load_listed_graph
from stageline.templates._project import import_python_file
from stageline.templates._yaml import load_yaml_template

__all__ = [
    "BUILTINS",
    "TemplateInfo",
    "list_templates",
    "load_template",
    "runs_on",
]

BUILTINS: dict[str, str] = {
    "blog_post": "stageline.templates.builtin.blog_post",
    "compose": "stageline.architect._template",
    "sdlc": "stageline.templates.builtin.sdlc",
    "wiki_build": "stageline.templates.builtin.wiki_build",
    "wiki_garden": "stageline.templates.builtin.wiki_garden",
    "wiki_ingest": "stageline.templates.builtin.wiki_ingest",
}
"""Built-in template name -> module holding ``template``."""

ENTRY_POINT_GROUP = "stageline.templates"
YAML_CACHE_SIZE = 64
"""YAML templates kept loaded, by file and content (a long-lived process loads one per run)."""
_YAML_CACHE: OrderedDict[tuple[str, str], Template] = OrderedDict()
_SUFFIXES = (".yaml", ".yml", ".py")


@dataclass(frozen=True, kw_only=True)
class TemplateInfo:
    name: str
    origin: str
    """``builtin``, ``entry point``, ``templates folder``, ``langgraph.json`` or ``path``."""
    source: str


def _from_object(obj: Any, source: str) -> Template:
    if isinstance(obj, Template):
        return obj
    if callable(obj):
        made = obj()
        if isinstance(made, Template):
            return made
    raise TemplateError(f"{source} does not provide a stageline Template", source=source)


def _from_module(module_name: str) -> Template:
    module = importlib.import_module(module_name)
    for attr in ("template", "make_template"):
        if hasattr(module, attr):
            return _from_object(getattr(module, attr), module_name)
    raise TemplateError(f"module {module_name} defines no `template`", source=module_name)


def _from_python_file(path: Path) -> Template:
    module = import_python_file(path)
    for attr in ("template", "make_template"):
        if hasattr(module, attr):
            return _from_object(getattr(module, attr), str(path))
    raise TemplateError("defines no `template` (a stageline Template)", source=str(path))


def load_template_file(path: Path) -> Template:
    """A template from a ``.yaml``/``.yml`` or ``.py`` file, validated."""
    if not path.is_file():
        raise TemplateError("no such file", source=str(path))
    if path.suffix in (".yaml", ".yml"):
        return _from_yaml_file(path)
    elif path.suffix == ".py":
        made = _from_python_file(path)
    else:
        raise TemplateError("a template file ends in .yaml, .yml or .py", source=str(path))
    made.validate()
    return made


def _from_yaml_file(path: Path) -> Template:
    """The YAML template in ``path``: the same object while the file's content is the same,
    so a worker that runs it again and again compiles it once (least recently used go)."""
    key = (str(path.resolve()), hashlib.sha256(path.read_bytes()).hexdigest())
    made = _YAML_CACHE.get(key)
    if made is not None:
        _YAML_CACHE.move_to_end(key)
        return made
    made = load_yaml_template(path)
    made.validate()
    _YAML_CACHE[key] = made
    while len(_YAML_CACHE) > YAML_CACHE_SIZE:
        _YAML_CACHE.popitem(last=False)
    return made


def _folder_files(dirs: Iterable[Path]) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for folder in dirs:
        if not folder.is_dir():
            continue
        for path in sorted(folder.iterdir()):
            if path.suffix in _SUFFIXES and not path.name.startswith(("_", ".")):
                found.setdefault(path.stem, path)
    return found


_ENTRY_POINTS: dict[tuple[tuple[str, float], ...], dict[str, Any]] = {}


def _entry_points() -> dict[str, Any]:
    """The installed packages' templates. Reading every distribution's metadata takes ~20 ms
    (a server looked a template up several times per request), so the answer is kept while
    no folder of ``sys.path`` has changed (installing a package changes its folder's mtime)."""
    key = tuple((folder, _mtime(folder)) for folder in sys.path)
    found = _ENTRY_POINTS.get(key)
    if found is None:
        found = {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}
        _ENTRY_POINTS.clear()
        _ENTRY_POINTS[key] = found
    return found


def _mtime(folder: str) -> float:
    try:
        return os.stat(folder or ".").st_mtime
    except OSError:
        return -1.0


def list_templates(template_dirs: Iterable[Path] = ()) -> list[TemplateInfo]:
    """Every template findable by name, first found wins: built-ins, entry points, folders,
    the graphs of the project's langgraph.json."""
    infos: dict[str, TemplateInfo] = {}
    for name, module in BUILTINS.items():
        infos[name] = TemplateInfo(name=name, origin="builtin", source=module)
    for name, ep in _entry_points().items():
        infos.setdefault(name, TemplateInfo(name=name, origin="entry point", source=ep.value))
    for name, path in _folder_files(template_dirs).items():
        infos.setdefault(name, TemplateInfo(name=name, origin="templates folder", source=str(path)))
    for listing in graph_files(template_dirs):
        for name, ref in langgraph_graphs(listing).items():
            infos.setdefault(name, TemplateInfo(name=name, origin="langgraph.json", source=ref))
    return sorted(infos.values(), key=lambda i: i.name)


def runs_on(made: Template, ref: str, recorded: str) -> bool:
    """Whether a run of template ``ref`` recorded on version ``recorded`` may go on with ``made``.

    The same code (``version+digest``) always may. A built-in template is stageline's own code:
    a release that changes its graph bumps its declared version, so a run of the same declared
    version goes on after stageline is upgraded (a user's template must match its digest).
    """
    if made.full_version == recorded:
        return True
    return ref in BUILTINS and recorded.partition("+")[0] == made.version


def load_template(ref: str, template_dirs: Iterable[Path] = ()) -> Template:
    """A template by name or by file path, validated."""
    dirs = list(template_dirs)
    path = Path(ref)
    if path.suffix in _SUFFIXES and (path.exists() or "/" in ref or "\\" in ref):
        return load_template_file(path)
    if ref in BUILTINS:
        made = _from_module(BUILTINS[ref])
    elif ref in (eps := _entry_points()):
        made = _from_object(eps[ref].load(), f"entry point {ref}")
    elif ref in (files := _folder_files(dirs)):
        return load_template_file(files[ref])
    elif listing := next((p for p in graph_files(dirs) if ref in langgraph_graphs(p)), None):
        return load_listed_graph(listing, ref)
    else:
        raise TemplateNotFound(ref, [i.name for i in list_templates(dirs)])
    made.validate()
    return made
