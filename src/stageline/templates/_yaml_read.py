"""Reading a YAML file with its lines: a safe loader whose mappings and sequences remember
where they stand, and a reader whose checks of values fail with a ``TemplateError`` at a line
of the file (``_yaml`` reads the template format with it)."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Hashable, Iterator
from pathlib import Path
from typing import Any, NoReturn

import yaml

from stageline.errors import TemplateError
from stageline.plaindata import BoundedSafeLoader, shown

__all__ = ["_COUNT", "_FLAG", "_NUMBER", "_LineLoader", "_Map", "_Reader", "_Seq", "_ok"]

_NUMBER, _COUNT, _FLAG = "a number", "a positive integer", "true or false"


def _ok(value: Any, kind: str) -> bool:
    """Whether ``value`` is ``_NUMBER``, ``_COUNT`` or ``_FLAG`` (a boolean is not a number)."""
    if kind == _FLAG or isinstance(value, bool):
        return kind == _FLAG and isinstance(value, bool)
    return (
        isinstance(value, int) and value >= 1 if kind == _COUNT else isinstance(value, int | float)
    )


class _Map(dict[Any, Any]):
    """A YAML mapping that remembers its line, each key's line and each key's source text."""

    def __init__(self, line: int) -> None:
        super().__init__()
        self.line, self.lines, self.raw = line, dict[Any, int](), dict[Any, str]()

    def at(self, key: Any) -> int:
        """The line of ``key``, or of the mapping when the key is absent."""
        return self.lines.get(key, self.line)


class _Seq(list[Any]):
    """A YAML sequence that remembers its line and each item's line."""

    def __init__(self, line: int) -> None:
        super().__init__()
        self.line, self.lines = line, list[int]()


class _LineLoader(BoundedSafeLoader):
    """A safe loader whose mappings and sequences remember lines and refuse duplicate keys;
    aliases may not expand past ``MAX_YAML_NODES`` values."""


def _construct_map(loader: _LineLoader, node: yaml.MappingNode) -> Iterator[_Map]:
    """A ``_Map``; a key may override one merged in with ``<<`` but may not repeat."""
    data = _Map(node.start_mark.line + 1)
    yield data
    own, seen = [(k.tag, k.value) for k, _ in node.value], set[tuple[str, Any]]()
    loader.flatten_mapping(node)
    for key_node, value_node in node.value:
        key, text = loader.construct_object(key_node, deep=True), (key_node.tag, key_node.value)
        if not isinstance(key, Hashable) or (text in seen and own.count(text) > 1):
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping",
                node.start_mark,
                f"found duplicate key {shown(key)}"
                if isinstance(key, Hashable)
                else "found an unhashable key",
                key_node.start_mark,
            )
        seen.add(text)
        data[key] = loader.construct_object(value_node, deep=True)
        data.lines[key], data.raw[key] = key_node.start_mark.line + 1, str(key_node.value)


def _construct_seq(loader: _LineLoader, node: yaml.SequenceNode) -> Iterator[_Seq]:
    """A ``_Seq``."""
    data = _Seq(node.start_mark.line + 1)
    yield data
    for child in node.value:
        data.append(loader.construct_object(child, deep=True))
        data.lines.append(child.start_mark.line + 1)


_LineLoader.add_constructor("tag:yaml.org,2002:map", _construct_map)
_LineLoader.add_constructor("tag:yaml.org,2002:seq", _construct_seq)


def _import(ref: str) -> Any:
    """The callable at ``module:attr`` or ``module.attr`` (the rules of ``lookup_stage``)."""
    module_name, sep, attr = ref.partition(":")
    if not sep:
        module_name, _, attr = ref.rpartition(".")
    if not module_name or not attr:
        raise ValueError("not an import path (module:attr or module.attr)")
    target: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        target = getattr(target, part)
    if not callable(target):
        raise TypeError(f"{type(target).__name__} object is not callable")
    return target


class _Reader:
    """Reads one YAML file; every mistake is a ``TemplateError`` at a line of the file."""

    def __init__(self, path: Path) -> None:
        self.path, self.src = path, str(path)
        self.line: int | None = None  # the entry being read, for errors no check foresaw

    def fail(self, message: str, line: int | None) -> NoReturn:
        """Raise a ``TemplateError`` at ``line`` of this file."""
        raise TemplateError(message, source=self.src, line=line)

    def where(self, line: int) -> tuple[str, int]:
        """The builder's ``where`` for ``line``."""
        self.line = line
        return (self.src, line)

    def mapping(
        self,
        value: Any,
        what: str,
        line: int,
        allowed: tuple[str, ...] | None = None,
        required: tuple[str, ...] = (),
    ) -> _Map:
        """``value`` as a mapping with only ``allowed`` and all ``required`` keys."""
        if not isinstance(value, _Map):
            self.fail(f"{what} must be a mapping, got {shown(value)}", line)
        for key in value:
            if allowed is not None and key not in allowed:
                self.fail(
                    f"unknown key {key!r} in {what}; allowed keys: {', '.join(allowed)}",
                    value.at(key),
                )
        if missing := [key for key in required if key not in value]:
            self.fail(f"{what} needs `{missing[0]}`", line)
        return value

    def text(self, value: Any, what: str, line: int) -> str:
        """``value`` as a non-empty string."""
        if not isinstance(value, str) or not value:
            self.fail(f"{what} must be a non-empty string, got {shown(value)}", line)
        return value

    def names(self, value: Any, what: str, line: int) -> list[str]:
        """``value`` as a non-empty list of strings."""
        if not isinstance(value, _Seq) or not value:
            self.fail(f"{what} must be a non-empty list, got {shown(value)}", line)
        return [self.text(v, what, at) for v, at in zip(value, value.lines, strict=True)]

    def resolve(self, ref: Any, what: str, line: int, arity: int) -> Any:
        """The callable at import path ``ref``, taking ``arity`` positional arguments."""
        ref = self.text(ref, what, line)
        try:
            fn = _import(ref)
        except Exception as exc:
            self.fail(f"cannot resolve {what} {ref!r}: {type(exc).__name__}: {exc}", line)
        try:
            params = inspect.signature(fn).parameters.values()
        except (TypeError, ValueError):  # builtins without a signature are taken on trust
            return fn
        n = sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)
        if n != arity and not isinstance(fn, type):
            self.fail(f"{what} {ref!r} takes {n} positional arguments, not {arity}", line)
        return fn

    def items(
        self,
        top: _Map,
        key: str,
        what: str = "",
        allowed: tuple[str, ...] | None = None,
        required: tuple[str, ...] = (),
    ) -> Iterator[tuple[Any, int]]:
        """The entries listed under top-level ``key`` with their lines, as checked mappings."""
        seq = top.get(key)
        if seq is not None and not isinstance(seq, _Seq):
            self.fail(f"`{key}` must be a list", top.at(key))
        for item, line in zip(seq or (), seq.lines if seq else (), strict=True):
            self.line = line
            yield (
                item if allowed is None else self.mapping(item, what, line, allowed, required),
                line,
            )
