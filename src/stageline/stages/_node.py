"""Turn a stage into a LangGraph node that journals its attempts and enforces loop bounds."""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import time
from collections.abc import Mapping
from typing import Any

from langgraph.errors import GraphBubbleUp, NodeTimeoutError
from langgraph.runtime import Runtime

from stageline.errors import InputError, LoopBoundExceeded, UndeclaredWrite
from stageline.stages._budget import enforce_budget
from stageline.stages._context import RunContext, StageContext
from stageline.stages._infer import checked_writes
from stageline.stages._stage import Stage
from stageline.statekeys import LOOPS_KEY

__all__ = ["LOOPS_KEY", "failure_phase", "input_shape", "make_node", "merge_loop_counts"]


def merge_loop_counts(
    left: Mapping[str, int] | None, right: Mapping[str, int] | None
) -> dict[str, int]:
    """Reducer for ``LOOPS_KEY``: counts add up."""
    merged = dict(left or {})
    for key, value in (right or {}).items():
        merged[key] = merged.get(key, 0) + value
    return merged


def failure_phase(exc: BaseException) -> str:
    """The phase a node failed in: what the error names, ``timeout``, ``input`` (the run's
    inputs do not fit: a retry fails the same way), or ``stage``."""
    phase = getattr(exc, "failure_phase", None)
    if isinstance(phase, str):
        return phase
    if isinstance(exc, TimeoutError | NodeTimeoutError):
        return "timeout"
    if isinstance(exc, InputError):
        return "input"
    return "stage"


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def make_node(node: str, made: Stage, *, loop: tuple[str, int] | None = None) -> Any:
    """The LangGraph node for ``made`` under the name ``node``.

    ``loop`` is ``(loop name, bound)`` when this node heads a declared loop: each run of the
    node counts one iteration, and one past the bound fails the run naming the loop.
    """
    is_async = inspect.iscoroutinefunction(made.fn)
    # The declared writes (or the return's type), made once per node: a result is checked
    # with one set lookup per key.
    allowed = checked_writes(made)

    # A thin closure over one shared body: LangGraph disassembles each node's function when it
    # compiles the graph (looking for subgraphs), so a large body per node made compiling a
    # template of thousands of nodes take tens of seconds.
    async def run_node(state: Any, runtime: Runtime[RunContext]) -> Any:
        return await _run_node(node, made, loop, is_async, allowed, state, runtime)

    run_node.__name__ = run_node.__qualname__ = node
    return run_node


async def _run_node(
    node: str,
    made: Stage,
    loop: tuple[str, int] | None,
    is_async: bool,
    allowed: frozenset[str] | None,
    state: Any,
    runtime: Runtime[RunContext],
) -> Any:
    """One try of ``node``: journaled, its loop bound and budget enforced."""
    rc = runtime.context
    info = runtime.execution_info
    task_id = info.task_id if info is not None else node
    try_no = info.node_attempt if info is not None else 1
    began = time.time()  # one start for the record and this run's work (show = logs)
    try_no = (
        rc.journal.node_started(
            node=node, task_id=task_id, try_no=try_no, stage=made.name, at=began
        )
        or try_no
    )
    ctx = StageContext(
        run=rc,
        node=node,
        try_no=try_no,
        task_id=task_id,
        started=began,
        store=runtime.store,
        writer=runtime.stream_writer,
    )
    try:
        if loop is not None:
            count = (_get(state, LOOPS_KEY) or {}).get(loop[0], 0)
            if count >= loop[1]:
                raise LoopBoundExceeded(loop[0], loop[1])
        await enforce_budget(ctx, state, task_id)
        call: Any = made.fn
        if is_async:
            result = await call(state, ctx)
        else:
            # A sync stage runs on a worker thread (with this context, as LangGraph runs
            # sync nodes), so a blocking call holds up neither its parallel siblings nor a
            # server's other requests.
            result = await asyncio.to_thread(call, state, ctx)
        if inspect.isawaitable(result):
            result = await result
        if allowed is not None and isinstance(result, Mapping):
            _check_writes(made.name, result, allowed)
    except GraphBubbleUp:
        # An interrupt (gate, question): LangGraph replays the node on resume, and the
        # replay finishes this same record.
        rc.journal.node_finished(
            node=node,
            task_id=task_id,
            try_no=try_no,
            stage=made.name,
            status="waiting",
            started=ctx.started,
            metrics=ctx.metrics,
        )
        raise
    except BaseException as exc:
        error, phase = _describe(exc), failure_phase(exc)
        outcome = _outcome(rc, made, ctx, state)
        if _timed_out(exc, made, ctx.started):
            # LangGraph cancels a node past its timeout and raises NodeTimeoutError outside it.
            error = f"NodeTimeoutError: {node!r} exceeded its {made.timeout}s timeout"
            phase = "timeout"
        elif isinstance(exc, asyncio.CancelledError):
            # Ctrl-C, SIGTERM, or a parallel sibling's failure stopped it midway; a resume
            # runs it again as a new try.
            error, phase = "interrupted: stopped before it finished", "interrupted"
        rc.journal.node_finished(
            node=node,
            task_id=task_id,
            try_no=try_no,
            stage=made.name,
            status="failed",
            started=ctx.started,
            metrics=ctx.metrics,
            error=error,
            failure_phase=phase,
            **outcome,
        )
        raise
    update = _as_update(result, node)
    if loop is not None:
        update = {**update, LOOPS_KEY: {loop[0]: 1}}
    rc.journal.node_finished(
        node=node,
        task_id=task_id,
        try_no=try_no,
        stage=made.name,
        status="succeeded",
        started=ctx.started,
        metrics=ctx.metrics,
        **_outcome(rc, made, ctx, state),
    )
    return update


def _check_writes(name: str, result: Mapping[str, Any], allowed: frozenset[str]) -> None:
    """Refuse a result with keys the stage does not declare (stageline's own keys aside)."""
    extra = [k for k in result if k not in allowed and not str(k).startswith("stageline_")]
    if extra:
        raise UndeclaredWrite(name, extra, tuple(sorted(allowed)))


def _outcome(rc: RunContext, made: Stage, ctx: StageContext, state: Any) -> dict[str, Any]:
    """What the journal's outcome row needs besides the record (see ``Journal``)."""
    return {
        "template": rc.template,
        "capability": made.capability,
        "alternative": getattr(ctx, "alternative", None),
        "input_shape": input_shape(state),
    }


def input_shape(state: Any) -> str:
    """A hash of the keys and value types of ``state`` (stageline's own keys left out)."""
    values = state if isinstance(state, Mapping) else getattr(state, "__dict__", {})
    shape = sorted(
        (str(k), type(v).__name__) for k, v in values.items() if not str(k).startswith("stageline_")
    )
    return hashlib.sha256(repr(shape).encode()).hexdigest()[:16]


def _timed_out(exc: BaseException, made: Stage, started: float) -> bool:
    return (
        isinstance(exc, asyncio.CancelledError)
        and made.timeout is not None
        and time.time() - started >= made.timeout * 0.9
    )


def _get(state: Any, key: str) -> Any:
    if isinstance(state, Mapping):
        return state.get(key)
    return getattr(state, key, None)


def _as_update(result: Any, node: str) -> dict[str, Any]:
    if result is None:
        return {}
    if isinstance(result, Mapping):
        return dict(result)
    if hasattr(result, "model_dump"):
        return dict(result.model_dump(exclude_unset=True))
    raise TypeError(f"stage {node!r} returned {type(result).__name__}; a stage returns a dict")
