"""``GET /v1/stats``: how each node (and router alternative) has done, from outcomes."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import BaseModel

from stageline.runner import outcome_stats, parse_since
from stageline.server.api._common import ERRORS, Reader, RunnerDep, jsonable

__all__ = ["router"]

router = APIRouter(prefix="/v1", tags=["stats"], responses=ERRORS)


class StatsOut(BaseModel):
    template: str | None
    since: float | None
    percentiles: str
    outcomes: int
    nodes: list[dict[str, Any]]
    """Per (template, node): count, failure rates by phase, latency p50/p95, tokens, cost,
    quality, and ``alternatives`` where a router chose."""


@router.get("/stats", response_model=StatsOut,
            summary="Per node: runs, latency p50/p95, failure rate by phase, tokens, cost")
async def stats(
    runner: RunnerDep, _: Reader,
    template: Annotated[str | None, Query(max_length=300)] = None,
    since: Annotated[str | None, Query(max_length=40,
                                       description="`7d`, `12h`, or a date")] = None,
) -> StatsOut:
    found = await outcome_stats(runner.ledger, template=template, since=parse_since(since))
    return StatsOut.model_validate(jsonable(found))
