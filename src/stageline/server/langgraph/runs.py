"""``/threads/{id}/runs`` and ``/runs``: LangGraph runs, each one advance of the thread's run
(its start, a resume by ``command``, a retry), in the background, waited for, or streamed."""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Header, HTTPException, Query, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.requests import HTTPConnection

from stageline.errors import StagelineError
from stageline.ledger import ApiRun, ApiRunStatus, Run, RunStatus
from stageline.names import check_run_id
from stageline.runner import Runner, new_run_id
from stageline.server._advancer import Advancer
from stageline.server._auth import require_scope
from stageline.server._state import get_advancer, get_runner
from stageline.server.langgraph._errors import LANGGRAPH_ERRORS
from stageline.server.langgraph._execute import ApiRuns, plan
from stageline.server.langgraph._lookup import find_thread, snapshot, unprocessable
from stageline.server.langgraph._mapping import api_run_json, interrupt_json, public_values
from stageline.server.langgraph._models import RunCreate, RunsCancel
from stageline.server.langgraph._stream import stream_run, until_closed

__all__ = ["accept_run", "router"]

router = APIRouter(tags=["langgraph: runs"], responses=LANGGRAPH_ERRORS)
Reader = Annotated[str, Depends(require_scope("read"))]
Decider = Annotated[str, Depends(require_scope("decide"))]
Admin = Annotated[str, Depends(require_scope("admin"))]
RunnerDep = Annotated[Runner, Depends(get_runner)]
AdvancerDep = Annotated[Advancer, Depends(get_advancer)]
WAIT_HEARTBEAT = 5.0
"""Seconds between two blank lines a ``wait`` answer sends while its run goes on."""


async def accept_run(
    request: HTTPConnection,
    runner: Runner,
    advancer: Advancer,
    body: RunCreate,
    thread_id: str | None,
    actor: str,
) -> tuple[ApiRun, asyncio.Task[None], str | None]:
    """Check and start one API run; returns it, its task and the checkpoint it starts from."""
    tracker = ApiRuns.of(request)
    stateless = thread_id is None
    thread_id = thread_id or new_run_id()
    async with tracker.lock(thread_id):
        try:
            run, _meta = await find_thread(runner, thread_id)
        except HTTPException:
            if not stateless and body.if_not_exists != "create":
                raise
            with unprocessable():
                check_run_id(thread_id, "thread_id")
            run = None
        if await tracker.busy_anywhere(runner, thread_id):
            raise HTTPException(409, f"thread {thread_id} is busy with another run")
        start = await runner.ledger.latest_checkpoint_id(thread_id) if run else None
        work = await plan(runner, advancer, body, thread_id, run, actor)
        api_run = await runner.ledger.add_api_run(
            ApiRun(
                api_run_id=str(uuid.uuid4()),
                run_id=thread_id,
                assistant_id=body.assistant_id,
                metadata=body.metadata or {},
            )
        )
        task = tracker.launch(
            runner, api_run, work, start, _modes(body.stream_mode), bool(body.stream_subgraphs)
        )
    return api_run, task, start


def _modes(asked: str | list[str] | None) -> list[str]:
    """Stream modes as the SDK sends them: one, a list, a JSON list in one query value, or
    nothing (``?stream_mode=``)."""
    if isinstance(asked, str):
        asked = [asked]
    found: list[str] = []
    for mode in asked or []:
        if mode.startswith("["):
            with contextlib.suppress(ValueError):
                found.extend(str(m) for m in json.loads(mode))
                continue
        if mode:
            found.append(mode)
    return found


def _location(api_run: ApiRun) -> dict[str, str]:
    return {"Content-Location": f"/threads/{api_run.run_id}/runs/{api_run.api_run_id}"}


def _join_location(api_run: ApiRun) -> dict[str, str]:
    """Where a client that lost a ``wait`` answer joins the run instead (the SDK follows
    ``Location`` by itself when the server went away mid-answer), as LangGraph's server says."""
    path = f"/threads/{api_run.run_id}/runs/{api_run.api_run_id}"
    return {"Location": f"{path}/join", "Content-Location": path}


async def _outcome(runner: Runner, api_run: ApiRun) -> dict[str, Any]:
    """What ``runs.wait`` and ``runs.join`` answer: the thread's values (with what it waits on
    under ``__interrupt__``), or ``__error__`` for a run that failed."""
    ended = await runner.ledger.api_run(api_run.api_run_id) or api_run
    run = await runner.ledger.get_run(api_run.run_id)
    latest = await snapshot(runner, run)
    values = public_values(latest.values) if latest is not None else {}
    if ended.status is ApiRunStatus.ERROR or run.status is RunStatus.FAILED:
        return {
            **values,
            "__error__": {
                "error": "RunError",
                "message": ended.error or run.error or "the run failed",
            },
        }
    if latest is not None and latest.interrupts:
        values["__interrupt__"] = [interrupt_json(i) for i in latest.interrupts]
    return values


