"""The runs list (searched and paged as in the API, refreshed live) and a run's page."""

from __future__ import annotations

import time
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from stageline.errors import InputError, RunNotFound, StagelineError
from stageline.ledger import EffectStatus, EventCategory, RunQuery, RunStatus, WaitKind
from stageline.names import RUN_ID_PATTERN
from stageline.runner import parse_since
from stageline.server.ui._charts import timeline
from stageline.server.ui._runview import latest_records, run_graph
from stageline.server.ui._web import Viewer, render, runner_of, template_infos

__all__ = ["router"]

router = APIRouter()
PAGE = 50
_ENDED = tuple(s for s in RunStatus if s.terminal or s is RunStatus.FAILED)


def _when(text: str | None) -> float | None:
    if not text or not text.strip():
        return None
    try:
        return float(text)
    except ValueError:
        return parse_since(text.strip())


async def _runs_context(
    request: Request,
    status: list[str],
    template: str | None,
    q: str | None,
    since: str | None,
    until: str | None,
    cursor: str | None,
) -> dict[str, Any]:
    runner = runner_of(request)
    error = None
    wanted = [s for v in status for s in v.split(",") if s in {str(x) for x in RunStatus}]
    query = RunQuery(
        statuses=wanted,
        template=template or None,
        text=q or None,
        limit=PAGE,
        cursor=cursor or None,
    )
    try:
        query = RunQuery(**{**query.__dict__, "since": _when(since), "until": _when(until)})
        page = await runner.ledger.search_runs(query)
    except StagelineError as exc:
        error, page = str(exc), None
    runs = page.runs if page else []
    waits: dict[str, str] = {}
    for run in runs:
        if run.status in (RunStatus.WAITING, RunStatus.PARKED):
            pending = await runner.ledger.pending_waits(run_id=run.run_id)
            waits[run.run_id] = ", ".join(
                "CI" if w.kind is WaitKind.CI else f"{w.kind} {w.name}" for w in pending
            )
    params = [("status", s) for s in wanted] + [
        (k, v)
        for k, v in (("template", template), ("q", q), ("since", since), ("until", until))
        if v
    ]
    return {
        "runs": runs,
        "waits": waits,
        "error": error,
        "statuses": [str(s) for s in RunStatus],
        "wanted": wanted,
        "template": template or "",
        "q": q or "",
        "since": since or "",
        "until": until or "",
        "cursor": cursor or "",
        "next_cursor": page.next_cursor if page else None,
        "params": params,
        "templates": [t.name for t in template_infos(runner)],
        "clock": time.time(),
    }


Statuses = Annotated[list[str], Query(max_length=40)]
Text = Annotated[str | None, Query(max_length=200)]


@router.get("/")
@router.get("/runs")
async def runs_page(
    request: Request,
    session: Viewer,
    status: Statuses = [],  # noqa: B006
    template: Text = None,
    q: Text = None,
    since: Text = None,
    until: Text = None,
    cursor: Text = None,
) -> Response:
    context = await _runs_context(request, status, template, q, since, until, cursor)
    return render(request, "runs.html", session, nav="runs", **context)


@router.get("/runs/rows")
async def runs_rows(
    request: Request,
    session: Viewer,
    status: Statuses = [],  # noqa: B006
    template: Text = None,
    q: Text = None,
    since: Text = None,
    until: Text = None,
    cursor: Text = None,
) -> Response:
    """The table's rows alone: what the page's script fetches to stay current."""
    context = await _runs_context(request, status, template, q, since, until, cursor)
    return render(request, "_run_rows.html", session, fragment=True, **context)


def _check_id(run_id: str) -> None:
    if not RUN_ID_PATTERN.fullmatch(run_id):
        raise InputError(f"{run_id[:40]!r} is not a run id")


async def _run_context(request: Request, run_id: str, *, full: bool) -> dict[str, Any]:
    runner = runner_of(request)
    summary = await runner.status(run_id)
    run = summary.run
    records = summary.records
    events = await runner.ledger.events(run_id, after=max(0, run.last_seq - 400))
    svg, statuses = run_graph(runner, run, records, summary.waits)
    end = run.finished_at if run.status in _ENDED else None
    context: dict[str, Any] = {
        "run": run,
        "summary": summary,
        "records": records,
        "statuses": statuses,
        "graph": svg,
        "pending": summary.waiting,
        "timeline": timeline(records, events, start=run.created_at, end=end),
        "duration": (end or time.time()) - run.created_at,
        "ended": run.status in _ENDED,
        "events": events[-200:],
        "taken_over": next(
            (e.message for e in reversed(events) if e.kind == "run.taken_over"), None
        ),
    }
    if not full:
        return context
    transcripts: dict[str, list[Any]] = {}
    for e in events:
        if e.node and e.category is not EventCategory.LIFECYCLE:
            transcripts.setdefault(e.node, []).append(e)
    try:
        history = await runner.history(run_id)
    except StagelineError:
        history = []
    effects = await runner.ledger.effects(run_id)
    doubtful = [
        e
        for e in effects
        if e.status is EffectStatus.STARTED and run.status is not RunStatus.RUNNING
    ]
    context.update(
        latest=latest_records(records),
        transcripts=transcripts,
        history=history,
        effects=effects,
        doubtful=doubtful,
        gates=[w for w in summary.waits if w.kind is WaitKind.GATE],
        questions=[w for w in summary.waits if w.kind is WaitKind.QUESTION],
        interrupts=[w for w in summary.waits if w.kind is WaitKind.INTERRUPT],
        ci_waits=[w for w in summary.waits if w.kind is WaitKind.CI],
        lineage=summary.lineage,
        forks=summary.forks,
        steps=sorted({h.step for h in history if h.step >= 0}),
    )
    return context


@router.get("/runs/{run_id}")
async def run_page(request: Request, run_id: str, session: Viewer) -> Response:
    try:
        _check_id(run_id)
        context = await _run_context(request, run_id, full=True)
    except (RunNotFound, InputError) as exc:
        return render(
            request, "missing.html", session, status_code=404, message=str(exc), nav="runs"
        )
    return render(request, "run.html", session, nav="runs", **context)


@router.get("/runs/{run_id}/live")
async def run_live(
    request: Request, run_id: str, session: Viewer, after: Annotated[int, Query(ge=0, le=2**53)] = 0
) -> Response:
    """The parts of a run page that change as it advances (its script swaps them in)."""
    try:
        _check_id(run_id)
        context = await _run_context(request, run_id, full=False)
    except (RunNotFound, InputError) as exc:
        return Response(str(exc), status_code=404)
    context["new_events"] = [e for e in context["events"] if e.seq > after]
    return render(request, "_run_live.html", session, fragment=True, **context)
