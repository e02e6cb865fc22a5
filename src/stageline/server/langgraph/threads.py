"""``/threads``: runs as LangGraph threads: create (empty), get, search, update metadata,
delete, copy (fork), state (get, at a checkpoint, update) and history."""

from __future__ import annotations

import contextlib
import time
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Query, Request, Response

from stageline.errors import InputError, RunNotFound
from stageline.ledger import Run, RunStatus, ThreadMeta
from stageline.names import check_run_id
from stageline.runner import Runner, new_run_id
from stageline.server._advancer import Advancer
from stageline.server._auth import require_scope
from stageline.server._state import get_advancer, get_runner
from stageline.server.langgraph._errors import LANGGRAPH_ERRORS
from stageline.server.langgraph._execute import ApiRuns
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
    ThreadCreate,
    ThreadPatch,
    ThreadSearch,
    UpdateState,
)
from stageline.server.langgraph._resolve import is_resolve, resolve

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
        try:
            existing = await find_thread(runner, thread_id)
        except HTTPException:
            existing = None
        if existing is not None:
            if body.if_exists == "do_nothing":
                return await describe(request, runner, thread_id, existing)
            raise HTTPException(409, f"thread {thread_id} already exists")
        meta = await runner.ledger.put_thread(
            ThreadMeta(run_id=thread_id, metadata=body.metadata or {})
        )
    return thread_json(thread_id, None, meta, None)


@router.post("/threads/search", summary="Threads by metadata, status, ids or values")
async def search_threads(
    body: ThreadSearch, request: Request, runner: RunnerDep, _actor: Reader
) -> list[dict[str, Any]]:
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
    ids = set(body.ids) if body.ids else None
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
    key = body.sort_by or "created_at"
    chosen.sort(key=lambda c: (str(c[3][key]), c[0]), reverse=(body.sort_order or "desc") == "desc")
    found: list[dict[str, Any]] = []
    skipped = 0
    for thread_id, its_run, meta, _brief in chosen:
        shown = await describe(request, runner, thread_id, (its_run, meta))
        if body.values and not matches(shown["values"], body.values):
            continue
        if skipped < body.offset:
            skipped += 1
            continue
        found.append(shown)
        if len(found) >= body.limit:
            break
    return found


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
    run, _meta = await find_thread(runner, thread_id)
    if ApiRuns.of(request).busy(thread_id) or (
        run is not None
        and run.status is RunStatus.RUNNING
        and (run.lease_expires_at or 0) > time.time()
    ):
        raise HTTPException(409, f"thread {thread_id} is busy; cancel its run first")
    await runner.delete(thread_id)
    return Response(status_code=204)


@router.post(
    "/threads/{thread_id}/copy",
    summary="Copy a thread: a fork of its run from its "
    "latest checkpoint, with the lineage recorded",
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
        forked = await advancer.run(runner.fork(thread_id))
    except InputError as exc:  # its latest checkpoint cannot be forked (a state edit made it)
        raise HTTPException(409, f"cannot copy thread {thread_id}: {exc}") from exc
    new_id = forked.run.run_id
    if metadata:
        await runner.ledger.set_thread_metadata(new_id, metadata)
    return await describe(request, runner, new_id)


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
    "finished one is forked at the checkpoint (admin); an interrupted one is refused (409: "
    "decide or answer it), as is any write that would pass a gate or question",
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
        if checkpoint_id is None:
            raise HTTPException(
                409,
                f"thread {thread_id} has finished ({run.status}); give a "
                "checkpoint to fork it from, with the changed values",
            )
        if not request.state.token.scope.allows("admin"):
            raise HTTPException(
                403,
                f"token {actor!r} has scope {request.state.token.scope}; "
                "changing a finished thread forks it, which needs admin",
            )
        with unprocessable():
            done = await advancer.run(
                runner.fork(thread_id, checkpoint_id=checkpoint_id, changes=values)
            )
        target = done.run.run_id
    elif run.status.waits_for_person or run.status is RunStatus.FAILED:
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
        target = thread_id
    else:
        raise HTTPException(409, f"thread {thread_id} is busy; change its state when it stops")
    found = await runner.ledger.get_run(target)
    latest = await snapshot(runner, found)
    return {"checkpoint": checkpoint_json(target, latest.config if latest else None)}


@router.post("/threads/{thread_id}/history", summary="The thread's checkpoints, newest first")
async def get_history(
    thread_id: str, body: HistoryBody, runner: RunnerDep, _actor: Reader
) -> list[dict[str, Any]]:
    run, _meta = await find_thread(runner, thread_id)
    if run is None:
        return []
    before = (
        body.before
        if isinstance(body.before, str) or body.before is None
        else (body.before.checkpoint_id)
    )
    graph = runner.graph(run.template)
    found: list[dict[str, Any]] = []
    async for snap in graph.aget_state_history(  # metadata is matched here: any key may come
        config_of(thread_id), before=config_of(thread_id, before) if before else None
    ):
        if not matches(jsonable(dict(snap.metadata or {})), body.metadata or {}):
            continue
        found.append(state_json(thread_id, snap))
        if len(found) >= body.limit:
            break
    return found