@router.post("/threads/{thread_id}/runs", summary="Start a run on the thread, in the background")
async def create_run(
    thread_id: str,
    body: RunCreate,
    request: Request,
    runner: RunnerDep,
    advancer: AdvancerDep,
    actor: Decider,
) -> JSONResponse:
    api_run, _task, _start = await accept_run(request, runner, advancer, body, thread_id, actor)
    return JSONResponse(api_run_json(api_run), headers=_location(api_run))


@router.post("/runs", summary="Start a run on a new thread, in the background")
async def create_stateless_run(
    body: RunCreate, request: Request, runner: RunnerDep, advancer: AdvancerDep, actor: Decider
) -> JSONResponse:
    api_run, _task, _start = await accept_run(request, runner, advancer, body, None, actor)
    return JSONResponse(api_run_json(api_run), headers=_location(api_run))


async def _wait(
    request: Request,
    runner: Runner,
    advancer: Advancer,
    body: RunCreate,
    thread_id: str | None,
    actor: str,
) -> StreamingResponse:
    api_run, task, _start = await accept_run(request, runner, advancer, body, thread_id, actor)
    return _answer_when_done(runner, api_run, task)


def _answer_when_done(
    runner: Runner, api_run: ApiRun, done: asyncio.Future[Any], *, owned: bool = False
) -> StreamingResponse:
    """The run's outcome once ``done`` is (cancelled with the answer when ``owned``).

    The headers (with ``Location``) go at once; blank lines keep the connection alive until
    the outcome, so that a client cut off by a restart knows where to join the run again, as
    LangGraph's server does."""

    async def answer() -> AsyncIterator[bytes]:
        try:
            while not done.done():
                await asyncio.wait({done}, timeout=WAIT_HEARTBEAT)
                if not done.done():
                    yield b"\n"
            if owned and not done.cancelled():
                done.exception()  # a join that gave up (its bound): the outcome as it stands
            yield json.dumps(await _outcome(runner, api_run)).encode()
        finally:
            if owned and not done.done():
                done.cancel()

    return StreamingResponse(
        answer(), media_type="application/json", headers=_join_location(api_run)
    )


@router.post(
    "/threads/{thread_id}/runs/wait",
    summary="Start a run on the thread and answer when it ends or waits for a person",
)
async def wait_run(
    thread_id: str,
    body: RunCreate,
    request: Request,
    runner: RunnerDep,
    advancer: AdvancerDep,
    actor: Decider,
) -> StreamingResponse:
    return await _wait(request, runner, advancer, body, thread_id, actor)


@router.post("/runs/wait", summary="Start a run on a new thread and answer when it ends or waits")
async def wait_stateless_run(
    body: RunCreate, request: Request, runner: RunnerDep, advancer: AdvancerDep, actor: Decider
) -> StreamingResponse:
    return await _wait(request, runner, advancer, body, None, actor)


async def _stream(
    request: Request,
    runner: Runner,
    advancer: Advancer,
    body: RunCreate,
    thread_id: str | None,
    actor: str,
) -> StreamingResponse:
    api_run, task, start = await accept_run(request, runner, advancer, body, thread_id, actor)
    run = await runner.ledger.get_run(api_run.run_id)
    log = ApiRuns.of(request).log_of(api_run.api_run_id)
    modes = _modes(body.stream_mode)
    return _events(runner, api_run, run, modes, start, task, headers=_location(api_run), log=log)


def _events(
    runner: Runner,
    api_run: ApiRun,
    run: Run,
    modes: list[str],
    start: str | None,
    task: asyncio.Future[None] | None,
    watch: asyncio.Future[None] | None = None,
    headers: dict[str, str] | None = None,
    **options: Any,
) -> StreamingResponse:
    """The API run's events as server-sent events (``stream_run``, given ``options``);
    ``watch``, a future of this request's own, is cancelled when they end or the client goes."""
    events = stream_run(runner, api_run, run.template, modes, start, task, **options)
    return StreamingResponse(
        until_closed(events, watch),
        media_type="text/event-stream",
        headers=headers,
    )


