"""What a stage reads and writes, where it does not declare it: from its type hints, else from
its source (``state["k"]``, ``state.get("k")``, the keys of the dicts it returns), following
the module's own functions it hands the state to; and whether it asks a person or a model.

The node wrapper checks a declared ``writes`` against each result at run time; an inferred one
is the catalog's best reading of the code, and says so (``keys_from``).
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from dataclasses import dataclass
from typing import Any, get_type_hints, is_typeddict

from stageline.stages._stage import Stage

__all__ = ["Inferred", "checked_writes", "infer_stage"]

_DEPTH = 3
"""How many calls deep the source is followed (a stage -> its helper -> the helper's helper)."""


@dataclass(frozen=True, kw_only=True)
class Inferred:
    """A stage's keys and habits, and where the keys were read from."""

    reads: tuple[str, ...]
    writes: tuple[str, ...]
    requires: tuple[str, ...]
    """The reads it cannot do without (``state["k"]``; all declared reads)."""
    reads_from: str
    """``declared``, ``type hints``, ``source`` or ``unknown``."""
    writes_from: str
    asks_person: bool
    uses_model: bool


@dataclass
class _Found:
    reads: set[str]
    writes: set[str]
    requires: set[str]
    gets: set[str]
    asks: bool = False
    model: bool = False


def _keys_of(hint: Any) -> list[str] | None:
    """The keys a ``TypedDict`` or pydantic model declares, else None."""
    if is_typeddict(hint):
        return list(getattr(hint, "__annotations__", {}))
    fields = getattr(hint, "model_fields", None)
    return list(fields) if isinstance(fields, dict) else None


def _tree(fn: Any) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    try:
        source = textwrap.dedent(inspect.getsource(fn))
        node = ast.parse(source).body[0]
    except (OSError, TypeError, SyntaxError, IndexError):
        return None
    return node if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) else None


def _const(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _scan(fn: Any, state_arg: int | None, found: _Found, depth: int, seen: set[Any]) -> bool:
    """Add what ``fn`` reads and returns; whether its source could be read."""
    if fn in seen or depth > _DEPTH:
        return True
    seen.add(fn)
    tree = _tree(fn)
    if tree is None:
        return False
    params = [a.arg for a in tree.args.posonlyargs + tree.args.args]
    state = params[state_arg] if state_arg is not None and len(params) > state_arg else None
    ctx = params[1] if depth == 0 and len(params) > 1 else ("ctx" if "ctx" in params else None)
    names = getattr(fn, "__globals__", {})
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and _is(node.value, state):
            if (key := _const(node.slice)) is not None:
                found.reads.add(key)
                found.requires.add(key)
        elif isinstance(node, ast.Call):
            _call(node, (state, ctx), names, found, depth, seen)
        elif isinstance(node, ast.Attribute) and node.attr == "model":
            found.model = True
        elif isinstance(node, ast.Return) and isinstance(node.value, ast.Dict) and depth == 0:
            found.writes.update(k for k in map(_const, filter(None, node.value.keys)) if k)
    return True


def _is(node: ast.AST, name: str | None) -> bool:
    return name is not None and isinstance(node, ast.Name) and node.id == name


def _call(
    node: ast.Call,
    held: tuple[str | None, str | None],
    names: dict[str, Any],
    found: _Found,
    depth: int,
    seen: set[Any],
) -> None:
    """A call: ``state.get("k")``, ``ctx.ask(...)``, ``interrupt(...)``, or a helper of the
    module given the state or the stage's context (followed)."""
    state, ctx = held
    func = node.func
    if isinstance(func, ast.Attribute):
        if func.attr == "get" and _is(func.value, state) and node.args:
            if (key := _const(node.args[0])) is not None:
                found.reads.add(key)
                found.gets.add(key)
        elif func.attr == "ask":
            found.asks = True
        return
    if not isinstance(func, ast.Name):
        return
    if func.id == "interrupt":
        found.asks = True
        return
    at = next((i for i, a in enumerate(node.args) if _is(a, state)), None)
    handed = at is not None or any(_is(a, ctx) for a in node.args)
    helper = names.get(func.id)
    if handed and inspect.isfunction(helper):
        _scan(helper, at, found, depth + 1, seen)


def _hinted_writes(fn: Any) -> list[str] | None:
    """The keys of the ``TypedDict`` (or pydantic model) a stage's return is annotated with."""
    try:
        return _keys_of(get_type_hints(fn).get("return"))
    except Exception:  # a hint naming what its module never imported: no hint
        return None


def checked_writes(made: Stage) -> frozenset[str] | None:
    """The keys a node may return, checked at run time: declared, else its return's type."""
    if made.writes is not None:
        return frozenset(made.writes)
    hinted = _hinted_writes(made.fn)
    return frozenset(hinted) if hinted is not None else None


def infer_stage(made: Stage) -> Inferred:
    """What ``made`` reads and writes: declared, else from type hints, else from its source."""
    fn = made.fn
    found = _Found(reads=set(), writes=set(), requires=set(), gets=set())
    readable = _scan(fn, 0, found, 0, set())
    try:
        hints = get_type_hints(fn)
    except Exception:  # a hint naming what its module never imported: read the source only
        hints = {}
    hinted = _hinted_writes(fn)
    if made.writes is not None:
        writes, writes_from = tuple(made.writes), "declared"
    elif hinted is not None:
        writes, writes_from = tuple(hinted), "type hints"
    else:
        writes, writes_from = tuple(sorted(found.writes)), "source" if readable else "unknown"
    requires: tuple[str, ...] = ()
    if made.reads is not None:
        reads, reads_from = tuple(made.reads), "declared"
        requires = reads
    elif readable:
        reads, reads_from = tuple(sorted(found.reads)), "source"
        # A key also read with ``.get`` is guarded where it is subscripted: not required.
        requires = tuple(sorted(found.requires - found.gets))
    else:
        params = [v for k, v in hints.items() if k != "return"]
        keys = _keys_of(params[0]) if params else None
        reads, reads_from = (tuple(keys), "type hints") if keys else ((), "unknown")
    return Inferred(
        reads=reads,
        writes=writes,
        requires=requires,
        reads_from=reads_from,
        writes_from=writes_from,
        asks_person=found.asks or bool(made.metadata.get("asks_person")),
        uses_model=found.model,
    )
