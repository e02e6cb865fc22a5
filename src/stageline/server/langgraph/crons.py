"""``/runs/crons``: schedules (LangGraph's crons) that start runs of an assistant: create (for
a new thread each time, or to start one thread), search, count, update, delete. Whichever
stageline process serves or works fires them (``runner.schedules``)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Response

from stageline.ledger import Cron
from stageline.runner import Runner
from stageline.server._auth import require_scope
from stageline.server._state import get_runner
from stageline.server.langgraph._assistants import find_assistant
from stageline.server.langgraph._errors import LANGGRAPH_ERRORS
from stageline.server.langgraph._lookup import find_thread, unprocessable
from stageline.server.langgraph._mapping import iso, jsonable
from stageline.server.langgraph._models import CronCount, CronCreate, CronPatch, CronSearch

__all__ = ["cron_json", "router"]

router = APIRouter(tags=["langgraph: crons"], responses=LANGGRAPH_ERRORS)
Reader = Annotated[str, Depends(require_scope("read"))]
Decider = Annotated[str, Depends(require_scope("decide"))]
Admin = Annotated[str, Depends(require_scope("admin"))]
RunnerDep = Annotated[Runner, Depends(get_runner)]

_SORT = {"next_run_date": "next_run_at"}


def cron_json(cron: Cron) -> dict[str, Any]:
    """A LangGraph ``Cron``."""
    return {
        "cron_id": cron.cron_id,
        "assistant_id": cron.assistant_id,
        "thread_id": cron.thread_id,
        "on_run_completed": None,
        "end_time": iso(cron.end_time),
        "schedule": cron.schedule,
        "timezone": cron.timezone,
        "created_at": iso(cron.created_at),
        "updated_at": iso(cron.updated_at),
        "payload": jsonable({**cron.payload, "schedule": cron.schedule}),
        "user_id": cron.created_by,
        "next_run_date": iso(cron.next_run_at),
        "metadata": jsonable(cron.metadata),
        "enabled": cron.enabled,
    }


async def _create(runner: Runner, body: CronCreate, thread_id: str | None, actor: str) -> Cron:
    found = await find_assistant(runner, body.assistant_id)  # a template, or one made of it
    with unprocessable():
        return await runner.schedules.add(
            found.graph_id,
            body.schedule,
            inputs=body.input,
            context=body.context,
            metadata=body.metadata,
            thread_id=thread_id,
            timezone=body.timezone,
            end_time=body.end_time.timestamp() if body.end_time else None,
            enabled=body.enabled,
            created_by=actor,
            extra={"config": body.config} if body.config else None,
            assistant_id=found.assistant_id,
        )


@router.post("/runs/crons", summary="Schedule runs of an assistant, each on a new thread")
async def create_cron(body: CronCreate, runner: RunnerDep, actor: Decider) -> dict[str, Any]:
    return cron_json(await _create(runner, body, None, actor))


@router.post(
    "/threads/{thread_id}/runs/crons",
    summary="Schedule the start of an empty thread (a thread runs once: later times skip it)",
)
async def create_thread_cron(
    thread_id: str, body: CronCreate, runner: RunnerDep, actor: Decider
) -> dict[str, Any]:
    run, _meta = await find_thread(runner, thread_id)
    if run is not None:
        raise HTTPException(
            409,
            f"thread {thread_id} has started already, and a thread runs once; schedule the "
            "assistant instead (crons.create: a new thread at each time)",
        )
    return cron_json(await _create(runner, body, thread_id, actor))


async def _matching(runner: Runner, body: CronSearch | CronCount) -> list[Cron]:
    return await runner.ledger.crons(
        assistant_id=body.assistant_id,
        thread_id=body.thread_id,
        enabled=body.enabled if isinstance(body, CronSearch) else None,
        metadata=body.metadata,
    )


@router.post("/runs/crons/search", summary="Search schedules")
async def search_crons(body: CronSearch, runner: RunnerDep, _actor: Reader) -> list[dict[str, Any]]:
    found = await _matching(runner, body)
    if body.sort_by:
        key = _SORT.get(body.sort_by, body.sort_by)
        found.sort(key=lambda c: (getattr(c, key) is None, getattr(c, key) or 0))
    if body.sort_order == "desc" or (body.sort_by and body.sort_order is None):
        found.reverse()
    page = [cron_json(c) for c in found[body.offset : body.offset + body.limit]]
    if body.select:
        return [{k: v for k, v in c.items() if k in body.select} for c in page]
    return page


@router.post("/runs/crons/count", summary="Count schedules")
async def count_crons(body: CronCount, runner: RunnerDep, _actor: Reader) -> int:
    return len(await _matching(runner, body))


@router.patch("/runs/crons/{cron_id}", summary="Change a schedule (its next time counted again)")
async def update_cron(
    cron_id: str, body: CronPatch, runner: RunnerDep, _actor: Decider
) -> dict[str, Any]:
    changes = {k: getattr(body, k) for k in body.model_fields_set}
    if "end_time" in changes:
        changes["end_time"] = body.end_time.timestamp() if body.end_time else None
    if "metadata" in changes:
        changes["metadata"] = body.metadata or {}
    for key in ("schedule", "enabled"):
        if key in changes and changes[key] is None:
            raise HTTPException(422, f"{key} cannot be null")
    with unprocessable():
        cron = await runner.schedules.update(cron_id, changes)
    if cron is None:
        raise HTTPException(404, f"cron {cron_id!r} not found")
    return cron_json(cron)


@router.delete("/runs/crons/{cron_id}", status_code=204, summary="Delete a schedule")
async def delete_cron(cron_id: str, runner: RunnerDep, _actor: Admin) -> Response:
    if not await runner.ledger.delete_cron(cron_id):
        raise HTTPException(404, f"cron {cron_id!r} not found")
    return Response(status_code=204)
