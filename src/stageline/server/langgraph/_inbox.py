"""Agent Inbox: stageline's gates and question sets as ``HumanInterrupt``s, and the inbox's
responses as the decisions and answers they stand for.

The interrupt value a gate or question node asks keeps every key it has (clients of today
read them) and gains the ``HumanInterrupt`` fields Agent Inbox reads: ``action_request``
(``action``: the gate's or question node's name; ``args``: what the person reviews, the gate's
shown state keys, or each question's default answer), ``config`` (exactly what the gate or set
takes) and ``description`` (Markdown). A resume with the inbox's list of one response
``{"type": ..., "args": ...}`` becomes what the CLI would send:

- a gate: ``accept`` approves, ``response`` requests changes with the text as the note,
  ``ignore`` rejects; ``edit`` is refused (a gate decides on the state as it is);
- a question set: ``response`` answers its one open question with the text, ``edit`` answers
  with ``args`` (question id -> answer), ``accept`` takes every default; ``ignore`` is refused
  (a question set is answered, never rejected).

The decision is then checked and recorded by the runner exactly as any other resume is.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from fastapi import HTTPException

from stageline.ledger import INBOX_TYPES, Wait, WaitKind

__all__ = ["human_view", "inbox_resume"]

SHOWN_LIMIT = 4000
"""Characters of one shown value the description quotes (the args hold it whole)."""


def _stageline_payload(value: Any) -> Mapping[str, Any] | None:
    """The payload of a stageline gate or question node, or None for any other value."""
    if (
        isinstance(value, Mapping)
        and value.get("kind") in ("gate", "question")
        and "node" in value
        and "attempt" in value
        and "action_request" not in value
    ):
        return value
    return None


def human_view(value: Any) -> Any:
    """``value`` with the ``HumanInterrupt`` fields added when a gate or question node asked
    it (its own keys kept); any other value as it is."""
    payload = _stageline_payload(value)
    if payload is None:
        return value
    extra = _gate_view(payload) if payload["kind"] == "gate" else _question_view(payload)
    refused = payload.get("refused")
    if isinstance(refused, Mapping) and refused.get("reason"):
        extra["description"] += f"\n\n_The last response was refused: {refused['reason']}_"
    return {**payload, **extra}


# -- gates -------------------------------------------------------------------------------------


def _takes_changes(payload: Mapping[str, Any]) -> bool:
    return payload.get("changes_to") is not None and payload.get("changes_left") != 0


def _gate_view(payload: Mapping[str, Any]) -> dict[str, Any]:
    name = str(payload.get("gate"))
    shown = payload.get("show") if isinstance(payload.get("show"), Mapping) else {}
    reject_to = payload.get("reject_to")
    lines = [
        f"**{name}** waits for a decision.",
        "",
        "- **Accept**: approve; the run goes on past the gate.",
    ]
    if _takes_changes(payload):
        left = payload.get("changes_left")
        rounds = "" if left is None else f" ({left} round{'s' if left != 1 else ''} left)"
        lines.append(
            f"- **Respond**: request changes; the run goes back to `{payload['changes_to']}` "
            f"with your text as the note{rounds}."
        )
    lines.append(
        "- **Ignore**: reject; "
        + (f"the run goes to `{reject_to}`." if reject_to else "the run ends `rejected`.")
    )
    for key, value in dict(shown or {}).items():
        text = value if isinstance(value, str) else json.dumps(value, indent=2, default=str)
        if len(text) > SHOWN_LIMIT:
            text = text[: SHOWN_LIMIT - 1] + "…"
        lines += ["", f"### {key}", "", text]
    return {
        "action_request": {"action": name, "args": dict(shown or {})},
        "config": {
            "allow_accept": True,
            "allow_edit": False,
            "allow_respond": _takes_changes(payload),
            "allow_ignore": True,
        },
        "description": "\n".join(lines),
    }


# -- question sets -----------------------------------------------------------------------------


def _questions(payload: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    found = (payload.get("question_set") or {}).get("questions") or []
    return [q for q in found if isinstance(q, Mapping) and "id" in q]


def _open(questions: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The questions that need an answer: required, with no default."""
    return [q for q in questions if q.get("required", True) and "default" not in q]


