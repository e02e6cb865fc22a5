"""Pages across runs: the inbox (what waits for a person), stats, and the templates."""

from __future__ import annotations

import re
import time
from collections import Counter
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from stageline.errors import StagelineError
from stageline.ledger import Outcome, RunQuery
from stageline.runner import parse_since, percentile
from stageline.runner._stats import summarize
from stageline.server.ui._charts import Series, bar_chart, line_chart
from stageline.server.ui._graph import draw_graph
from stageline.server.ui._runview import template_layout
from stageline.server.ui._web import Viewer, render, runner_of, template_infos

__all__ = ["router"]

router = APIRouter()
TEMPLATE_NAME = r"[A-Za-z0-9_][A-Za-z0-9_-]{0,99}"


@router.get("/inbox")
async def inbox(request: Request, session: Viewer) -> Response:
    runner = runner_of(request)
    waits = sorted(await runner.pending(), key=lambda w: w.requested_at)
    runs = {}
    for w in waits:
        if w.run_id not in runs:
            runs[w.run_id] = await runner.ledger.get_run(w.run_id)
    return render(request, "inbox.html", session, nav="inbox", waits=waits, runs=runs)


def _buckets(rows: list[Outcome]) -> float:
    """A bucket width that gives a readable number of points over the rows' time span."""
    if not rows:
        return 60.0
    span = max(r.finished_at for r in rows) - min(r.finished_at for r in rows)
    for width in (1.0, 10.0, 60.0, 600.0, 3600.0, 6 * 3600.0, 86400.0, 7 * 86400.0):
        if span / width <= 40:
            return width
    return 30 * 86400.0


def _node_charts(rows: list[Outcome], width: float) -> dict[str, Any]:
    by_time: dict[float, list[float]] = {}
    for r in rows:
        by_time.setdefault(r.finished_at // width * width, []).append(r.latency)
    times = sorted(by_time)
    latency = line_chart(
        [
            Series("p50", [(t, percentile(by_time[t], 50) or 0.0) for t in times]),
            Series("p95", [(t, percentile(by_time[t], 95) or 0.0) for t in times]),
        ],
        title="latency p50 and p95 over time",
    )
    return {"latency": latency}


@router.get("/stats")
async def stats(
    request: Request,
    session: Viewer,
    template: Annotated[str | None, Query(max_length=100)] = None,
    since: Annotated[str | None, Query(max_length=40)] = None,
) -> Response:
    runner = runner_of(request)
    error = None
    try:
        cutoff = parse_since(since) if since else None
    except StagelineError as exc:
        error, cutoff = str(exc), None
    rows = await runner.ledger.outcomes(template=template or None, since=cutoff, limit=50_000)
    width = _buckets(rows)
    by_node: dict[tuple[str, str], list[Outcome]] = {}
    for r in rows:
        by_node.setdefault((r.template, r.node), []).append(r)
    cards = []
    for entry in summarize(rows):
        mine = by_node[(entry["template"], entry["node"])]
        charts = _node_charts(mine, width)
        phases = {k: v for k, v in entry["failure_rate_by_phase"].items()}
        charts["phases"] = bar_chart(phases, percent=True, title="failure rate by phase")
        alts = entry["alternatives"]
        charts["picks"] = (
            bar_chart({a["alternative"]: float(a["count"]) for a in alts}, title="router picks")
            if alts
            else None
        )
        cards.append({**entry, **charts})
    groups: dict[str, dict[str, Any]] = {}
    for card in cards:
        group = groups.setdefault(card["template"], {"cards": [], "tokens": {}, "cost": {}})
        group["cards"].append(card)
        group["tokens"][card["node"]] = float(card["tokens"])
        group["cost"][card["node"]] = float(card["cost"])
    for group in groups.values():
        group["tokens_chart"] = bar_chart(group["tokens"], title="tokens by node")
        group["cost_chart"] = bar_chart(group["cost"], unit=" $", title="cost by node")
    names = sorted({t.name for t in template_infos(runner)} | {r.template for r in rows})
    return render(
        request,
        "stats.html",
        session,
        nav="stats",
        groups=groups,
        template=template,
        since=since or "",
        names=names,
        error=error,
        count=len(rows),
        bucket=width,
    )


async def _versions(request: Request, name: str) -> list[tuple[str, int, float]]:
    """(version, runs, last seen) among the template's last 1000 runs."""
    page = await runner_of(request).ledger.search_runs(RunQuery(template=name, limit=1000))
    counts = Counter(r.template_version for r in page.runs)
    last: dict[str, float] = {}
    for r in page.runs:
        last[r.template_version] = max(last.get(r.template_version, 0.0), r.created_at)
    return sorted(((v, n, last[v]) for v, n in counts.items()), key=lambda x: -x[2])


@router.get("/templates")
async def templates_page(
    request: Request, session: Viewer, name: Annotated[str | None, Query(max_length=100)] = None
) -> Response:
    runner = runner_of(request)
    cards = []
    for info in template_infos(runner):
        if name and info.name != name:
            continue
        card: dict[str, Any] = {"name": info.name, "origin": info.origin, "error": None}
        try:
            made = runner.load(info.name) if re.fullmatch(TEMPLATE_NAME, info.name) else None
            if made is None:
                raise StagelineError(f"{info.name!r} is not a template name")
            card.update(
                version=made.full_version,
                description=made.description,
                gates=sorted(made.gates),
                questions=sorted(made.questions),
                graph=draw_graph(template_layout(runner, info.name), label=info.name),
            )
        except Exception as exc:  # one broken template must not hide the others
            card["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        card["versions"] = await _versions(request, info.name)
        cards.append(card)
    return render(
        request, "templates.html", session, nav="templates", cards=cards, clock=time.time()
    )
