"""What the dashboard's pages share: templates, the runner, the session, safe headers."""

from __future__ import annotations

import json
import time
from datetime import datetime
from importlib import resources
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import Depends, Request
from fastapi.responses import HTMLResponse, Response
from fastapi.templating import Jinja2Templates

from stageline.server.ui._charts import fmt_seconds
from stageline.server.ui._runview import inbox_answer
from stageline.server.ui._session import Session, SignInRequired, current_session
from stageline.templates import TemplateInfo, list_templates

if TYPE_CHECKING:
    from stageline.runner import Runner
    from stageline.server._advancer import Advancer

__all__ = [
    "PREFIX",
    "SECURITY_HEADERS",
    "MaybeSession",
    "Viewer",
    "advancer_of",
    "forget_template_infos",
    "render",
    "runner_of",
    "template_infos",
    "templates",
]

PREFIX = "/ui"
SECURITY_HEADERS = {"Cache-Control": "no-store"}
"""What the dashboard's answers add to the headers every response gets (``server._headers``:
content type, CSP, no framing, no sniffing): they are never cached."""

templates = Jinja2Templates(directory=str(resources.files("stageline.server.ui") / "templates"))


def _when(ts: float | None) -> str:
    return "—" if ts is None else datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S")


def _ago(ts: float | None) -> str:
    if ts is None:
        return "—"
    gone = time.time() - ts
    if gone < 0:
        return "in " + fmt_seconds(-gone)
    return fmt_seconds(gone) + " ago" if gone >= 1 else "just now"


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, default=str, ensure_ascii=False, sort_keys=True)


templates.env.filters.update(
    when=_when, ago=_ago, seconds=fmt_seconds, pretty=_pretty, inbox_answer=inbox_answer
)


_TEMPLATES: dict[str, tuple[float, list[TemplateInfo]]] = {}
TEMPLATES_TTL = 30.0
"""Seconds the list of templates is kept: finding them (entry points, folders) is slow."""


def forget_template_infos() -> None:
    """Look the templates up again on the next page (a page saved a new one)."""
    _TEMPLATES.clear()


def template_infos(runner: Runner) -> list[TemplateInfo]:
    """The templates that can be started (looked up again every ``TEMPLATES_TTL`` seconds)."""
    key = repr(list(runner.settings.template_dirs))
    kept = _TEMPLATES.get(key)
    if kept is None or time.monotonic() - kept[0] > TEMPLATES_TTL:
        kept = (time.monotonic(), list_templates(runner.settings.template_dirs))
        _TEMPLATES[key] = kept
    return kept[1]


def runner_of(request: Request) -> Runner:
    runner: Runner = request.app.state.host.state.runner
    return runner


def advancer_of(request: Request) -> Advancer:
    advancer: Advancer = request.app.state.host.state.advancer
    return advancer


async def _maybe_session(request: Request) -> Session | None:
    return await current_session(request, runner_of(request))


async def _viewer(request: Request) -> Session:
    session = await _maybe_session(request)
    if session is None:
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        raise SignInRequired(target)
    return session


MaybeSession = Annotated[Session | None, Depends(_maybe_session)]
Viewer = Annotated[Session, Depends(_viewer)]


def render(
    request: Request,
    name: str,
    session: Session | None,
    *,
    status_code: int = 200,
    fragment: bool = False,
    **context: Any,
) -> Response:
    """Page ``name`` with the session, its CSRF token and its notices (shown once). A
    ``fragment`` (what a page's script fetches to stay current) shows no notice, so it leaves
    them for the next page: taken by a refresh of another tab between a form's answer and the
    page it leads to, a notice ("already answered", an error) would never be seen."""
    notices = session.take_notices() if session is not None and not fragment else []
    page: HTMLResponse = templates.TemplateResponse(
        request,
        name,
        {
            "session": session,
            "csrf": session.csrf if session else "",
            "notices": notices,
            "prefix": PREFIX,
            "now": time.time(),
            **context,
        },
        status_code=status_code,
    )
    page.headers.update(SECURITY_HEADERS)
    return page
