"""Decision links: ``GET /links/{token}`` shows what the link would decide and asks to confirm
(a link scanner's GET decides nothing); ``POST`` decides, once. A used, expired, tampered or
stale link gets a page saying so, with a 4xx status."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import HTMLResponse
from markupsafe import Markup

from stageline.errors import StagelineError
from stageline.events._links import LinkClaim, LinkRefused
from stageline.ledger import WaitStatus
from stageline.server._headers import csp_hash
from stageline.server._state import get_advancer
from stageline.server.chat._runtime import ChatRuntime, get_chat

__all__ = ["router"]

router = APIRouter(prefix="/links", tags=["chat"], include_in_schema=False)
Chat = Annotated[ChatRuntime, Depends(get_chat)]
TOKEN = r"^[A-Za-z0-9_\-]{1,2000}\.[A-Za-z0-9_\-]{1,100}$"
_VERBS = {
    "approve": "Approve",
    "reject": "Reject",
    "changes": "Request changes at",
    "takeover": "Take over at",
}
_TAKEOVER = Markup(
    "<p>Taking over ends the run <b>taken_over</b>: stageline stops, and its work (such as its "
    "branch and worktree) is left as it is for you to carry on.</p>"
)
_STYLE = (
    "body{font:16px system-ui,sans-serif;max-width:40em;margin:3em auto;padding:0 1em}"
    "button{font-size:1em;padding:.5em 1.2em}textarea{width:100%}"
)
_HEADERS = {
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",  # the address holds the link's token
    "X-Robots-Tag": "noindex",
    "Content-Security-Policy": (
        f"default-src 'none'; style-src {csp_hash(_STYLE)}; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    ),
}


def _page(title: str, body: Markup, status: int = 200) -> HTMLResponse:
    """A page: ``title`` is text (escaped); ``body`` is markup built with ``Markup.format``, so
    every value put into it is escaped too."""
    return HTMLResponse(
        Markup(
            "<!doctype html><html lang=en><head><meta charset=utf-8>"
            "<meta name=viewport content='width=device-width'><meta name=robots content=noindex>"
            "<title>{} · stageline</title><style>{}</style></head><body><h1>{}</h1>{}</body></html>"
        ).format(title, Markup(_STYLE), title, body),
        status_code=status,
        headers=_HEADERS,
    )


def _refused(why: str, status: int) -> HTMLResponse:
    return _page("This link cannot decide anything", Markup("<p>{}</p>").format(why), status)


async def _claim(chat: ChatRuntime, token: str) -> LinkClaim | HTMLResponse:
    if chat.links is None:
        return _refused("Decision links are off on this server (no public_url).", 404)
    import re

    if not re.fullmatch(TOKEN, token):
        return _refused("This is not a stageline decision link.", 400)
    try:
        return await chat.links.check(token)
    except LinkRefused as exc:
        return _refused(exc.reason, exc.status)


async def _waiting(chat: ChatRuntime, claim: LinkClaim) -> str | None:
    """Why the gate no longer waits for this link, or None while it does."""
    waits = [w for w in await chat.runner.ledger.waits(claim.run_id) if w.wait_id == claim.wait_id]
    if not waits:
        return "The run no longer has this gate."
    last = max(waits, key=lambda w: w.round)
    if last.status in (WaitStatus.DECIDED, WaitStatus.APPLIED):
        return f"Already decided: {last.decision} by {last.actor}."
    if last.status is not WaitStatus.PENDING:
        return f"The gate is no longer waiting ({last.status})."
    if last.attempt != claim.attempt or (last.state_hash or "") != claim.state_hash:
        return "The run has moved on since this link was made (another attempt or state)."
    return None


@router.get("/{token}", response_class=HTMLResponse)
async def confirm(token: str, chat: Chat) -> HTMLResponse:
    claim = await _claim(chat, token)
    if isinstance(claim, HTMLResponse):
        return claim
    why = await _waiting(chat, claim)
    if why is not None:
        return _refused(why, 409)
    verb = _VERBS[claim.decision]
    note = Markup(
        "<p><label>What should change?<br><textarea name=note rows=5 required>"
        "</textarea></label></p>"
        if claim.decision == "changes"
        else "<p><label>Note (optional)<br><textarea name=note rows=3></textarea></label></p>"
    )
    return _page(
        f"{verb} gate {claim.gate}?",
        Markup(
            "<p>Run <code>{}</code>, gate <b>{}</b>, attempt {}.</p>{}"
            "<p>Nothing is decided until you confirm.</p>"
            "<form method=post>{}<button type=submit>Confirm: {}</button></form>"
        ).format(
            claim.run_id,
            claim.gate,
            claim.attempt,
            _TAKEOVER if claim.decision == "takeover" else "",
            note,
            verb.lower(),
        ),
    )


@router.post("/{token}", response_class=HTMLResponse)
async def decide(
    token: str, request: Request, chat: Chat, note: Annotated[str, Form(max_length=4000)] = ""
) -> HTMLResponse:
    claim = await _claim(chat, token)
    if isinstance(claim, HTMLResponse):
        return claim
    assert chat.links is not None
    why = await _waiting(chat, claim)
    if why is None and claim.decision == "changes" and not note.strip():
        return _refused("A request for changes needs a note saying what to change.", 400)
    if why is None and not await chat.links.use(token):
        why = "This link was used already."
    if why is not None:
        return _refused(why, 409)
    runner = chat.runner
    actor = f"link:{claim.decision}"
    common = dict(
        gate=claim.gate,
        actor=actor,
        attempt=claim.attempt,
        state_hash=claim.state_hash or None,
        wait_id=claim.wait_id,
        note=note.strip() or None,
    )
    if claim.decision == "approve":
        work = runner.approve(claim.run_id, **common)  # type: ignore[arg-type]
    elif claim.decision == "reject":
        work = runner.reject(claim.run_id, **common)  # type: ignore[arg-type]
    elif claim.decision == "takeover":
        work = runner.take_over(claim.run_id, **common)  # type: ignore[arg-type]
    else:
        common["note"] = note.strip()
        work = runner.request_changes(claim.run_id, **common)  # type: ignore[arg-type]
    try:
        summary = await get_advancer(request).run(work)
    except StagelineError as exc:
        return _refused(f"Nothing was changed: {exc}", 409)
    return _page(
        "Done",
        Markup(
            "<p>{} gate <b>{}</b> of run <code>{}</code>: recorded. The run is now {}.</p>"
        ).format(_VERBS[claim.decision], claim.gate, claim.run_id, summary.run.status),
    )
