"""How a node waits for a person: deadlines and their policy, the state a decision is bound
to, what makes a gate refuse a decision, and asking a question set from inside a node.

A node interrupts with a plain-dict payload and checks what it is resumed with; gates, question
nodes, budget gates and ``StageContext.ask`` all wait this way.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any, Protocol, cast

from langgraph.types import interrupt

from stageline.errors import AnswerInvalid, UsageError
from stageline.stages._questions import (
    legacy_question_id,
    normalize_questions,
    question_id,
    validate_answers,
)
from stageline.statekeys import RESERVED_KEYS

__all__ = [
    "DECISIONS",
    "DEFAULT_DEADLINE",
    "Asker",
    "ask_person",
    "deadline_steps",
    "parse_duration",
    "state_hash",
    "state_values",
    "wait_for_decision",
]

DECISIONS = ("approve", "reject", "changes", "takeover")
DEFAULT_DEADLINE = 24 * 3600.0
FINAL_STEPS = {"gate": ("reject", "park", "fail"), "question": ("default", "park", "fail")}
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


class Asker(Protocol):
    """Who asks: the node of a run, at an attempt (a ``StageContext``)."""

    @property
    def run_id(self) -> str: ...

    @property
    def node(self) -> str: ...

    @property
    def attempt(self) -> int: ...


def parse_duration(value: float | int | str | timedelta, what: str = "deadline") -> float:
    """Seconds from a number, a ``timedelta`` or text such as ``90s``, ``15m``, ``2h``, ``1d``."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, bool):
        raise UsageError(f"{what} must be a duration, got {value!r}")
    elif isinstance(value, int | float):
        seconds = float(value)
    else:
        found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*", str(value))
        if not found:
            raise UsageError(f"{what} must be a duration such as 90s, 15m, 2h or 1d, got {value!r}")
        seconds = float(found.group(1)) * _UNITS[found.group(2) or "s"]
    if seconds <= 0:
        raise UsageError(f"{what} must be positive, got {value!r}")
    return seconds


def deadline_steps(on_deadline: str | Sequence[str], kind: str) -> tuple[str, ...]:
    """The deadline policy as steps: ``remind``, ``escalate``, then a final one.

    A single name (``reject``, ``default``, ``park`` or ``fail``) means remind, escalate, then
    it; a list names the steps (in that order; remind and escalate may be left out).
    """
    finals = FINAL_STEPS[kind]
    steps = (
        ("remind", "escalate", on_deadline) if isinstance(on_deadline, str) else tuple(on_deadline)
    )
    order = [s for s in ("remind", "escalate") if s in steps]
    if not steps or steps[-1] not in finals or list(steps[:-1]) != order:
        raise UsageError(
            f"on_deadline for a {kind} is one of {', '.join(finals)}, or a list: optionally "
            f"remind, then escalate, then one of those; got {on_deadline!r}"
        )
    return tuple(steps)


def state_values(state: Any) -> dict[str, Any]:
    """A state's values by key: a TypedDict's items, a pydantic model's fields."""
    return dict(state) if isinstance(state, Mapping) else dict(getattr(state, "__dict__", {}))


def state_hash(state: Any) -> str:
    """A hash of the state a person is asked about (stageline's own keys left out)."""
    public = {k: v for k, v in state_values(state).items() if k not in RESERVED_KEYS}
    text = json.dumps(public, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def wait_for_decision(payload: Mapping[str, Any]) -> Mapping[str, Any]:
    """Interrupt with a gate's ``payload`` until a decision it may take comes back: one for its
    ``attempt`` and ``state_hash``, and changes or a takeover only where it takes them (its
    ``changes_to``, ``changes_left``, ``park``). A refused one is asked again, with the reason."""
    asked = payload
    while True:
        decision = interrupt(asked)
        why = _refuse_decision(
            decision,
            payload["attempt"],
            payload["state_hash"],
            payload["changes_to"],
            payload["changes_left"],
            payload.get("park"),
        )
        if why is None:
            return cast(Mapping[str, Any], decision)
        asked = {**payload, "refused": {"token": _token(decision), "reason": why}}


def _token(response: Any) -> str | None:
    return response.get("token") if isinstance(response, Mapping) else None


def _refuse_decision(
    decision: Any,
    attempt: int,
    digest: str,
    changes_to: str | None,
    left: int | None,
    park: Mapping[str, Any] | None = None,
) -> str | None:
    """Why a gate must not take ``decision``, or None."""
    if not isinstance(decision, Mapping) or decision.get("decision") not in DECISIONS:
        return f"not a decision: {decision!r}"
    if decision.get("attempt") != attempt:
        return (
            f"stale: the decision is for attempt {decision.get('attempt')}, "
            f"but the run is at attempt {attempt}"
        )
    if decision.get("state_hash") != digest:
        return (
            f"stale: the decision was made on state {decision.get('state_hash')}, "
            f"but the state is now {digest}"
        )
    if decision["decision"] == "changes" and (changes_to is None or left == 0):
        return "this gate takes no (more) changes"
    if decision["decision"] == "takeover" and park is None:
        return "only a park gate can be taken over"
    return None


def ask_person(
    ctx: Asker,
    questions: Any,
    *,
    turn: int,
    name: str | None = None,
    deadline: float = DEFAULT_DEADLINE,
    on_deadline: Sequence[str] = ("remind", "escalate", "park"),
) -> dict[str, Any]:
    """Ask a person question set number ``turn`` of the run, from inside a node; returns
    ``{turn, question_id, questions, answers, actor}`` once answered (the node waits till then).

    The set's id is ``question_id(run_id, turn, node=node)``: give each set a node asks its own
    ``turn``. A set asked before ids named their node waits under ``legacy_question_id``; its
    answer carries that id, and the set keeps it.
    """
    qs = normalize_questions(questions)
    qid = question_id(ctx.run_id, turn, node=ctx.node)
    earlier = legacy_question_id(ctx.run_id, turn)
    payload: dict[str, Any] = {
        "kind": "question",
        "name": name or ctx.node,
        "node": ctx.node,
        "run_id": ctx.run_id,
        "thread_id": ctx.run_id,
        "question_id": qid,
        "turn": turn,
        "attempt": ctx.attempt,
        "question_set": {"questions": qs},
        "deadline": deadline,
        "on_deadline": list(on_deadline),
    }
    asked = payload
    while True:
        response = interrupt(asked)
        if isinstance(response, Mapping) and response.get("question_id") == earlier:
            qid = payload["question_id"] = earlier
        answers, why = _take_answers(response, qid, qs)
        if why is None:
            break
        asked = {**payload, "refused": {"token": _token(response), "reason": why}}
    return {
        "turn": turn,
        "question_id": qid,
        "questions": qs,
        "answers": answers,
        "actor": response.get("actor"),
    }


def _take_answers(
    response: Any, qid: str, qs: list[dict[str, Any]]
) -> tuple[dict[str, Any], str | None]:
    if not isinstance(response, Mapping) or response.get("question_id") != qid:
        got = response.get("question_id") if isinstance(response, Mapping) else response
        return {}, f"stale: an answer for question set {got!r}, not {qid!r}"
    try:
        return validate_answers(qs, response.get("answers")), None
    except AnswerInvalid as exc:
        return {}, str(exc)
