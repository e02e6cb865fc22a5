"""Data from outside as plain JSON: run inputs, input files and YAML that cannot blow up.

Run inputs end up in the ledger as JSON (SQLite text, Postgres ``jsonb``), so a value JSON
cannot hold (NaN, infinities, NUL characters, lone surrogates, sets, dates, bytes, non-text
keys) is refused before any run exists, with the path of the key that holds it. YAML is read
with a safe loader whose aliases may not expand past ``MAX_YAML_NODES`` values (a
"billion laughs" file fails at once, naming its line); ``load_plain_yaml`` also refuses the
YAML types JSON does not have. Errors never echo a whole value: ``shown`` shortens it.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Iterator, Mapping
from typing import Any

import yaml

from stageline.errors import InputError

__all__ = [
    "MAX_YAML_NODES",
    "BoundedSafeLoader",
    "check_plain_inputs",
    "load_plain_yaml",
    "plain_problem",
    "shown",
]

MAX_YAML_NODES = 100_000
"""Values a YAML document may hold once its aliases are expanded."""
MAX_DEPTH = 200
"""How deeply plain values may nest."""
SHOWN = 80
"""Characters of a value an error message shows at most."""

_NOT_JSON = (
    set,
    frozenset,
    bytes,
    bytearray,
    memoryview,
    complex,
    datetime.date,
    datetime.time,
    datetime.timedelta,
)


def shown(value: Any, limit: int = SHOWN) -> str:
    """``repr(value)``, cut to ``limit`` characters (an error must never echo a huge value)."""
    text = repr(value)
    if len(text) <= limit:
        return text
    return text[: max(limit - 3, 1)] + "..."


def _text_problem(text: str) -> str | None:
    if "\x00" in text:
        return "has a NUL character"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "is not valid Unicode (a lone surrogate)"
    return None


def plain_problem(value: Any, where: str = "", depth: int = 0) -> str | None:
    """Why ``value`` cannot be stored as plain JSON (``"at a[0]: NaN is not JSON"``), or None.

    Objects of other types are left to the checkpoint allowlist (a Python caller may pass the
    types its template registers).
    """
    at = f" at {where}" if where else ""
    if depth > MAX_DEPTH:
        return f"nests deeper than {MAX_DEPTH} levels{at}"
    if isinstance(value, float) and not math.isfinite(value):
        return f"{value!r} is not a JSON number{at}"
    if isinstance(value, str):
        why = _text_problem(value)
        return f"the text{at} {why}" if why else None
    if isinstance(value, _Refused):
        return f"{value.what} on line {value.line}{at} is not plain JSON; quote it to pass text"
    if isinstance(value, _NOT_JSON):
        kind = type(value).__name__
        return f"a {kind}{at} is not plain JSON (pass text, a number, a list or a mapping)"
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"the key {shown(key, 40)}{at} is not text (JSON keys are text)"
            why = _text_problem(key)
            if why:
                return f"the key {shown(key, 40)}{at} {why}"
            found = plain_problem(item, f"{where}[{key!r}]" if where else f"[{key!r}]", depth + 1)
            if found:
                return found
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            found = plain_problem(item, f"{where}[{index}]", depth + 1)
            if found:
                return found
    return None


def check_plain_inputs(inputs: Mapping[str, Any], what: str = "input") -> None:
    """Refuse (``InputError``, naming the key) inputs that cannot be stored as plain JSON."""
    for key, value in inputs.items():
        if not isinstance(key, str):
            raise InputError(f"{what} name {shown(key, 40)} is not text")
        why = _text_problem(key)
        if why:
            raise InputError(f"{what} name {shown(key, 40)} {why}")
        why = plain_problem(value)
        if why:
            raise InputError(f"{what} {key!r} cannot be stored: {why}"[:300])


# -- YAML ------------------------------------------------------------------------------------


def _children(node: yaml.Node) -> Iterator[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        yield from node.value
    elif isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            yield key
            yield value


def _too_big(root: yaml.Node, limit: int) -> tuple[yaml.Node, str] | None:
    """The node where expanding aliases passes ``limit`` values or loops, and why; or None.

    Sizes are counted over the composed graph (an alias is the node it names), each node once,
    so the count costs as much as the file, not as much as its expansion.
    """
    sizes: dict[int, int] = {}
    path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            path.discard(key)
            total = 1 + sum(sizes[id(child)] for child in _children(node))
            if total > limit:
                return node, f"its aliases expand to more than {limit} values"
            sizes[key] = total
        elif key not in sizes:
            if key in path:
                return node, "an alias refers to a value that holds it (a loop)"
            path.add(key)
            stack.append((node, True))
            stack.extend((c, False) for c in _children(node) if id(c) not in sizes)
    return None


class BoundedSafeLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing documents whose aliases expand past ``max_nodes``."""

    max_nodes = MAX_YAML_NODES

    def construct_document(self, node: yaml.Node) -> Any:
        found = _too_big(node, self.max_nodes)
        if found is not None:
            bad, why = found
            raise yaml.constructor.ConstructorError(None, None, f"refused: {why}", bad.start_mark)
        return super().construct_document(node)


class _Refused:
    """What a YAML value JSON lacks (a date, a set, bytes) is read as, so its key is named."""

    def __init__(self, what: str, line: int) -> None:
        self.what, self.line = what, line

    def __repr__(self) -> str:
        return f"<{self.what} on line {self.line}>"


class _PlainLoader(BoundedSafeLoader):
    """A bounded safe loader that reads the YAML types JSON lacks as ``_Refused`` markers."""


def _refuse(what: str) -> Any:
    def construct(loader: yaml.SafeLoader, node: yaml.Node) -> _Refused:
        return _Refused(what, node.start_mark.line + 1)

    return construct


for _tag, _what in (
    ("timestamp", "a date or time"),
    ("binary", "!!binary data"),
    ("set", "a !!set"),
    ("omap", "an !!omap"),
    ("pairs", "!!pairs"),
):
    _PlainLoader.add_constructor(f"tag:yaml.org,2002:{_tag}", _refuse(_what))


def load_plain_yaml(text: str | bytes) -> Any:
    """YAML (or JSON) as plain JSON values: ``yaml.YAMLError`` (with a line) when it is not
    YAML or its aliases expand too far, ``ValueError`` naming the key and line of a value JSON
    cannot hold (a date, a set, bytes, NaN...)."""
    data = yaml.load(text, Loader=_PlainLoader)  # a SafeLoader subclass
    why = plain_problem(data)
    if why:
        raise ValueError(why)
    return data