@router.post(
    "/threads/{thread_id}/runs/stream",
    summary="Start a run on the thread and stream it in the modes asked (server-sent events)",
)
async def stream_thread_run(
    thread_id: str,
    body: RunCreate,
    request: Request,
    runner: RunnerDep,
    advancer: AdvancerDep,
    actor: Decider,
) -> StreamingResponse:
    return await _stream(request, runner, advancer, body, thread_id, actor)


@router.post("/runs/stream", summary="Start a run on a new thread and stream it")
async def stream_stateless_run(
    body: RunCreate, request: Request, runner: RunnerDep, advancer: AdvancerDep, actor: Decider
) -> StreamingResponse:
    return await _stream(request, runner, advancer, body, None, actor)


async def _api_run(runner: Runner, thread_id: str, run_id: str) -> ApiRun:
    await find_thread(runner, thread_id)
    found = await runner.ledger.api_run(run_id)
    if found is None or found.run_id != thread_id:
        raise HTTPException(404, f"run {run_id!r} of thread {thread_id} not found")
    return found


@router.get("/threads/{thread_id}/runs", summary="The thread's API runs, newest first")
async def list_runs(
    thread_id: str,
    request: Request,
    runner: RunnerDep,
    _actor: Reader,
    limit: Annotated[int, Query(ge=1, le=1000)] = 10,
    offset: Annotated[int, Query(ge=0)] = 0,
    status: Annotated[
        Literal["pending", "running", "error", "success", "timeout", "interrupted"] | None, Query()
    ] = None,
) -> list[dict[str, Any]]:
    await find_thread(runner, thread_id)
    tracker = ApiRuns.of(request)
    shown = []
    for api_run in await runner.ledger.api_runs(thread_id):
        current = await tracker.status(runner, api_run)
        if status is None or str(current) == status:
            shown.append(api_run_json(api_run, current))
    return shown[offset : offset + limit]


@router.get("/threads/{thread_id}/runs/{run_id}", summary="An API run")
async def get_run(
    thread_id: str, run_id: str, request: Request, runner: RunnerDep, _actor: Reader
) -> dict[str, Any]:
    api_run = await _api_run(runner, thread_id, run_id)
    return api_run_json(api_run, await ApiRuns.of(request).status(runner, api_run))


@router.get(
    "/threads/{thread_id}/runs/{run_id}/join",
    summary="Wait for an API run to end; answers the thread's values",
)
async def join_run(
    thread_id: str, run_id: str, request: Request, runner: RunnerDep, _actor: Reader
) -> StreamingResponse:
    api_run = await _api_run(runner, thread_id, run_id)
    joined = asyncio.ensure_future(ApiRuns.of(request).join(runner, api_run))
    return _answer_when_done(runner, api_run, joined, owned=True)


@router.get(
    "/threads/{thread_id}/runs/{run_id}/stream",
    summary="Join an API run's stream: its events from where it started while it goes on, "
    "after Last-Event-ID when given; its end state once it ended",
)
async def join_stream(
    thread_id: str,
    run_id: str,
    request: Request,
    runner: RunnerDep,
    _actor: Reader,
    stream_mode: Annotated[list[str] | None, Query()] = None,
    last_event_id: Annotated[str | None, Header()] = None,
) -> StreamingResponse:
    api_run = await _api_run(runner, thread_id, run_id)
    tracker = ApiRuns.of(request)
    local = tracker.task(api_run.api_run_id)
    # Live events while the run goes on; after them, those after Last-Event-ID while kept.
    after = int(last_event_id) if last_event_id and last_event_id.isdigit() else 0
    log = tracker.log_of(api_run.api_run_id) if local is not None or after else None
    run = await runner.ledger.get_run(thread_id)
    # Advanced by another server process: its checkpoints from where it is now, until it ends.
    task = local or await tracker.follower(runner, api_run)
    if local is not None:
        start = tracker.start_of(api_run.api_run_id)
    else:  # ended, or followed by another process: from where it is now
        latest = await snapshot(runner, run)
        start = latest.config["configurable"].get("checkpoint_id") if latest else None
    # As LangGraph's join: the events the run makes (in the modes it was started with), those
    # of the modes asked for only when some are (``?stream_mode=`` asks for none).
    own, asked = tracker.modes_of(api_run.api_run_id), _modes(stream_mode)
    modes = [m for m in own if m in asked] if asked else own
    metadata = not asked or "metadata" in asked
    # A watch of another process's advance is this request's own: it ends with the stream.
    watch = task if local is None else None
    return _events(
        runner, api_run, run, modes, start, task, watch, metadata=metadata, log=log, after=after
    )


