"""The Slack app's three request URLs: slash commands, interactions (buttons and modals) and
events (the URL check, replies in a run's thread).

Every request is checked first (signature v0 over the raw body, five-minute window): a forged
or expired one gets 401 and changes nothing; a signed body that is not the JSON object Slack
sends gets 400. A decision from Slack is the runner's own, with the Slack user as actor, bound
to the visit, attempt and state hash its button carried; a refusal (stale, already decided, not
a decider) is told to that user alone.

A slash command is handled once: by its ``trigger_id``, or, without one, by a hash of what was
signed (timestamp and body), so a replay inside the window starts nothing.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shlex
import time
from typing import Annotated, Any
from urllib.parse import parse_qs

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import JSONResponse, Response

from stageline.errors import AnswerInvalid, StagelineError, UsageError
from stageline.events._delivery import DeliveryError
from stageline.ledger import WaitStatus
from stageline.runner import new_run_id
from stageline.server._state import get_advancer
from stageline.server.chat._render import (
    changes_modal,
    esc,
    modal_answers,
    parse_value,
    question_modal,
    questions_of,
)
from stageline.server.chat._replies import reply
from stageline.server.chat._runtime import ChatRuntime, get_chat
from stageline.server.chat._settings import actor_of
from stageline.stages import validate_answers

__all__ = ["router"]

_log = logging.getLogger("stageline.server")
router = APIRouter(prefix="/slack", tags=["chat"], include_in_schema=False)
Chat = Annotated[ChatRuntime, Depends(get_chat)]


async def _verified(request: Request, chat: ChatRuntime) -> bytes:
    """The raw body of a request Slack signed; 401 for anything else."""
    return (await _signed(request, chat))[1]


async def _signed(request: Request, chat: ChatRuntime) -> tuple[str, bytes]:
    """The timestamp and raw body of a request Slack signed; 401 for anything else."""
    if not chat.chat.slack:
        raise HTTPException(
            404, "the Slack app is not configured ([slack] bot_token_env and signing_secret_env)"
        )
    from slack_sdk.signature import SignatureVerifier

    body = await request.body()
    stamp = request.headers.get("X-Slack-Request-Timestamp", "")
    signature = request.headers.get("X-Slack-Signature", "")
    verifier = SignatureVerifier(chat.chat.signing_secret or "")
    try:
        fresh = abs(time.time() - int(stamp)) <= 300
    except ValueError:
        fresh = False
    if not fresh or not verifier.is_valid(body, stamp, signature):
        raise HTTPException(401, "invalid or expired Slack signature")
    return stamp, body


def _once_key(form: dict[str, str], stamp: str, body: bytes) -> str:
    """What makes a slash command once: its ``trigger_id``, else what Slack signed (a replay
    carries both unchanged; a new command has a new timestamp)."""
    if trigger := form.get("trigger_id"):
        return f"slack-command:{trigger}"
    signed = hashlib.sha256(b"v0:" + stamp.encode() + b":" + body).hexdigest()
    return f"slack-command-body:{signed}"


def _object(text: str | bytes, what: str) -> dict[str, Any]:
    """``text`` as the JSON object Slack sends; 400 for anything else."""
    try:
        payload = json.loads(text)
    except ValueError:
        raise HTTPException(400, f"{what} is not JSON") from None
    if not isinstance(payload, dict):
        raise HTTPException(400, f"{what} is not a JSON object")
    return payload


def _form(body: bytes) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(body.decode("utf-8", "replace")).items()}


def _said(text: str) -> dict[str, Any]:
    return {"response_type": "ephemeral", "text": text}


# -- slash commands ----------------------------------------------------------------------------


@router.post("/commands")
async def commands(request: Request, chat: Chat) -> JSONResponse:
    stamp, body = await _signed(request, chat)
    form = _form(body)
    command, text = form.get("command", ""), form.get("text", "").strip()
    user = {"id": form.get("user_id"), "name": form.get("user_name")}
    if not chat.chat.may_decide(str(user["id"])):
        return JSONResponse(
            _said("You are not one of the people allowed to start runs here ([slack] deciders).")
        )
    settings = chat.chat
    if not await chat.runner.ledger.chat_once(_once_key(form, stamp, body)):
        return JSONResponse(
            _said("This command was handled already (a replay); nothing was started.")
        )
    try:
        if settings.intake_command and command == settings.intake_command:
            # all of the text is the task, even when it starts with "run"
            if not settings.intake_template or not settings.intake_input:
                raise UsageError(
                    "the intake command needs [slack] intake_template and intake_input"
                )
            if not text:
                raise UsageError(f"say what the task is: `{command} TEXT`")
            template = settings.intake_template
            inputs = settings.intake_inputs(form.get("channel_id"), text)
        else:
            template, inputs = _parse_run(command, text)
        run_id = await _start(request, chat, template, inputs, form.get("channel_id"), user)
    except StagelineError as exc:
        return JSONResponse(_said(f"Could not start: {exc}"))
    return JSONResponse(
        {
            "response_type": "in_channel",
            "text": f"Started run `{run_id}` ({template}); it goes on in a thread.",
        }
    )


def _parse_run(command: str, text: str) -> tuple[str, dict[str, Any]]:
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise UsageError(f"could not read `{text}`: {exc}") from None
    if len(words) < 2 or words[0] != "run":
        raise UsageError(f"use `{command or '/stageline'} run TEMPLATE key=value ...`")
    inputs: dict[str, Any] = {}
    for word in words[2:]:
        key, eq, value = word.partition("=")
        if not eq or not key:
            raise UsageError(f"`{word}` is not key=value")
        try:
            inputs[key] = json.loads(value)
        except ValueError:
            inputs[key] = value
    return words[1], inputs


async def _start(
    request: Request,
    chat: ChatRuntime,
    template: str,
    inputs: dict[str, Any],
    channel: str | None,
    user: dict[str, Any],
) -> str:
    """Create the run, open its thread where the command was typed, and have it advanced."""
    from stageline.server.api._common import find_template

    runner = chat.runner
    find_template(runner, template)
    run_id = new_run_id()
    if channel and chat.sink is not None:  # its thread: where the command was typed
        await runner.ledger.save_chat_message(run_id, "origin", channel, "")
        text = f"🕓 Run `{run_id}` · *{template}* · starting (asked by <@{esc(user['id'])}>)"
        try:
            await chat.sink.post(run_id, "root", text, None, thread=False)
        except DeliveryError as exc:  # Slack is down: the deliverer posts it there later
            _log.warning("slack: the thread of %s waits for Slack: %s", run_id, exc)
    try:
        run = await runner.create(template, inputs, run_id=run_id)
    except StagelineError as exc:
        root = await runner.ledger.chat_message(run_id, "root")
        if root is not None:
            await chat.call(
                "chat.update",
                channel=root.channel,
                ts=root.ts,
                text=f"⛔ Run `{run_id}` · *{template}* could not start: {exc}",
            )
        raise
    await get_advancer(request).queue(run.run_id)
    return run.run_id


# -- interactions -------------------------------------------------------------------------------


@router.post("/interactions")
async def interactions(request: Request, chat: Chat) -> Response:
    form = _form(await _verified(request, chat))
    if "payload" not in form:
        raise HTTPException(400, "no interaction payload")
    payload = _object(form["payload"], "the interaction payload")
    kind = payload.get("type")
    if kind == "block_actions":
        await _action(request, chat, payload)
        return Response(status_code=200)
    if kind == "view_submission":
        return await _submission(request, chat, payload)
    return Response(status_code=200)


async def _action(request: Request, chat: ChatRuntime, payload: dict[str, Any]) -> None:
    actions = payload.get("actions") or []
    user = payload.get("user") or {}
    uid = str(user.get("id") or "")
    if not actions:
        return
    action = actions[0]
    try:
        value = parse_value(action.get("value") or "")
    except ValueError:
        return
    channel = (payload.get("channel") or {}).get("id") or value.get("c")
    if not chat.chat.may_decide(uid):
        await chat.tell(
            channel,
            uid,
            "You are not one of the people allowed to decide here "
            "([slack] deciders); nothing was changed.",
        )
        return
    action_id = action.get("action_id")
    wait = await _pending(chat, value)
    if isinstance(wait, str):
        await chat.tell(channel, uid, wait)
        return
    if action_id in ("changes", "answer"):
        view = (
            changes_modal(action["value"], wait.name)
            if action_id == "changes"
            else question_modal(action["value"], wait)
        )
        await chat.call("views.open", trigger_id=payload.get("trigger_id"), view=view)
        return
    runner, advancer = chat.runner, get_advancer(request)
    if action_id in ("inbox_accept", "inbox_ignore"):  # a HumanInterrupt's own responses
        response = [{"type": str(action_id).removeprefix("inbox_"), "args": None}]
        work = advancer.run(
            runner.respond(value["r"], response, wait_id=value["w"], actor=actor_of(user))
        )
        await chat.carry(work, lambda exc: chat.tell(channel, uid, f"Nothing was changed: {exc}"))
        return
    decide = {
        "approve": runner.approve,
        "reject": runner.reject,
        "takeover": runner.take_over,
    }.get(str(action_id))
    if decide is None:
        return
    work = advancer.run(
        decide(
            value["r"],
            gate=value.get("g"),
            actor=actor_of(user),
            attempt=value.get("a"),
            state_hash=value.get("h") or None,
            wait_id=value["w"],
        )
    )
    await chat.carry(work, lambda exc: chat.tell(channel, uid, f"Nothing was changed: {exc}"))


async def _pending(chat: ChatRuntime, value: dict[str, Any]) -> Any:
    """The wait a button is about, if it still waits; else what to tell the user."""
    waits = [w for w in await chat.runner.ledger.waits(value["r"]) if w.wait_id == value["w"]]
    if not waits:
        return "This run no longer has what this button was for; nothing was changed."
    last = max(waits, key=lambda w: w.round)
    if last.status is WaitStatus.PENDING:
        return last
    if last.status in (WaitStatus.DECIDED, WaitStatus.APPLIED):
        return (
            f"Already decided: {last.decision or 'answered'} by {last.actor}; nothing was changed."
        )
    return f"This is no longer waiting ({last.status}); nothing was changed."


async def _submission(request: Request, chat: ChatRuntime, payload: dict[str, Any]) -> Response:
    view = payload.get("view") or {}
    user = payload.get("user") or {}
    uid = str(user.get("id") or "")
    try:
        value = parse_value(view.get("private_metadata") or "")
    except ValueError:
        return Response(status_code=200)
    channel = value.get("c")
    if not chat.chat.may_decide(uid):
        await chat.tell(channel, uid, "You are not one of the people allowed to decide here.")
        return Response(status_code=200)
    wait = await _pending(chat, value)
    if isinstance(wait, str):
        await chat.tell(channel, uid, wait)
        return Response(status_code=200)
    runner, advancer = chat.runner, get_advancer(request)
    if view.get("callback_id") == "changes":
        note = ((view.get("state", {}).get("values", {}).get("note") or {}).get("note") or {}).get(
            "value"
        ) or ""
        if not note.strip():
            return _errors({"note": "Say what should change."})
        work = advancer.run(
            runner.request_changes(
                value["r"],
                note=note,
                gate=value.get("g"),
                actor=actor_of(user),
                attempt=value.get("a"),
                state_hash=value.get("h") or None,
                wait_id=value["w"],
            )
        )
    elif view.get("callback_id") == "answer":
        answers = modal_answers(view)
        try:
            checked = validate_answers(questions_of(wait), answers)
        except AnswerInvalid as exc:
            return _errors(_blame(str(exc), wait))
        work = advancer.run(
            runner.answer(value["r"], checked, question_id=value["w"], actor=actor_of(user))
        )
    else:
        return Response(status_code=200)
    await chat.carry(work, lambda exc: chat.tell(channel, uid, f"Nothing was changed: {exc}"))
    return Response(status_code=200)


def _errors(errors: dict[str, str]) -> JSONResponse:
    return JSONResponse({"response_action": "errors", "errors": errors})


def _blame(message: str, wait: Any) -> dict[str, str]:
    """A modal error on the question the message names (the first one otherwise)."""
    ids = [str(q["id"]) for q in questions_of(wait)]
    named = next((i for i in ids if f"'{i}'" in message), ids[0] if ids else "")
    return {f"q:{named}": message[:150]}


# -- events ------------------------------------------------------------------------------------


@router.post("/events")
async def events(request: Request, chat: Chat) -> Response:
    payload = _object(await _verified(request, chat), "the body")
    if payload.get("type") == "url_verification":
        return JSONResponse({"challenge": payload.get("challenge")})
    if payload.get("type") != "event_callback":
        return Response(status_code=200)
    event_id = str(payload.get("event_id") or "")
    if event_id and not await chat.runner.ledger.chat_once(f"slack-event:{event_id}"):
        return Response(status_code=200, headers={"X-Slack-No-Retry": "1"})  # a retry
    event = payload.get("event")
    if (
        isinstance(event, dict)
        and event.get("type") == "message"
        and event.get("thread_ts")
        and not event.get("bot_id")
        and not event.get("subtype")
        and event.get("thread_ts") != event.get("ts")
    ):
        await reply(chat, event, get_advancer(request))
    return Response(status_code=200)
