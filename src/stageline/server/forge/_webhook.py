"""``POST /v1/github/webhook``: GitHub's webhook deliveries.

No stageline token: the ``X-Hub-Signature-256`` HMAC of the raw body under the webhook secret
authenticates it (401 for a missing or wrong one, before anything is read; 404 while no
secret is configured). A delivery is handled once, by its ``X-GitHub-Delivery`` id: it is
marked handled only once its handling has answered (anything but a 5xx), so a redelivery of a
handled one is answered and ignored, and a redelivery of one whose handling failed (the
database away a moment: 5xx) is handled. Handling is idempotent (one run per issue, one answer
per CI wait), so two copies of one delivery handled at once do no harm.

- ``ping``: answered.
- ``issues`` (``opened`` with the intake label, or ``labeled`` with it) for a configured
  repository: its run is started once per issue (``_intake``).
- ``workflow_run`` and ``check_suite``: handed to the runner's CI waits
  (``runner.forge_ci.on_webhook``), which move on the runs they end.
Anything else, or another repository: 202 with why it was ignored.
"""

from __future__ import annotations

import json
import logging
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import JSONResponse

from stageline.errors import StagelineError
from stageline.forge import Issue, verify_signature
from stageline.server.forge._intake import start_for_issue
from stageline.server.forge._runtime import ForgeRuntime, get_forge

__all__ = ["router"]

_log = logging.getLogger("stageline.forge")
router = APIRouter(tags=["github"], include_in_schema=False)
Forge = Annotated[ForgeRuntime, Depends(get_forge)]
_CI_EVENTS = ("workflow_run", "check_suite")


def _object(value: Any) -> dict[str, Any]:
    """``value`` when it is a JSON object, else an empty one (a payload is outside data)."""
    return value if isinstance(value, dict) else {}


def _ignored(why: str) -> JSONResponse:
    return JSONResponse({"ignored": why}, status_code=202)


@router.post("/v1/github/webhook")
async def webhook(request: Request, forge: Forge) -> JSONResponse:
    settings = forge.settings
    if settings is None or not settings.webhook_secret:
        raise HTTPException(
            404,
            "the GitHub webhook is not configured ([github] repositories, and the variable "
            "[github] webhook_secret_env names)",
        )
    body = await request.body()
    if not verify_signature(
        settings.webhook_secret, body, request.headers.get("X-Hub-Signature-256")
    ):
        raise HTTPException(401, "missing or invalid X-Hub-Signature-256 signature")
    try:
        payload = json.loads(body)
    except ValueError:
        raise HTTPException(400, "the body is not JSON") from None
    if not isinstance(payload, dict):
        raise HTTPException(400, "the body is not a JSON object")
    event = request.headers.get("X-GitHub-Event", "")
    delivery = request.headers.get("X-GitHub-Delivery", "")
    once = f"github-delivery:{delivery[:100]}" if delivery else None
    ledger = forge.runner.ledger
    if once is not None and await ledger.chat_seen(once):
        return JSONResponse({"duplicate": delivery}, status_code=200)
    answer = await _handle(forge, event, payload)  # raising (a 5xx): not marked
    if once is not None and answer.status_code < 500:
        await ledger.chat_once(once)  # handled: a redelivery is ignored from now on
    return answer


async def _handle(forge: ForgeRuntime, event: str, payload: dict[str, Any]) -> JSONResponse:
    settings = forge.settings
    assert settings is not None
    if event == "ping":
        return JSONResponse({"ok": True, "zen": str(payload.get("zen") or "")})
    repo = str(_object(payload.get("repository")).get("full_name") or "")
    if repo not in settings.repositories:
        return _ignored(f"repository {repo or '(none)'!r} is not in [github.repositories]")
    if event == "issues":
        return await _issue(forge, repo, payload)
    if event in _CI_EVENTS:
        return await _ci(forge, event, payload)
    return _ignored(f"event {event or '(none)'!r} is not one stageline acts on")


async def _issue(forge: ForgeRuntime, repo: str, payload: dict[str, Any]) -> JSONResponse:
    assert forge.settings is not None
    label = forge.settings.intake_label
    action = payload.get("action")
    data = _object(payload.get("issue"))
    number = data.get("number")
    if isinstance(number, bool) or not isinstance(number, int) or number < 1:
        raise HTTPException(400, "an issues event without its issue's number")
    try:
        issue = Issue.from_json(data)
    except (TypeError, ValueError, KeyError):
        raise HTTPException(400, "an issues event whose issue is not GitHub's") from None
    if action == "labeled":
        wanted = _object(payload.get("label")).get("name") == label
    elif action in ("opened", "reopened"):
        wanted = label in issue.labels
    else:
        wanted = False
    if not wanted or issue.state != "open":
        return _ignored(f"issues {action}: not an open issue given the label {label!r}")
    try:
        intake = await start_for_issue(forge.runner, forge.settings, repo, issue)
    except StagelineError as exc:
        _log.warning("github: issue %s#%s did not start a run: %s", repo, issue.number, exc)
        return JSONResponse({"detail": str(exc)}, status_code=exc.http_status)
    if intake.started:
        await forge.queue(intake.run_id)
    return JSONResponse(
        {"run_id": intake.run_id, "started": intake.started},
        status_code=201 if intake.started else 200,
    )


async def _ci(forge: ForgeRuntime, event: str, payload: dict[str, Any]) -> JSONResponse:
    ci = getattr(forge.runner, "forge_ci", None)
    if ci is None:
        return _ignored("this server keeps no CI waits")
    moved = await ci.on_webhook(event, payload)
    return JSONResponse({"runs": list(moved)}, status_code=202)
