"""The graphs a project's ``langgraph.json`` lists, read as LangGraph's own CLI reads them.

``graphs`` maps a name to ``./path/to/file.py:attr`` (or ``package.module:attr``), relative to
the file's folder; the attribute is a ``StateGraph``, a compiled graph or a factory of one.
``dependencies`` that are local paths go on the import path; ``env`` (a mapping, or the path of
a ``.env`` file) is loaded into the process environment before a graph is imported, as
LangGraph's server does. Values from ``env`` are never logged nor shown.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from pathlib import Path
from typing import Any

from dotenv import dotenv_values

from stageline.errors import TemplateError
from stageline.templates._langgraph import GraphTemplate, graph_template, is_graph
from stageline.templates._project import import_python_file

__all__ = ["LANGGRAPH_JSON", "graph_files", "langgraph_graphs", "load_listed_graph"]

LANGGRAPH_JSON = "langgraph.json"

_READ: dict[str, tuple[tuple[int, int, int], dict[str, str]]] = {}
"""A langgraph.json file (as given, absolute) -> (its stat, its graphs), read once while
unchanged: a server asks several times per request, without resolving the path each time."""
_PREPARED: set[str] = set()
"""langgraph.json files whose dependencies and env this process took in already."""
_MADE: dict[tuple[str, str, int], GraphTemplate] = {}
"""(file, name, id of the graph object) -> its template, so a graph compiles once per process."""
_LOADED: dict[tuple[str, str], tuple[tuple[int, int, int], GraphTemplate]] = {}
"""(file as given, absolute; name) -> (the file's stat, the template of a graph object): a
server loads a template several times per request; while the langgraph.json is unchanged the
answer is the same (its graph module is imported once per process), found without resolving
paths or naming the module again."""


def graph_files(template_dirs: Any) -> list[Path]:
    """The langgraph.json files among a project's template sources."""
    return [p for p in template_dirs if p.name.endswith(".json") and p.is_file()]


def langgraph_graphs(path: Path) -> dict[str, str]:
    """``graphs`` of the langgraph.json at ``path``: name -> ``file.py:attr``."""
    key = str(path.absolute())
    stamp = _stamp(path)
    hit = _READ.get(key)
    if hit is not None and hit[0] == stamp:
        return hit[1]
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise TemplateError(f"cannot read it: {exc}", source=str(path)) from exc
    graphs = data.get("graphs") if isinstance(data, dict) else None
    if not isinstance(graphs, dict) or not all(
        isinstance(k, str) and isinstance(v, str | dict) for k, v in graphs.items()
    ):
        raise TemplateError('"graphs" must map names to "./file.py:attr"', source=str(path))
    found = {k: v if isinstance(v, str) else str(v.get("path", "")) for k, v in graphs.items()}
    _READ[key] = (stamp, found)
    return found


def _prepare(path: Path) -> None:
    """Take in the file's ``dependencies`` (local paths onto the import path) and ``env``."""
    key = str(path.resolve())
    if key in _PREPARED:
        return
    _PREPARED.add(key)
    data = json.loads(path.read_text(encoding="utf-8"))
    folder = path.parent.resolve()
    for dep in data.get("dependencies") or ():
        if isinstance(dep, str) and dep.startswith((".", "/")):
            where = str((folder / dep).resolve())
            if where not in sys.path:
                sys.path.insert(0, where)
    env = data.get("env")
    values: dict[str, str | None] = {}
    if isinstance(env, str):
        env_file = (folder / env).resolve()
        if not env_file.is_file():
            raise TemplateError(f'"env" names {env}, which is not a file', source=str(path))
        values = dotenv_values(env_file)
    elif isinstance(env, dict):
        values = {str(k): None if v is None else str(v) for k, v in env.items()}
    for name, value in values.items():
        if value is not None:
            os.environ.setdefault(name, value)  # the process's own environment wins
    importlib.invalidate_caches()


def load_listed_graph(path: Path, name: str) -> GraphTemplate:
    """The template of graph ``name`` that the langgraph.json at ``path`` lists."""
    fast = (os.path.abspath(path), name)
    stamp = _stamp(path)
    hit = _LOADED.get(fast)
    if hit is not None and hit[0] == stamp:
        return hit[1]
    made, kept = _load_listed_graph(path, name)
    if kept:  # a factory makes its graph anew for each run: never kept
        _LOADED[fast] = (stamp, made)
    return made


def _stamp(path: Path) -> tuple[int, int, int]:
    st = path.stat()
    return (st.st_mtime_ns, st.st_size, st.st_ino)


def _load_listed_graph(path: Path, name: str) -> tuple[GraphTemplate, bool]:
    """The template, and whether it is the same for every run (a graph, not a factory)."""
    ref = langgraph_graphs(path)[name]
    _prepare(path)
    where, _, attr = ref.rpartition(":")
    if not where or not attr:
        raise TemplateError(f"graph {name!r}: {ref!r} is not 'file.py:attr'", source=str(path))
    source = str(path)
    if where.endswith(".py"):
        file = (path.parent / where).resolve()
        if not file.is_file():
            raise TemplateError(f"graph {name!r}: no file {where}", source=str(path))
        module = import_python_file(file)
        source = str(file)
    else:
        try:
            module = importlib.import_module(where)
        except ImportError as exc:
            message = f"graph {name!r}: cannot import {where}: {exc}"
            raise TemplateError(message, source=source) from exc
    obj = getattr(module, attr, None)
    if obj is None:
        raise TemplateError(f"graph {name!r}: {where} has no {attr!r}", source=source)
    key = (str(path.resolve()), name, id(obj))
    if is_graph(obj) and key in _MADE:
        return _MADE[key], True
    about = (getattr(module, "__doc__", None) or "").strip().splitlines()
    made = graph_template(obj, name, source, description=about[0] if about else "")
    made.validate()
    if is_graph(obj):  # a factory makes its graph anew for each run, as LangGraph's server does
        _MADE[key] = made
    return made, is_graph(obj)
