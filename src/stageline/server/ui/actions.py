"""The dashboard's forms: decide, answer, respond (interrupts), settle effects, retry, resume,
cancel, fork.

Each is one runner call, as the API makes it (DESIGN.md rule 8), with the session's token name
as actor; each checks origin, CSRF token and scope first. A decision that came too late (stale,
already decided, no longer waiting) is a notice on the run page, not an error page.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse, RedirectResponse, Response

from stageline.errors import (
    AlreadyDecided,
    ConflictError,
    InputError,
    RunNotFound,
    StagelineError,
    StaleDecision,
    UsageError,
)
from stageline.names import RUN_ID_PATTERN
from stageline.runner import RunSummary
from stageline.server.ui._session import Session, check_form
from stageline.server.ui._web import PREFIX, MaybeSession, advancer_of, runner_of

__all__ = ["router"]

router = APIRouter()


def _back(run_id: str, anchor: str = "") -> Response:
    return RedirectResponse(f"{PREFIX}/runs/{run_id}{anchor}", status_code=303)


def _outcome(summary: RunSummary) -> str:
    waiting = ", ".join(w.name for w in summary.waiting)
    return f"run {summary.run.run_id} is {summary.run.status}" + (
        f" (waiting on {waiting})" if waiting else ""
    )


async def _act(
    request: Request,
    session: Session | None,
    run_id: str,
    needed: str,
    act: Callable[[dict[str, str], str], Awaitable[Any]],
) -> Response:
    """Check the form, do ``act(form, actor)``, and say how it went on the run page."""
    form = await check_form(request, session, needed)  # origin and CSRF before anything else
    if not RUN_ID_PATTERN.fullmatch(run_id):
        return PlainTextResponse(f"{run_id[:40]!r} is not a run id", status_code=404)
    assert session is not None
    try:
        done = await act(form, session.name)
    except (AlreadyDecided, StaleDecision) as exc:
        session.notice("info", str(exc))
    except RunNotFound as exc:
        return PlainTextResponse(str(exc), status_code=404)
    except ConflictError as exc:
        session.notice("info", str(exc))
    except (UsageError, StagelineError) as exc:
        session.notice("error", str(exc))
    else:
        session.notice("ok", done if isinstance(done, str) else "done")
    return _back(run_id)


def _int(text: str | None) -> int | None:
    return int(text) if text and text.strip().lstrip("-").isdigit() else None


@router.post("/runs/{run_id}/decide")
async def decide(request: Request, run_id: str, session: MaybeSession) -> Response:
    async def act(form: dict[str, str], actor: str) -> str:
        runner, decision = runner_of(request), form.get("decision")
        common: dict[str, Any] = dict(
            gate=form.get("gate") or None,
            actor=actor,
            attempt=_int(form.get("attempt")),
            state_hash=form.get("state_hash") or None,
            wait_id=form.get("wait_id") or None,  # the visit the page showed: a later one refuses
        )
        note = (form.get("note") or "").strip() or None
        if decision == "approve":
            work = runner.approve(run_id, note=note, **common)
        elif decision == "reject":
            work = runner.reject(run_id, note=note, **common)
        elif decision == "changes":
            work = runner.request_changes(run_id, note=note or "", **common)
        elif decision == "takeover":
            work = runner.take_over(run_id, note=note, **common)
        else:
            raise InputError("decision must be approve, reject, changes or takeover")
        summary = await advancer_of(request).run(work)
        return f"{decision}: {_outcome(summary)}"

    return await _act(request, session, run_id, "decide", act)


def _answers(form: dict[str, str]) -> dict[str, Any]:
    """``a.<question id>`` fields; an empty one is left out (a default fills it, or the runner
    says that the question needs an answer)."""
    return {
        key[2:]: value
        for key, value in form.items()
        if key.startswith("a.") and value.strip() != ""
    }


@router.post("/runs/{run_id}/answer")
async def answer(request: Request, run_id: str, session: MaybeSession) -> Response:
    async def act(form: dict[str, str], actor: str) -> str:
        answers = _answers(form)
        summary = await advancer_of(request).run(
            runner_of(request).answer(
                run_id,
                answers,
                question_id=form.get("question_id") or None,
                actor=actor,
                defaults=True,
            )
        )
        return f"answered: {_outcome(summary)}"

    return await _act(request, session, run_id, "decide", act)


def _response(form: dict[str, str]) -> Any:
    """The answer to an interrupt: an Agent-Inbox response (``type``, with its args), else the
    ``value`` field as JSON (``as=json``) or as text."""
    kind = form.get("type")
    if kind in ("accept", "ignore"):
        return [{"type": kind, "args": None}]
    if kind == "response":
        if not (form.get("response") or "").strip():
            raise InputError("write the response before you press Respond")
        return [{"type": "response", "args": form.get("response")}]
    if kind == "edit":
        try:
            args = json.loads(form.get("edit_args") or "{}")
        except json.JSONDecodeError as exc:
            raise InputError(f"the edited args are not JSON: {exc.msg}") from None
        return [{"type": "edit", "args": {"action": form.get("action"), "args": args}}]
    value = form.get("value") or ""
    if form.get("as") != "json":
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError as exc:
        raise InputError(f"the answer is not JSON ({exc.msg}); send it as text") from None


@router.post("/runs/{run_id}/respond")
async def respond(request: Request, run_id: str, session: MaybeSession) -> Response:
    async def act(form: dict[str, str], actor: str) -> str:
        summary = await advancer_of(request).run(
            runner_of(request).respond(
                run_id, _response(form), wait_id=form.get("wait_id") or None, actor=actor
            )
        )
        return f"answered: {_outcome(summary)}"

    return await _act(request, session, run_id, "decide", act)


@router.post("/runs/{run_id}/retry")
async def retry(request: Request, run_id: str, session: MaybeSession) -> Response:
    async def act(form: dict[str, str], actor: str) -> str:
        return "retried: " + _outcome(
            await advancer_of(request).run(runner_of(request).retry(run_id))
        )

    return await _act(request, session, run_id, "decide", act)


@router.post("/runs/{run_id}/resume")
async def resume(request: Request, run_id: str, session: MaybeSession) -> Response:
    async def act(form: dict[str, str], actor: str) -> str:
        return "resumed: " + _outcome(
            await advancer_of(request).run(runner_of(request).resume(run_id))
        )

    return await _act(request, session, run_id, "decide", act)


@router.post("/runs/{run_id}/cancel")
async def cancel(request: Request, run_id: str, session: MaybeSession) -> Response:
    async def act(form: dict[str, str], actor: str) -> str:
        run = await runner_of(request).cancel(run_id)
        return f"cancel: run {run_id} is {run.status}" + (
            " (it stops after its current step)"
            if run.cancel_requested and str(run.status) == "running"
            else ""
        )

    return await _act(request, session, run_id, "admin", act)


@router.post("/runs/{run_id}/fork")
async def fork(request: Request, run_id: str, session: MaybeSession) -> Response:
    made: list[str] = []

    async def act(form: dict[str, str], actor: str) -> str:
        text = (form.get("changes") or "").strip()
        try:
            changes = json.loads(text) if text else {}
        except json.JSONDecodeError as exc:
            raise InputError(f"changes: not JSON ({exc})") from None
        if not isinstance(changes, dict):
            raise InputError("changes: a JSON object of state keys and values")
        summary = await runner_of(request).fork(
            run_id, at_step=_int(form.get("at_step")), changes=changes, advance=False
        )
        await advancer_of(request).queue(summary.run.run_id)
        made.append(summary.run.run_id)
        return f"forked run {run_id} as {summary.run.run_id}"

    answer = await _act(request, session, run_id, "admin", act)
    return _back(made[0]) if made else answer


@router.post("/runs/{run_id}/effects")
async def settle(request: Request, run_id: str, session: MaybeSession) -> Response:
    async def act(form: dict[str, str], actor: str) -> str:
        done = form.get("outcome") == "done"
        text = (form.get("result") or "").strip()
        try:
            result = json.loads(text) if text else None
        except json.JSONDecodeError as exc:
            raise InputError(f"result: not JSON ({exc})") from None
        await runner_of(request).resolve_effect(
            run_id, form.get("node", ""), form.get("key", ""), done=done, result=result
        )
        return f"effect {form.get('key')!r}: " + ("done" if done else "will run again")

    return await _act(request, session, run_id, "admin", act)
