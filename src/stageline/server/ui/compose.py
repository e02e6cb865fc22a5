"""The "New pipeline" page: a goal composed offline, its graph shown before it is saved into
the project's templates folder (saving needs an admin token)."""

from __future__ import annotations

import asyncio
import re
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response

from stageline.architect import Composed, compose_goal, templates_folder
from stageline.errors import StagelineError
from stageline.runner import Runner
from stageline.server.ui._graph import Edge, Node, draw_graph, layout
from stageline.server.ui._session import check_form
from stageline.server.ui._web import (
    PREFIX,
    MaybeSession,
    Viewer,
    forget_template_infos,
    render,
    runner_of,
)
from stageline.templates import (
    CatalogEntry,
    build_catalog,
    measure_stages,
    use_project,
    with_measured,
)

__all__ = ["router"]

router = APIRouter()
NAME = re.compile(r"[a-z0-9][a-z0-9_]{0,59}")
MAX_GOAL = 2000


def _drawn(made: Composed) -> Any:
    from stageline.server.api.templates import _graph  # the one graph the API also serves

    assert made.template is not None
    drawn = _graph(made.template)
    return draw_graph(
        layout(
            [Node(n.id, n.kind) for n in drawn.nodes],
            [Edge(e.source, e.target, e.conditional, e.label) for e in drawn.edges],
        ),
        label=made.name,
    )


def _compose(runner: Runner, goal: str, name: str, save: bool) -> Composed:
    settings = runner.settings
    use_project(settings)
    catalog = build_catalog(settings.root, settings.template_dirs)
    folder = templates_folder(settings)
    return compose_goal(goal, catalog, folder=folder, name=name or None, save=save)


async def _catalog(runner: Runner) -> list[CatalogEntry]:
    """The stage catalog with each stage's measured runs, as the page lists it."""
    settings = runner.settings
    use_project(settings)
    entries = await asyncio.to_thread(build_catalog, settings.root, settings.template_dirs)
    return with_measured(entries, await measure_stages(runner.ledger))


@router.get("/compose")
async def compose_page(request: Request, session: Viewer) -> Response:
    stages = await _catalog(runner_of(request))
    return render(
        request,
        "compose.html",
        session,
        nav="compose",
        goal="",
        tname="",
        made=None,
        stages=stages,
    )


@router.post("/compose")
async def compose(request: Request, session: MaybeSession) -> Response:
    form = await request.form()
    save = form.get("save") == "1"
    fields = await check_form(request, session, "admin" if save else "read")
    assert session is not None
    goal = fields.get("goal", "").strip()[:MAX_GOAL]
    name = fields.get("name", "").strip()
    error, made, graph = None, None, None
    if not goal:
        error = "say what the pipeline is for"
    elif name and not NAME.fullmatch(name):
        error = f"{name[:60]!r} is no template name: lower-case letters, digits and _"
    else:
        try:
            made = await asyncio.to_thread(_compose, runner_of(request), goal, name, save)
            graph = _drawn(made)
        except StagelineError as exc:
            error = str(exc)
    if save and made is not None:
        forget_template_infos()
        session.notice("ok", f"saved {made.path}: run it with stageline run {made.name}")
        return RedirectResponse(f"{PREFIX}/templates?name={made.name}", status_code=303)
    return render(
        request,
        "compose.html",
        session,
        nav="compose",
        goal=goal,
        tname=name or (made.name if made else ""),
        made=made,
        graph=graph,
        error=error,
        stages=await _catalog(runner_of(request)),
    )