@router.post(
    "/threads/{thread_id}/runs/{run_id}/cancel",
    summary="Cancel the thread's run (at once, or between its next steps while it advances)",
)
async def cancel_run(
    thread_id: str,
    run_id: str,
    request: Request,
    runner: RunnerDep,
    actor: Admin,
    wait: Annotated[bool, Query()] = False,
    action: Annotated[str, Query(pattern="^(interrupt|rollback)$")] = "interrupt",
) -> Response:
    """As LangGraph's: 202 (no body), or with ``wait`` ``{}`` once the run has ended (a
    cancelled run has no values of its own); 404 when the thread has finished."""
    api_run = await _api_run(runner, thread_id, run_id)
    tracker = ApiRuns.of(request)
    run = await runner.ledger.get_run(thread_id)
    if run.status.terminal:
        raise HTTPException(
            404, f"thread {thread_id}'s run is already {run.status}; there is nothing to cancel"
        )
    await _cancel(runner, tracker, api_run, actor)
    if not wait:
        return Response(status_code=202)
    await tracker.join(runner, api_run)
    return JSONResponse({})


async def _cancel(runner: Runner, tracker: ApiRuns, api_run: ApiRun, actor: str) -> None:
    """Cancel the thread's run through the runner (409 naming why it cannot be)."""
    try:
        await runner.cancel(api_run.run_id)
    except StagelineError as exc:
        if exc.http_status != 409:
            raise
        raise HTTPException(409, str(exc)) from exc
    if not api_run.status.done and not await tracker.advanced(runner, api_run):
        await runner.ledger.set_api_run_status(
            api_run.api_run_id, ApiRunStatus.INTERRUPTED, f"cancelled by {actor}"
        )


async def _active(runner: Runner, tracker: ApiRuns, thread_ids: list[str]) -> list[ApiRun]:
    """The API runs of these threads that are pending or running."""
    found = []
    for thread_id in thread_ids:
        for api_run in await runner.ledger.api_runs(thread_id):
            if not (await tracker.status(runner, api_run)).done:
                found.append(api_run)
    return found


@router.post(
    "/runs/cancel",
    status_code=204,
    summary="Cancel runs: by thread and run ids, or every pending / running one (status)",
)
async def cancel_runs(
    body: RunsCancel,
    request: Request,
    runner: RunnerDep,
    actor: Admin,
    action: Annotated[str, Query(pattern="^(interrupt|rollback)$")] = "interrupt",
) -> Response:
    tracker = ApiRuns.of(request)
    if body.status is not None:
        if body.thread_id or body.run_ids:
            raise HTTPException(
                422, "give status alone (it cancels every run in it), or thread_id and run_ids"
            )
        statuses = {"pending": ["queued"], "running": ["running"]}.get(
            body.status, ["queued", "running"]
        )
        threads = [r.run_id for s in statuses for r in await runner.ledger.list_runs(status=s)]
        chosen = await _active(runner, tracker, threads)
        chosen = [
            r
            for r in chosen
            if body.status == "all" or str(await tracker.status(runner, r)) == body.status
        ]
    else:
        if not body.thread_id or not body.run_ids:
            raise HTTPException(422, "give thread_id and run_ids, or a status")
        await find_thread(runner, body.thread_id)
        active = {r.api_run_id: r for r in await _active(runner, tracker, [body.thread_id])}
        chosen = [active[i] for i in body.run_ids if i in active]
    for api_run in chosen:
        await _cancel(runner, tracker, api_run, actor)
    return Response(status_code=204)


@router.delete(
    "/threads/{thread_id}/runs/{run_id}",
    status_code=204,
    summary="Forget an API run that has ended (the thread and its history stay)",
)
async def forget_api_run(
    thread_id: str, run_id: str, request: Request, runner: RunnerDep, _actor: Admin
) -> Response:
    api_run = await _api_run(runner, thread_id, run_id)
    if not (await ApiRuns.of(request).status(runner, api_run)).done:
        raise HTTPException(409, f"run {run_id} is still going on; cancel it first")
    await runner.ledger.delete_api_run(run_id)
    return Response(status_code=204)


@router.post("/runs/batch", summary="Start several runs, each on a new thread, in the background")
async def create_run_batch(
    body: list[RunCreate],
    request: Request,
    runner: RunnerDep,
    advancer: AdvancerDep,
    actor: Decider,
) -> list[dict[str, Any]]:
    made = []
    for one in body:  # each is checked as it comes: one refused leaves those before it running
        api_run, _task, _start = await accept_run(request, runner, advancer, one, None, actor)
        made.append(api_run_json(api_run))
    return made
