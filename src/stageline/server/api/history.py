"""A run's checkpoints (``history``) and forks from one of them (admin), through the runner."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, status
from pydantic import BaseModel, ConfigDict, Field

from stageline.names import RUN_ID_PATTERN
from stageline.server._models import SummaryOut
from stageline.server.api._common import (
    ERRORS,
    Admin,
    AdvancerDep,
    Reader,
    Responses,
    RunId,
    RunnerDep,
    jsonable,
    summary_out,
)

__all__ = ["router"]

router = APIRouter(prefix="/v1/runs/{run_id}", tags=["history and forks"], responses=ERRORS)

_404: Responses = {404: {"description": "No such run"}}


class CheckpointOut(BaseModel):
    run_id: str
    checkpoint_id: str
    parent_id: str | None = None
    step: int
    node: str
    nodes: list[str]
    next: list[str]
    source: str
    created_at: float
    values: dict[str, Any]
    changed: dict[str, Any] = {}
    interrupts: list[dict[str, Any]] = []


class ForkBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    at_step: Annotated[int | None, Field(ge=0, le=1_000_000)] = Field(
        None, description="Run the nodes of this step again (its parent's state, changed)."
    )
    checkpoint_id: str | None = Field(
        None, max_length=100, description="Or: start from this checkpoint (see history)."
    )
    changes: dict[str, Any] = Field(
        default_factory=dict, description="State keys to change in the fork."
    )
    run_id: str | None = Field(
        None, pattern=f"^{RUN_ID_PATTERN.pattern}$", description="The fork's id."
    )
    wait: bool = Field(False, description="Answer when the fork ends or waits, not at once.")
    force: bool = False


@router.get(
    "/history",
    response_model=list[CheckpointOut],
    responses=_404,
    summary="Every checkpoint of the run: step, node, time, checkpoint id, state",
)
async def history(run_id: RunId, runner: RunnerDep, _: Reader) -> list[CheckpointOut]:
    return [
        CheckpointOut.model_validate(jsonable(c.to_dict())) for c in await runner.history(run_id)
    ]


@router.post(
    "/fork",
    response_model=SummaryOut,
    status_code=status.HTTP_201_CREATED,
    responses={
        **_404,
        409: {"description": "The template changed since (force), or the fork's id is taken"},
    },
    summary="Start a new run from one of this run's checkpoints, with changed state",
)
async def fork(
    run_id: RunId, body: ForkBody, runner: RunnerDep, advancer: AdvancerDep, _: Admin
) -> SummaryOut:
    """The fork records its lineage; the original is only read. It is advanced in the
    background (or, with ``wait``, before the answer)."""
    options: dict[str, Any] = dict(
        at_step=body.at_step,
        checkpoint_id=body.checkpoint_id,
        changes=body.changes,
        fork_id=body.run_id,
        force=body.force,
    )
    if body.wait:
        return summary_out(await advancer.run(runner.fork(run_id, **options)))
    made = await runner.fork(run_id, advance=False, **options)
    await advancer.queue(made.run.run_id)
    return summary_out(made)
