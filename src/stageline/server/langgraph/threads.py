"""``/threads``: runs as LangGraph threads: create (empty), get, search, update metadata,
delete, copy (fork), state (get, at a checkpoint, update) and history."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, HTTPException, Query, Request, Response
from fastapi.responses import StreamingResponse

from stageline.errors import InputError, RunNotFound
from stageline.ledger import Run, RunStatus, ThreadMeta
from stageline.names import check_run_id
from stageline.runner import Runner, new_run_id
from stageline.server._advancer import Advancer
from stageline.server._auth import require_scope
from stageline.server._state import get_advancer, get_runner
from stageline.server.langgraph._errors import LANGGRAPH_ERRORS
from stageline.server.langgraph._events import EventLog
from stageline.server.langgraph._execute import ApiRuns, thread_busy
from stageline.server.langgraph._lookup import config_of, find_thread, snapshot, unprocessable
from stageline.server.langgraph._mapping import (
    checkpoint_json,
    jsonable,
    matches,
    runs_of_thread_status,
    state_json,
    thread_json,
    thread_status,
)
from stageline.server.langgraph._models import (
    HistoryBody,
    StateAtCheckpoint,
    ThreadCount,
    ThreadCreate,
    ThreadPatch,
    ThreadPrune,
    ThreadSearch,
    UpdateState,
    before_id,
)
from stageline.server.langgraph._resolve import is_resolve, resolve
from stageline.server.langgraph._stream import (
    THREAD_STREAM_MODES,
    thread_event_id,
    thread_stream,
)

__all__ = ["describe", "router"]

router = APIRouter(tags=["langgraph: threads"], responses=LANGGRAPH_ERRORS)
Reader = Annotated[str, Depends(require_scope("read"))]
Decider = Annotated[str, Depends(require_scope("decide"))]
Admin = Annotated[str, Depends(require_scope("admin"))]
RunnerDep = Annotated[Runner, Depends(get_runner)]
AdvancerDep = Annotated[Advancer, Depends(get_advancer)]
SEARCH_LIMIT = 1000
"""Threads searched per run status (newest first); metadata rows are all searched."""


async def describe(
    request: Request,
    runner: Runner,
    thread_id: str,
    found: tuple[Run | None, ThreadMeta | None] | None = None,
) -> dict[str, Any]:
    run, meta = found or await find_thread(runner, thread_id)
    busy = ApiRuns.of(request).busy(thread_id)
    return thread_json(thread_id, run, meta, await snapshot(runner, run), busy=busy)


@router.post("/threads", summary="Create a thread (a run starts on it with its first API run)")
async def create_thread(
    body: ThreadCreate, request: Request, runner: RunnerDep, _actor: Decider
) -> dict[str, Any]:
    with unprocessable():
        thread_id = check_run_id(body.thread_id, "thread_id") if body.thread_id else (new_run_id())
    async with ApiRuns.of(request).lock(thread_id):
        existing = None
        if body.thread_id:  # an id this server just made is nobody's yet: no read for it
            with contextlib.suppress(HTTPException):
                existing = await find_thread(runner, thread_id)
        if existing is not None:
            if body.if_exists == "do_nothing":
                return await describe(request, runner, thread_id, existing)
            raise HTTPException(409, f"thread {thread_id} already exists")
        meta = await runner.ledger.put_thread(
            ThreadMeta(run_id=thread_id, metadata=body.metadata or {})
        )
    return thread_json(thread_id, None, meta, None)


async def _matching(
    body: ThreadSearch | ThreadCount, request: Request, runner: Runner
) -> AsyncIterator[dict[str, Any]]:
    """The threads ``body`` asks for, described, in its order (newest first by default)."""
    ledger = runner.ledger
    metas = {m.run_id: m for m in await ledger.thread_metas()}
    statuses = runs_of_thread_status(body.status) if body.status else [None]
    runs: dict[str, Run] = {}
    for status in statuses:
        for run in await ledger.list_runs(
            status=str(status) if status else None, limit=SEARCH_LIMIT
        ):
            runs[run.run_id] = run
    if body.status is None or body.status == "idle":  # threads with no run yet are idle
        for thread_id in metas:
            if thread_id not in runs:
                with contextlib.suppress(RunNotFound):
                    runs[thread_id] = await ledger.get_run(thread_id)
    wanted = getattr(body, "ids", None)
    ids = set(wanted) if wanted else None
    tracker = ApiRuns.of(request)
    chosen: list[tuple[str, Run | None, ThreadMeta | None, dict[str, Any]]] = []
    for thread_id in {*runs, *(metas if body.status in (None, "idle") else ())}:
        its_run, meta = runs.get(thread_id), metas.get(thread_id)
        if ids is not None and thread_id not in ids:
            continue
        if body.status and thread_status(its_run, tracker.busy(thread_id)) != body.status:
            continue
        brief = thread_json(thread_id, its_run, meta, None)
        if matches(brief["metadata"], body.metadata or {}):
            chosen.append((thread_id, its_run, meta, brief))
    key = getattr(body, "sort_by", None) or "created_at"
    descending = (getattr(body, "sort_order", None) or "desc") == "desc"
    chosen.sort(key=lambda c: (str(c[3][key]), c[0]), reverse=descending)
    for thread_id, its_run, meta, _brief in chosen:
        shown = await describe(request, runner, thread_id, (its_run, meta))
        if not body.values or matches(shown["values"] or {}, body.values):
            yield shown


@router.post("/threads/search", summary="Threads by metadata, status, ids or values")
async def search_threads(
    body: ThreadSearch, request: Request, runner: RunnerDep, _actor: Reader
) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    skipped = 0
    async for shown in _matching(body, request, runner):
        if skipped < body.offset:
            skipped += 1
            continue
        found.append(shown)
        if len(found) >= body.limit:
            break
    return found


@router.post("/threads/count", summary="How many threads match metadata, status or values")
async def count_threads(
    body: ThreadCount, request: Request, runner: RunnerDep, _actor: Reader
) -> int:
    return len([t async for t in _matching(body, request, runner)])


@router.post(
    "/threads/prune",
    summary="Delete threads by id (strategy delete); keep_latest is refused (422): a "
    "thread's checkpoints are its audited history",
)
async def prune_threads(
    body: ThreadPrune, request: Request, runner: RunnerDep, _actor: Admin
) -> dict[str, int]:
    if body.strategy != "delete":
        raise HTTPException(
            422,
            "strategy keep_latest is not supported: stageline keeps a thread's checkpoints "
            "(they are its audited history); prune with strategy delete",
        )
    pruned = 0
    for thread_id in dict.fromkeys(body.thread_ids):
        try:
            await find_thread(runner, thread_id)
        except HTTPException:
            continue  # already gone
        await _check_idle(request, runner, thread_id)
        await runner.delete(thread_id)
        pruned += 1
    return {"pruned_count": pruned}


async def _check_idle(request: Request, runner: Runner, thread_id: str) -> None:
    """409 for a thread whose run some process is advancing (it cannot be deleted)."""
    if await thread_busy(request, runner, thread_id):
        raise HTTPException(409, f"thread {thread_id} is busy; cancel its run first")


@router.get("/threads/{thread_id}", summary="A thread: its status, metadata, values and interrupts")
async def get_thread(
    thread_id: str, request: Request, runner: RunnerDep, _actor: Reader
) -> dict[str, Any]:
    return await describe(request, runner, thread_id)


@router.patch("/threads/{thread_id}", summary="Merge metadata into a thread's")
async def update_thread(
    thread_id: str, body: ThreadPatch, request: Request, runner: RunnerDep, _actor: Decider
) -> dict[str, Any]:
    run, meta = await find_thread(runner, thread_id)
    merged = {**(meta.metadata if meta else {}), **body.metadata}
    meta = await runner.ledger.set_thread_metadata(thread_id, merged)
    return await describe(request, runner, thread_id, (run, meta))


@router.delete(
    "/threads/{thread_id}",
    status_code=204,
    summary="Delete a thread (its run, checkpoints and records)",
)
async def delete_thread(
    thread_id: str, request: Request, runner: RunnerDep, _actor: Admin
) -> Response:
    await find_thread(runner, thread_id)
    await _check_idle(request, runner, thread_id)
    await runner.delete(thread_id)
    return Response(status_code=204)


@router.post(
    "/threads/{thread_id}/copy",
    summary="Copy a thread: a new run with its whole history, standing where it stands "
    "(at the same gate or question, waiting for its own decision), with the lineage recorded",
)
async def copy_thread(
    thread_id: str, request: Request, runner: RunnerDep, advancer: AdvancerDep, _actor: Admin
) -> dict[str, Any]:
    run, meta = await find_thread(runner, thread_id)
    metadata = dict(meta.metadata) if meta else {}
    if run is None:
        copy = await runner.ledger.put_thread(ThreadMeta(run_id=new_run_id(), metadata=metadata))
        return thread_json(copy.run_id, None, copy, None)
    if run.status in (RunStatus.QUEUED, RunStatus.RUNNING):
        raise HTTPException(409, f"thread {thread_id} is busy; copy it when its run stops")
    try:
        copied = await advancer.run(runner.copy(thread_id))
    except InputError as exc:
        raise HTTPException(409, f"cannot copy thread {thread_id}: {exc}") from exc
    new_id = copied.run.run_id
    if metadata:
        await runner.ledger.set_thread_metadata(new_id, metadata)
    return await describe(request, runner, new_id)


@router.get(
    "/threads/{thread_id}/stream",
    summary="Follow a thread: each of its runs' events as they come, then a run_done "
    "metadata event, until the client goes (after Last-Event-ID first, when given)",
)
async def join_thread_stream(
    thread_id: str,
    request: Request,
    runner: RunnerDep,
    _actor: Reader,
    stream_mode: Annotated[list[str] | None, Query()] = None,
    stream_modes: Annotated[str | None, Query()] = None,
    last_event_id: Annotated[str | None, Header()] = None,
) -> StreamingResponse:
    await find_thread(runner, thread_id)
    try:
        resume = thread_event_id(last_event_id)
    except ValueError as exc:
        raise HTTPException(422, str(exc)) from exc
    asked = [m.strip() for m in (stream_mode or []) + (stream_modes or "").split(",")]
    modes = [m for m in asked if m] or ["run_modes"]
    for mode in modes:
        if mode not in THREAD_STREAM_MODES:
            raise HTTPException(
                422, f"stream mode {mode!r} is none of {', '.join(THREAD_STREAM_MODES)}"
            )
    tracker = ApiRuns.of(request)

    def follow(
        key: str,
    ) -> tuple[asyncio.Task[None] | None, str | None, list[str], EventLog | None]:
        return tracker.task(key), tracker.start_of(key), tracker.modes_of(key), tracker.log_of(key)

    return StreamingResponse(
        thread_stream(runner, thread_id, modes, follow, resume), media_type="text/event-stream"
    )


def _checkpoint_id(body: UpdateState | HistoryBody | StateAtCheckpoint) -> str | None:
    ref = getattr(body, "checkpoint", None)
    found = ref.checkpoint_id if ref is not None else None
    return found or getattr(body, "checkpoint_id", None)


@router.get(
    "/threads/{thread_id}/state",
    summary="The thread's current state, with what it waits on (tasks[].interrupts, interrupts)",
)
async def get_state(
    thread_id: str, runner: RunnerDep, _actor: Reader, subgraphs: Annotated[bool, Query()] = False
) -> dict[str, Any]:
    run, _meta = await find_thread(runner, thread_id)
    return state_json(thread_id, await snapshot(runner, run))


@router.get(
    "/threads/{thread_id}/state/{checkpoint_id}", summary="The thread's state at a checkpoint"
)
async def get_state_at(
    thread_id: str,
    checkpoint_id: str,
    runner: RunnerDep,
    _actor: Reader,
    subgraphs: Annotated[bool, Query()] = False,
) -> dict[str, Any]:
    run, _meta = await find_thread(runner, thread_id)
    if run is None:
        raise HTTPException(404, f"thread {thread_id} has no checkpoint {checkpoint_id!r}")
    return state_json(thread_id, await snapshot(runner, run, checkpoint_id))


@router.post("/threads/{thread_id}/state/checkpoint", summary="The thread's state at a checkpoint")
async def post_state_at(
    thread_id: str, body: StateAtCheckpoint, runner: RunnerDep, _actor: Reader
) -> dict[str, Any]:
    run, _meta = await find_thread(runner, thread_id)
    checkpoint_id = _checkpoint_id(body)
    if run is None and checkpoint_id:
        raise HTTPException(404, f"thread {thread_id} has no checkpoint {checkpoint_id!r}")
    return state_json(thread_id, await snapshot(runner, run, checkpoint_id))


@router.post(
    "/threads/{thread_id}/state",
    summary="Change the state: in place for a failed thread (retry goes on from it); a "
    "finished one is refused (409: a finished run cannot change; fork it with /v1), as is an "
    "interrupted one (decide or answer it) and any write that would pass a gate or question",
)
async def update_state(
    thread_id: str,
    body: UpdateState,
    request: Request,
    runner: RunnerDep,
    advancer: AdvancerDep,
    actor: Decider,
) -> dict[str, Any]:
    run, _meta = await find_thread(runner, thread_id)
    if run is None:
        raise HTTPException(409, f"thread {thread_id} has not started; start it with input")
    if is_resolve(body, run):  # Agent Inbox's resolve: an audited reject or cancel
        return await resolve(request, runner, advancer, run, actor)
    values = dict(body.values or {})
    checkpoint_id = _checkpoint_id(body)
    if run.status.terminal:
        # LangGraph would add a checkpoint to the finished thread; stageline keeps a finished
        # run's record final (one ending per run, its decisions bound to it): a change at one
        # of its checkpoints is a new run, forked with its lineage recorded.
        raise HTTPException(
            409,
            f"thread {thread_id} has finished ({run.status}) and a finished run cannot change "
            "(stageline keeps its record final); fork it at that checkpoint with the changed "
            f"values: POST /v1/runs/{thread_id}/fork (admin) or `stageline fork`",
        )
    if run.status.waits_for_person or run.status is RunStatus.FAILED:
        if ApiRuns.of(request).busy(thread_id):
            raise HTTPException(409, f"thread {thread_id} is busy")
        with unprocessable():
            await advancer.run(
                runner.update_state(
                    thread_id,
                    values,
                    checkpoint_id=checkpoint_id,
                    as_node=body.as_node,
                    actor=actor,
                )
            )
    else:
        raise HTTPException(409, f"thread {thread_id} is busy; change its state when it stops")
    found = await runner.ledger.get_run(thread_id)
    latest = await snapshot(runner, found)
    return {"checkpoint": checkpoint_json(thread_id, latest.config if latest else None)}


@router.post("/threads/{thread_id}/history", summary="The thread's checkpoints, newest first")
async def get_history(
    thread_id: str, body: HistoryBody, runner: RunnerDep, _actor: Reader
) -> list[dict[str, Any]]:
    run, _meta = await find_thread(runner, thread_id)
    if run is None:
        return []
    before = before_id(body.before)
    graph = runner.graph(run.template)
    found: list[dict[str, Any]] = []
    start = body.checkpoint.checkpoint_id if body.checkpoint else None
    async for snap in graph.aget_state_history(  # metadata is matched here: any key may come
        config_of(thread_id, start), before=config_of(thread_id, before) if before else None
    ):
        if not matches(jsonable(dict(snap.metadata or {})), body.metadata or {}):
            continue
        found.append(state_json(thread_id, snap))
        if len(found) >= body.limit:
            break
    return found
