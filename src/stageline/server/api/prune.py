"""``POST /v1/prune``: delete old runs (admin), as ``stageline prune`` does."""

from __future__ import annotations

import typing
from typing import Literal

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from stageline.runner import PRUNED_BY_DEFAULT
from stageline.server.api._common import ERRORS, Admin, RunnerDep
from stageline.stages import parse_duration

__all__ = ["router"]

router = APIRouter(prefix="/v1", tags=["runs"], responses=ERRORS)


Prunable = Literal["succeeded", "failed", "cancelled", "rejected", "waiting", "queued"]


def _by_default() -> list[Prunable]:
    return [typing.cast(Prunable, str(s)) for s in PRUNED_BY_DEFAULT]


class PruneBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    older_than: str = Field(
        max_length=40, description="Runs not updated for this long: `30d`, `12h`, or seconds."
    )
    statuses: list[Prunable] = Field(default_factory=_by_default, max_length=6)
    vacuum: bool = Field(
        default=False,
        description="Then give the space back (SQLite: VACUUM, the file shrinks; Postgres: a "
        "plain VACUUM of the ledger's tables).",
    )


class PruneOut(BaseModel):
    cutoff: float
    pruned: list[str]
    size_before: int | None = Field(default=None, description="With `vacuum`: bytes before.")
    size_after: int | None = Field(default=None, description="With `vacuum`: bytes after.")


@router.post(
    "/prune",
    response_model=PruneOut,
    summary="Delete old runs' checkpoints and ledger rows; their outcomes are kept",
)
async def prune(body: PruneBody, runner: RunnerDep, _: Admin) -> PruneOut:
    report = await runner.prune(
        older_than=parse_duration(body.older_than, "older_than"),
        statuses=body.statuses,
        vacuum=body.vacuum,
    )
    sizes = report.reclaimed
    return PruneOut(
        cutoff=report.cutoff,
        pruned=report.run_ids,
        size_before=sizes.before if sizes else None,
        size_after=sizes.after if sizes else None,
    )
