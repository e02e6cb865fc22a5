"""LangGraph's v3 thread-stream commands, whichever transport brings them: ``run.start``
starts a run on the thread (made when it does not exist), ``input.respond`` answers an
interrupt it waits on (a gate's decision, a question set's answers, an ``interrupt()``'s value:
decided and audited as every resume is, ``_execute.plan``). Each is an API run whose events go
on the thread's feed (``_v3``). A command the protocol refuses raises ``Refused``, its error
envelope (``{"type": "error", "error": <code>, ...}``).
"""

from __future__ import annotations

from typing import Any

from fastapi import HTTPException
from pydantic import ValidationError
from starlette.requests import HTTPConnection

from stageline.ledger import RunStatus
from stageline.runner import Runner
from stageline.server._advancer import Advancer
from stageline.server.langgraph._execute import ApiRuns
from stageline.server.langgraph._lookup import find_thread
from stageline.server.langgraph._mapping import assistant_of
from stageline.server.langgraph._models import CommandBody, RunCreate
from stageline.server.langgraph._v3 import Feeds
from stageline.server.langgraph.runs import accept_run

__all__ = ["Refused", "dispatch"]

MODES = ["values", "updates"]
"""The stream modes of an API run a command starts (its events on the thread's feed)."""
_CODES = {403: "permission_denied"}


async def dispatch(
    connection: HTTPConnection,
    runner: Runner,
    advancer: Advancer,
    thread_id: str,
    payload: Any,
    actor: str | None,
) -> dict[str, Any]:
    """The answer to one protocol command on the thread, by ``actor`` (None: a token that may
    not start or resume runs); raises ``Refused``."""
    if (
        not isinstance(payload, dict)
        or not isinstance(payload.get("id"), int)
        or not isinstance(payload.get("method"), str)
    ):
        raise Refused(
            payload.get("id") if isinstance(payload, dict) else None,
            "invalid_argument",
            "Protocol commands must include an integer id and string method.",
            400,
        )
    command_id, method = payload["id"], payload["method"]
    given = payload.get("params")
    params: dict[str, Any] = given if isinstance(given, dict) else {}
    if method not in ("run.start", "input.respond"):
        if method in ("agent.getTree", "subscription.subscribe", "subscription.unsubscribe"):
            raise Refused(
                command_id,
                "not_supported",
                f"{method} is not served here; stageline's thread streams take run.start and "
                "input.respond as commands, subscriptions on a WebSocket",
            )
        raise Refused(command_id, "unknown_command", f"Unknown protocol command: {method}")
    if actor is None:
        raise Refused(command_id, "permission_denied", f"{method} needs a decide token")
    if method == "run.start":
        body = _run_start(command_id, params)
    else:
        body = await _input_respond(runner, thread_id, command_id, params)
    try:
        api_run, task, _start = await accept_run(
            connection, runner, advancer, body, thread_id, actor
        )
    except HTTPException as exc:
        raise _refused(command_id, exc) from None
    run = await runner.ledger.get_run(thread_id)
    log = ApiRuns.of(connection).log_of(api_run.api_run_id)
    before = Feeds.of(connection).follow(runner, api_run, task, log, assistant_of(run))
    return {
        "type": "success",
        "id": command_id,
        "result": {"run_id": api_run.api_run_id} if method == "run.start" else {},
        "meta": {"applied_through_seq": before},
    }


class Refused(Exception):
    """A command the protocol refuses: its error envelope (answered with HTTP ``status``)."""

    def __init__(self, command_id: Any, code: str, message: str, status: int = 200) -> None:
        super().__init__(message)
        self.status = status
        self.answer = {"type": "error", "id": command_id, "error": code, "message": message}


def _refused(command_id: Any, exc: HTTPException) -> Refused:
    """A refused request as the protocol's error, its HTTP status leading the message."""
    code = _CODES.get(exc.status_code, "unknown_error")
    return Refused(command_id, code, f"{exc.status_code}: {exc.detail}")


def _run_start(command_id: int, params: dict[str, Any]) -> RunCreate:
    assistant_id = params.get("assistant_id")
    if not isinstance(assistant_id, str) or not assistant_id:
        raise Refused(command_id, "invalid_argument", "run.start requires an assistant_id.")
    config = params.get("config")
    configurable = config.get("configurable") if isinstance(config, dict) else None
    if isinstance(configurable, dict) and configurable.get("checkpoint_id") is not None:
        raise Refused(
            command_id,
            "not_supported",
            "run.start from a checkpoint is not supported; fork a run at a checkpoint with "
            "POST /v1/runs/{id}/fork or stageline fork",
        )
    try:
        return RunCreate(
            assistant_id=assistant_id,
            input=params.get("input"),
            metadata=params.get("metadata"),
            stream_mode=MODES,
            if_not_exists="create",
        )
    except ValidationError as exc:
        raise Refused(command_id, "invalid_argument", f"run.start: {_first(exc)}") from None


def _first(exc: ValidationError) -> str:
    found = exc.errors()[0]
    return f"{'.'.join(str(p) for p in found['loc'])}: {found['msg']}"


def _responses(command_id: int, params: dict[str, Any]) -> dict[str, Any]:
    """``input.respond``'s answers, interrupt id -> response (one, or a ``responses`` list)."""
    entries = params.get("responses")
    if entries is None:
        entries = [params]
    if not isinstance(entries, list) or not entries:
        raise Refused(command_id, "invalid_argument", "input.respond requires a response.")
    found: dict[str, Any] = {}
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("interrupt_id"), str):
            raise Refused(command_id, "invalid_argument", "input.respond requires an interrupt_id.")
        namespace = entry.get("namespace", [])
        if not isinstance(namespace, list) or not all(isinstance(s, str) for s in namespace):
            raise Refused(
                command_id,
                "invalid_argument",
                "input.respond requires namespace to be a list of strings.",
            )
        found[entry["interrupt_id"]] = entry.get("response")
    return found


async def _input_respond(
    runner: Runner, thread_id: str, command_id: int, params: dict[str, Any]
) -> RunCreate:
    if params.get("update") is not None or params.get("goto") is not None:
        raise Refused(
            command_id,
            "not_supported",
            "input.respond's update and goto are not supported; change a thread's state "
            "with threads.update_state",
        )
    answers = _responses(command_id, params)
    try:
        run, meta = await find_thread(runner, thread_id)
    except HTTPException:
        run, meta = None, None
    if run is None or run.status is not RunStatus.WAITING:
        raise Refused(command_id, "no_such_run", "No interrupted run is bound to this thread.")
    pending = {w.interrupt_id for w in await runner.pending(thread_id)}
    for interrupt_id in answers:
        if interrupt_id not in pending:
            raise Refused(
                command_id,
                "no_such_interrupt",
                f"Unknown or already-consumed interrupt: {interrupt_id}",
            )
    assistant_id = (meta.metadata if meta else {}).get("assistant_id") or assistant_of(run)
    return RunCreate(
        assistant_id=str(assistant_id),
        command=CommandBody(resume=answers),
        stream_mode=MODES,
    )
