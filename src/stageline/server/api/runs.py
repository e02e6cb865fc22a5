"""Runs: list and search them, start one, read one, retry, resume and cancel.

Every action is one runner call (DESIGN.md rule 1): the routes check who asks and translate.
Starting answers at once (the server advances the run in the background) unless ``wait`` is
set; a retry or resume answers when the run stops again (it ends or waits for a person).
"""

from __future__ import annotations

import math
from typing import Annotated

from fastapi import APIRouter, Body, Query, status

from stageline.errors import InputError
from stageline.ledger import RunQuery, RunStatus, WaitKind
from stageline.runner import parse_since
from stageline.server._models import (
    EffectOut,
    ForceBody,
    RunDetail,
    RunOut,
    RunPageOut,
    StartBody,
    SummaryOut,
)
from stageline.server.api._common import (
    ERRORS,
    Admin,
    AdvancerDep,
    Decider,
    Reader,
    Responses,
    RunId,
    RunnerDep,
    jsonable,
    run_out,
    summary_out,
    wait_out,
)

__all__ = ["router"]

router = APIRouter(prefix="/v1/runs", tags=["runs"], responses=ERRORS)


def _when(text: str | None, name: str) -> float | None:
    """Epoch seconds, an ISO date or time, or a duration ago (``7d``, ``12h``)."""
    if text is None or not text.strip():
        return None
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        if not math.isfinite(seconds):
            raise InputError(f"{name}: {text.strip()!r} is not a finite number of epoch seconds")
        return seconds
    try:
        return parse_since(text)
    except Exception as exc:
        raise InputError(f"{name}: {exc}".replace("--since", name)) from None


def _statuses(values: list[str]) -> list[str]:
    found = [s.strip() for v in values for s in v.split(",") if s.strip()]
    known = {str(s) for s in RunStatus}
    if bad := [s for s in found if s not in known]:
        raise InputError(f"status {bad[0]!r} is not one of {', '.join(RunStatus)}")
    return found


@router.get("", response_model=RunPageOut, summary="List runs, newest first")
async def list_runs(
    runner: RunnerDep,
    _: Reader,
    status_: Annotated[
        list[str],
        Query(alias="status", description="Only these statuses (repeat, or comma-separated)."),
    ] = [],  # noqa: B006
    template: Annotated[str | None, Query(max_length=300)] = None,
    since: Annotated[
        str | None,
        Query(
            max_length=40, description="Created since: epoch seconds, a date, or `7d`/`12h` ago."
        ),
    ] = None,
    until: Annotated[str | None, Query(max_length=40, description="Created before.")] = None,
    q: Annotated[str | None, Query(max_length=200, description="Text in the inputs.")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Annotated[int, Query(ge=0, le=1_000_000)] = 0,
    cursor: Annotated[
        str | None, Query(max_length=200, description="`next_cursor` of the page before.")
    ] = None,
) -> RunPageOut:
    page = await runner.ledger.search_runs(
        RunQuery(
            statuses=_statuses(status_),
            template=template,
            since=_when(since, "since"),
            until=_when(until, "until"),
            text=q,
            limit=limit,
            offset=offset,
            cursor=cursor,
        )
    )
    return RunPageOut(runs=[run_out(r) for r in page.runs], next_cursor=page.next_cursor)


@router.post(
    "",
    response_model=SummaryOut,
    status_code=status.HTTP_201_CREATED,
    summary="Start a run of a template",
    responses={
        404: {"description": "No such template"},
        409: {"description": "A run with that id exists"},
    },
)
async def start_run(
    body: StartBody, runner: RunnerDep, advancer: AdvancerDep, _: Decider
) -> SummaryOut:
    """The run is created queued and advanced by the server in the background (it survives a
    restart of the server); with ``wait`` the answer comes when it ends or waits. The template
    is looked up by name only (``StartBody`` takes no path): unknown, 404."""
    if body.wait:
        summary = await advancer.run(
            runner.start(
                body.template,
                body.inputs,
                run_id=body.run_id,
                deadlines=body.deadlines,
                budget=body.budget,
            )
        )
        return summary_out(summary)
    run = await runner.create(
        body.template, body.inputs, run_id=body.run_id, deadlines=body.deadlines, budget=body.budget
    )
    await advancer.queue(run.run_id)
    return SummaryOut(run=run_out(run), records=[], state={}, waiting=[])


@router.get(
    "/{run_id}",
    response_model=RunDetail,
    summary="A run: records, decisions, questions, what it waits on, effects, lineage",
    responses={404: {"description": "No such run"}},
)
async def get_run(run_id: RunId, runner: RunnerDep, _: Reader) -> RunDetail:
    summary = await runner.status(run_id)
    base = summary_out(summary)
    forked_from = summary.lineage
    lineage = (
        {
            "forked_from": forked_from.to_dict() if forked_from else None,
            "forks": [f.to_dict() for f in summary.forks],
        }
        if forked_from or summary.forks
        else None
    )
    return RunDetail(
        **base.model_dump(),
        decisions=[wait_out(w) for w in summary.waits if w.kind is WaitKind.GATE],
        questions=[wait_out(w) for w in summary.waits if w.kind is WaitKind.QUESTION],
        interrupts=[wait_out(w) for w in summary.waits if w.kind is WaitKind.INTERRUPT],
        ci=[wait_out(w) for w in summary.waits if w.kind is WaitKind.CI],
        effects=[
            EffectOut.model_validate(jsonable(e.to_dict()))
            for e in await runner.ledger.effects(run_id)
        ],
        lineage=jsonable(lineage) if lineage else None,
    )


_ACTION: Responses = {
    404: {"description": "No such run"},
    409: {"description": "The run's status does not allow this"},
}


@router.post(
    "/{run_id}/retry",
    response_model=SummaryOut,
    responses=_ACTION,
    summary="Retry a failed run from its failed node (attempt + 1)",
)
async def retry_run(
    run_id: RunId,
    runner: RunnerDep,
    advancer: AdvancerDep,
    _: Decider,
    body: Annotated[ForceBody | None, Body()] = None,
) -> SummaryOut:
    force = body.force if body else False
    return summary_out(await advancer.run(runner.retry(run_id, force=force)))


@router.post(
    "/{run_id}/resume",
    response_model=SummaryOut,
    responses=_ACTION,
    summary="Continue a queued or stopped run from its last checkpoint",
)
async def resume_run(
    run_id: RunId,
    runner: RunnerDep,
    advancer: AdvancerDep,
    _: Decider,
    body: Annotated[ForceBody | None, Body()] = None,
) -> SummaryOut:
    force = body.force if body else False
    return summary_out(await advancer.run(runner.resume(run_id, force=force)))


@router.post(
    "/{run_id}/cancel",
    response_model=RunOut,
    responses=_ACTION,
    summary="Cancel a run (at once, or after its current step if it is advancing)",
)
async def cancel_run(run_id: RunId, runner: RunnerDep, _: Admin) -> RunOut:
    return run_out(await runner.cancel(run_id))
