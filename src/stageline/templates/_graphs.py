"""The builder's helpers over LangGraph's graph: the run's state schema, cycles, stable reprs."""

from __future__ import annotations

import re
import typing
from collections.abc import Mapping
from typing import Annotated, Any, TypedDict, get_args, get_origin, get_type_hints

from langgraph.graph import END

from stageline.errors import TemplateError
from stageline.stages import GATES_KEY, LOOPS_KEY, merge_loop_counts

__all__ = ["_cycles", "_get", "_has_reducer", "_hints", "_stable_repr", "_with_loops"]


def _stable_repr(value: Any) -> str:
    """A repr that is the same in every process: callables by name, never by address."""
    if value is None or isinstance(value, str | int | float | bool):
        return repr(value)
    if isinstance(value, type) or (callable(value) and hasattr(value, "__qualname__")):
        return f"{getattr(value, '__module__', '?')}.{value.__qualname__}"
    if isinstance(value, tuple | list):
        return "[" + ", ".join(_stable_repr(v) for v in value) + "]"
    if get_origin(value) is Annotated:
        args = get_args(value)
        return f"Annotated[{_stable_repr(args[0])}, {', '.join(_stable_repr(a) for a in args[1:])}]"
    if hasattr(value, "_asdict"):  # NamedTuple, e.g. LangGraph's RetryPolicy
        return f"{type(value).__name__}({_stable_repr(list(value._asdict().items()))})"
    return re.sub(r" at 0x[0-9a-f]+", "", repr(value))


def _get(state: Any, key: str) -> Any:
    if isinstance(state, Mapping):
        return state.get(key)
    return getattr(state, key, None)


def _hints(schema: type[Any]) -> dict[str, Any]:
    try:
        return get_type_hints(schema, include_extras=True)
    except Exception:  # unresolvable forward references: fall back to raw annotations
        return dict(getattr(schema, "__annotations__", {}))


def _has_reducer(hint: Any) -> bool:
    if get_origin(hint) is Annotated:
        return any(callable(m) for m in get_args(hint)[1:])
    return False


def _with_loops(schema: type[Any]) -> type[Any]:
    hints = _hints(schema)
    if LOOPS_KEY in hints:
        return schema
    loops_hint = Annotated[dict[str, int], merge_loop_counts]
    gates_hint = Annotated[dict[str, str], _merge_dicts]
    if typing.is_typeddict(schema):
        fields = {**hints, LOOPS_KEY: loops_hint, GATES_KEY: gates_hint}
        return TypedDict(schema.__name__, fields, total=False)  # type: ignore[operator,no-any-return]
    try:
        from pydantic import BaseModel, Field, create_model
    except ImportError:  # pragma: no cover - pydantic is a dependency
        BaseModel = None  # type: ignore[assignment,misc]
    if BaseModel is not None and isinstance(schema, type) and issubclass(schema, BaseModel):
        return create_model(  # type: ignore[call-overload,no-any-return]
            schema.__name__, __base__=schema,
            **{LOOPS_KEY: (loops_hint, Field(default_factory=dict)),
               GATES_KEY: (gates_hint, Field(default_factory=dict))},
        )
    raise TemplateError(f"state schema {schema!r} must be a TypedDict or a pydantic model")


def _merge_dicts(left: dict[str, str] | None, right: dict[str, str] | None) -> dict[str, str]:
    """Reducer for ``GATES_KEY``: each gate's latest decision."""
    return {**(left or {}), **(right or {})}


def _cycles(succ: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components that contain a cycle (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[set[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in succ.get(v, ()):
            if w == END:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp: set[str] = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1 or v in succ.get(v, ()):
                out.append(comp)

    for v in list(succ):
        if v not in index and v != END:
            visit(v)
    return out

