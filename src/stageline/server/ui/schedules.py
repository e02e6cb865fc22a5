"""The schedules page: every schedule, when it fires next, and the runs it started."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from stageline.server.ui._web import Viewer, render, runner_of

__all__ = ["router"]

router = APIRouter()
RECENT = 5
"""Firings shown per schedule (the newest)."""


@router.get("/schedules")
async def schedules(request: Request, session: Viewer) -> Response:
    ledger = runner_of(request).ledger
    rows = [
        (cron, (await ledger.cron_fires(cron.cron_id))[:RECENT]) for cron in await ledger.crons()
    ]
    return render(request, "schedules.html", session, nav="schedules", rows=rows)
