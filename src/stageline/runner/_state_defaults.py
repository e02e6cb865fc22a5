"""The values a template's state shows for keys nobody has written yet, kept per template
digest under the project's home, so ``show`` can read a run's state without LangGraph.

A key with a reducer (``Annotated[list, operator.add]``) reads as its type's empty value
(``[]``) before any node writes it, yet its checkpoint holds nothing for it: only the
compiled graph knows. Whoever compiles a template's graph records those keys here
(``remember``); ``recall`` answers None when nothing (or nothing it can trust) is recorded,
and the caller then reads the state through LangGraph.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["recall", "remember", "remember_graph"]

_EMPTY: dict[str, type[Any]] = {
    t.__name__: t for t in (list, dict, set, frozenset, tuple, str, int, float, bool, bytes)
}
"""Types whose empty value is recorded by name (anything else makes the record unsure)."""


def _path(home: Path, version: str) -> Path:
    digest = hashlib.sha256(version.encode()).hexdigest()[:32]  # never the name itself
    return home / "cache" / "state-defaults" / f"{digest}.json"


def remember(home: Path, version: str, defaults: Mapping[str, Any], order: list[str]) -> None:
    """Record ``defaults`` (state key -> value shown when unwritten) and the ``order`` of the
    state's keys for ``version``; best effort (a read-only home only costs ``show`` its fast
    path)."""
    path = _path(home, version)
    if path.exists():
        return
    named: dict[str, str | None] = {}
    for key, value in defaults.items():
        kind = type(value).__name__
        named[key] = kind if _EMPTY.get(kind) is type(value) and value == type(value)() else None
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump({"version": version, "defaults": named, "order": order}, out)
        os.replace(tmp, path)


def recall(home: Path, version: str) -> tuple[dict[str, Any], list[str]] | None:
    """The recorded defaults of ``version`` (fresh values) and its state keys in order, or
    None: ask LangGraph."""
    try:
        data = json.loads(_path(home, version).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("version") != version:
        return None
    named, order = data.get("defaults"), data.get("order")
    if (
        not isinstance(named, dict)
        or not isinstance(order, list)
        or not all(isinstance(key, str) for key in order)
    ):
        return None
    if not all(isinstance(kind, str) and kind in _EMPTY for kind in named.values()):
        return None
    return {key: _EMPTY[kind]() for key, kind in named.items()}, order


def remember_graph(home: Path, version: str, graph: Any, keys: set[str]) -> None:
    """Record the unwritten values of a compiled graph's state ``keys`` (its channels that
    read as something before any write: reducers over a type with an empty value)."""
    if _path(home, version).exists():
        return
    channels = getattr(graph, "channels", None) or {}
    output = getattr(graph, "stream_channels_asis", None)
    order = [output] if isinstance(output, str) else list(output or sorted(keys))
    defaults: dict[str, Any] = {}
    for key in keys:
        channel = channels.get(key)
        try:
            if channel is not None and channel.is_available():
                defaults[key] = channel.get()
        except Exception:  # a channel that cannot say: the record is unsure
            defaults[key] = channel
    remember(home, version, defaults, [str(key) for key in order])