def _text_target(questions: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The question a text response answers: the only question, or the only open one."""
    if len(questions) == 1:
        return questions[0]
    needed = _open(questions)
    return needed[0] if len(needed) == 1 else None


def _question_view(payload: Mapping[str, Any]) -> dict[str, Any]:
    name = str(payload.get("name") or payload.get("node"))
    questions = _questions(payload)
    target = _text_target(questions)
    lines = [f"**{name}** asks:", ""]
    for q in questions:
        line = f"- `{q['id']}`: {q.get('text', '')}"
        if q.get("choices"):
            line += f" (one of: {', '.join(map(str, q['choices']))})"
        if q.get("kind") == "json":
            line += " (JSON)"
        if "default" in q:
            line += f" (default: {json.dumps(q['default'], default=str)})"
        elif not q.get("required", True):
            line += " (optional)"
        lines.append(line)
    ways = []
    if target is not None:
        ways.append(f"**Respond** with the answer to `{target['id']}`")
    ways.append("**Edit** the answers (question id -> answer)")
    if not _open(questions):
        ways.append("**Accept** takes every default")
    lines += ["", "; ".join(ways) + ". A question set cannot be ignored."]
    return {
        "action_request": {
            "action": name,
            "args": {str(q["id"]): q.get("default", "") for q in questions},
        },
        "config": {
            "allow_accept": not _open(questions),
            "allow_edit": bool(questions),
            "allow_respond": target is not None,
            "allow_ignore": False,
        },
        "description": "\n".join(lines),
    }


# -- responses ---------------------------------------------------------------------------------


def _response(value: Any, *, bare: bool) -> Mapping[str, Any] | None:
    """The one inbox response ``value`` is (a list of one; with ``bare``, also the mapping
    itself), or None when it is no inbox response."""
    if isinstance(value, list):
        if not value or not all(isinstance(r, Mapping) and "type" in r for r in value):
            return None
        if len(value) > 1:
            raise HTTPException(422, "give one Agent Inbox response at a time")
        value = value[0]
    elif not bare:
        return None
    if not isinstance(value, Mapping) or "type" not in value or "decision" in value:
        return None
    if value["type"] not in INBOX_TYPES:
        raise HTTPException(
            422,
            f"an Agent Inbox response's type is one of {', '.join(INBOX_TYPES)}; "
            f"got {value['type']!r}",
        )
    return value


def inbox_resume(wait: Wait, value: Any) -> Any:
    """The resume ``value`` as the decision (a gate) or answers (a question set) an Agent
    Inbox response stands for; any other value as it is. 409 names the rule a response the
    gate or question set does not take breaks; 422 a malformed one."""
    if wait.kind is WaitKind.GATE:
        response = _response(value, bare=True)
        return value if response is None else _gate_decision(wait, response)
    if wait.kind is WaitKind.QUESTION:
        response = _response(value, bare=False)
        return value if response is None else _answers(wait, response)
    return value


def _gate_decision(wait: Wait, response: Mapping[str, Any]) -> dict[str, Any]:
    kind, args = response["type"], response.get("args")
    if kind == "accept":
        return {"decision": "approve"}
    if kind == "ignore":
        return {"decision": "reject"}
    if kind == "edit":
        raise HTTPException(
            409,
            f"gate {wait.name} takes no edits: a gate decides on the state as it is "
            "(accept approves, respond asks for changes with a note, ignore rejects)",
        )
    if not isinstance(args, str) or not args.strip():
        raise HTTPException(422, 'a "response" needs args: the text of the changes to make')
    return {"decision": "changes", "note": args}


def _answers(wait: Wait, response: Mapping[str, Any]) -> dict[str, Any]:
    questions = _questions(wait.payload)
    kind, args = response["type"], response.get("args")
    given: dict[str, Any] = {}
    if kind == "ignore":
        raise HTTPException(
            409,
            f"question set {wait.name} cannot be ignored: a question set is answered "
            "(respond or edit), never rejected",
        )
    if kind == "accept":
        if needed := _open(questions):
            raise HTTPException(
                409,
                f"question set {wait.name} cannot be accepted: question "
                f"{needed[0]['id']!r} has no default answer (respond or edit)",
            )
    elif kind == "response":
        target = _text_target(questions)
        if target is None:
            raise HTTPException(
                409,
                f"question set {wait.name} asks {len(_open(questions))} questions that need an "
                "answer; a text response answers one: edit the answers instead",
            )
        if not isinstance(args, str):
            raise HTTPException(422, 'a "response" needs args: the text of the answer')
        given[str(target["id"])] = args
    else:  # edit: {"action": ..., "args": {question id: answer}}, or the answers themselves
        edited = args.get("args") if isinstance(args, Mapping) and "action" in args else args
        if not isinstance(edited, Mapping):
            raise HTTPException(
                422, 'an "edit" needs args: {"action": ..., "args": {question id: answer}}'
            )
        given = {str(k): v for k, v in edited.items() if not (isinstance(v, str) and not v.strip())}
    for q in questions:  # what is left unanswered takes its default
        if str(q["id"]) not in given and "default" in q:
            given[str(q["id"])] = q["default"]
    return given
