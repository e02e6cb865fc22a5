"""The builder's helpers over LangGraph's graph: the run's state schema, cycles, stable reprs."""

from __future__ import annotations

import hashlib
import inspect
import re
import typing
from collections.abc import Callable, Mapping
from typing import Annotated, Any, TypedDict, get_args, get_origin, get_type_hints

from langgraph.graph import END

from stageline.errors import TemplateError
from stageline.stages import GATES_KEY, LOOPS_KEY, merge_loop_counts

__all__ = [
    "_back_edges",
    "_cycles",
    "_get",
    "_graph_shape",
    "_has_reducer",
    "_hints",
    "_stable_repr",
    "_with_loops",
]


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


def _code_hasher() -> Callable[[Any], str]:
    """A hash of a function's source (its qualified name when it has none), each read once."""
    seen: dict[int, tuple[Any, str]] = {}

    def code(fn: Any) -> str:
        hit = seen.get(id(fn))
        if hit is None:
            try:
                text = hashlib.sha256(inspect.getsource(fn).encode()).hexdigest()[:16]
            except (OSError, TypeError):
                text = getattr(fn, "__qualname__", repr(fn))
            hit = seen[id(fn)] = (fn, text)  # fn kept: its id stays its own while hashing
        return hit[1]

    return code


def _graph_shape(builder: Any) -> list[Any]:
    """A LangGraph graph's structure as LangGraph draws it (nodes, edges, conditions), for a
    template's digest."""
    drawn = builder.compile().get_graph(xray=True)
    return [
        sorted(map(str, drawn.nodes)),
        sorted([e.source, e.target, e.conditional, str(e.data or "")] for e in drawn.edges),
    ]


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
            schema.__name__,
            __base__=schema,
            **{
                LOOPS_KEY: (loops_hint, Field(default_factory=dict)),
                GATES_KEY: (gates_hint, Field(default_factory=dict)),
            },
        )
    raise TemplateError(f"state schema {schema!r} must be a TypedDict or a pydantic model")


def _merge_dicts(left: dict[str, str] | None, right: dict[str, str] | None) -> dict[str, str]:
    """Reducer for ``GATES_KEY``: each gate's latest decision."""
    return {**(left or {}), **(right or {})}


def _cycles(succ: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components that contain a cycle (Tarjan, iterative: a template of
    thousands of nodes must not reach Python's recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[set[str]] = []
    counter = 0

    for root in list(succ):
        if root in index or root == END:
            continue
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        work: list[tuple[str, list[str]]] = [(root, sorted(succ.get(root, ())))]
        while work:
            v, todo = work[-1]
            if todo:
                w = todo.pop()
                if w == END:
                    continue
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, sorted(succ.get(w, ()))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[v])
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
    return out


def _back_edges(succ: dict[str, set[str]], start: str) -> set[tuple[str, str]]:
    """Edges that close a cycle: lead back to a node on the path from ``start`` (an iterative
    depth-first search, successors in name order)."""
    back: set[tuple[str, str]] = set()
    done: set[str] = set()
    path: set[str] = {start}
    work: list[tuple[str, list[str]]] = [(start, sorted(succ.get(start, ()), reverse=True))]
    while work:
        n, todo = work[-1]
        if not todo:
            work.pop()
            path.discard(n)
            done.add(n)
            continue
        t = todo.pop()
        if t in path:
            back.add((n, t))
        elif t not in done and t != END:
            path.add(t)
            work.append((t, sorted(succ.get(t, ()), reverse=True)))
    return back
