"""Gates and question nodes: stages that wait for a person through LangGraph's ``interrupt()``.

A node interrupts with a plain-dict payload; the runner records it as a *wait* in the ledger,
and resumes the node with ``Command(resume={interrupt id: response})`` once a decision or an
answer is recorded. The node checks what it is given: a decision for another attempt or another
state, or answers that do not fit, are refused and the node asks again.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import re
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any

from langgraph.types import interrupt

from stageline.errors import AnswerInvalid, UsageError
from stageline.stages._context import StageContext
from stageline.stages._node import LOOPS_KEY
from stageline.stages._questions import normalize_questions, question_id, validate_answers
from stageline.stages._stage import Stage
from stageline.statekeys import GATES_KEY, RESERVED_KEYS

__all__ = [
    "DECISIONS",
    "DEFAULT_DEADLINE",
    "GATES_KEY",
    "RESERVED_KEYS",
    "ask_person",
    "deadline_steps",
    "gate_stage",
    "parse_duration",
    "question_stage",
    "state_hash",
]

DECISIONS = ("approve", "reject", "changes", "takeover")
DEFAULT_DEADLINE = 24 * 3600.0
MACHINERY = {"machinery": True}
"""Stage metadata of the nodes stageline makes itself: a template's digest covers their options,
not stageline's code, so upgrading stageline leaves the templates that use them unchanged."""
FINAL_STEPS = {"gate": ("reject", "park", "fail"), "question": ("default", "park", "fail")}
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}

Author = Callable[[Any, list[dict[str, Any]], StageContext], Any]
"""``(state, history so far, ctx) -> questions | None``: None or [] when satisfied."""


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


def _values(state: Any) -> dict[str, Any]:
    """A state's values by key: a TypedDict's items, a pydantic model's fields."""
    return dict(state) if isinstance(state, Mapping) else dict(getattr(state, "__dict__", {}))


def state_hash(state: Any) -> str:
    """A hash of the state a person is asked about (stageline's own keys left out)."""
    public = {k: v for k, v in _values(state).items() if k not in RESERVED_KEYS}
    text = json.dumps(public, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _clip(value: Any, limit: int = 2000) -> Any:
    if isinstance(value, str) and len(value) > limit:
        return value[: limit - 1] + "…"
    return value


def gate_stage(
    name: str,
    *,
    changes_to: str | None = None,
    reject_to: str | None = None,
    feedback_key: str = "feedback",
    changes_loop: tuple[str, int] | None = None,
    show: Sequence[str] = (),
    deadline: float = DEFAULT_DEADLINE,
    on_deadline: Sequence[str] = ("remind", "escalate", "park"),
    park: Mapping[str, Any] | None = None,
) -> Stage:
    """The stage of a gate node: waits for approve, reject or request changes.

    ``changes_loop`` is ``(loop name, bound)`` of the loop that bounds rounds of changes.
    ``park`` makes it a park gate (the run is ``parked``): ``{"loop": name, "rounds": n}``;
    approve or changes there grant the loop ``n`` more rounds.
    """

    async def run_gate(state: Any, ctx: StageContext) -> dict[str, Any]:
        digest = state_hash(state)
        values = _values(state)
        counts = values.get(LOOPS_KEY) or {}
        left = (
            None
            if changes_loop is None
            else max(0, changes_loop[1] - counts.get(changes_loop[0], 0))
        )
        payload: dict[str, Any] = {
            "kind": "gate",
            "gate": name,
            "node": ctx.node,
            "attempt": ctx.attempt,
            "state_hash": digest,
            "deadline": deadline,
            "on_deadline": list(on_deadline),
            "changes_to": changes_to,
            "reject_to": reject_to,
            "changes_left": left,
            "show": {k: _clip(values[k]) for k in show if k in values},
        }
        if park is not None:
            payload["park"] = dict(park)
        asked = payload
        while True:
            decision = interrupt(asked)
            why = _refuse_decision(decision, ctx.attempt, digest, changes_to, left, park)
            if why is None:
                break
            asked = {**payload, "refused": {"token": _token(decision), "reason": why}}
        update: dict[str, Any] = {GATES_KEY: {name: decision["decision"]}}
        if decision["decision"] == "changes":
            update[feedback_key] = decision.get("note") or ""
        if park is not None and decision["decision"] not in ("reject", "takeover"):
            update[LOOPS_KEY] = {str(park["loop"]): -int(park["rounds"])}  # more rounds
        return update

    run_gate.__name__ = run_gate.__qualname__ = f"gate[{name}]"
    return Stage(
        fn=run_gate,
        name=f"gate:{name}",
        capability="approval",
        cost_class="none",
        metadata=MACHINERY,
    )


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


def question_stage(
    name: str,
    *,
    questions: Any = None,
    ask: Author | None = None,
    max_turns: int = 1,
    history_key: str = "qa_history",
    answers_key: str | None = None,
    deadline: float = DEFAULT_DEADLINE,
    on_deadline: Sequence[str] = ("remind", "escalate", "park"),
) -> Stage:
    """The stage of a question node: asks a fixed question set, or what ``ask`` authors, turn
    after turn until ``ask`` is satisfied or ``max_turns`` sets were asked.

    Each set's id is ``question_id(run_id, turn)``, ``turn`` counting the sets already in
    ``history_key``; what ``ask`` authors is kept by the side-effect journal, so a replay asks
    the same questions without calling it (a model) again.
    """
    if (questions is None) == (ask is None):
        raise UsageError("a question node takes `questions` or `ask`, not both or neither")
    fixed = None if questions is None else normalize_questions(questions)
    if not isinstance(max_turns, int) or max_turns < 1:
        raise UsageError("max_turns must be at least 1")

    async def author(
        state: Any, history: list[dict[str, Any]], ctx: StageContext, local: int
    ) -> list[dict[str, Any]] | None:
        if ask is None:
            return fixed if local == 0 else None

        async def call() -> Any:
            made = ask(state, history, ctx)
            made = await made if inspect.isawaitable(made) else made
            return normalize_questions(made) if made else None

        made = await ctx.effect(f"questions:{len(history)}", call, idempotent=True)
        return list(made) if made else None

    async def run_question(state: Any, ctx: StageContext) -> dict[str, Any]:
        history = list(_values(state).get(history_key) or [])
        asked_now: list[dict[str, Any]] = []
        for local in range(max_turns):
            qs = await author(state, history + asked_now, ctx, local)
            if not qs:
                break
            asked_now.append(
                ask_person(
                    ctx,
                    qs,
                    turn=len(history) + local,
                    name=name,
                    deadline=deadline,
                    on_deadline=on_deadline,
                )
            )
        update: dict[str, Any] = {history_key: history + asked_now}
        if answers_key:
            merged: dict[str, Any] = {}
            for entry in asked_now:
                merged.update(entry["answers"])
            update[answers_key] = merged
        return update

    run_question.__name__ = run_question.__qualname__ = f"question[{name}]"
    return Stage(
        fn=run_question,
        name=f"question:{name}",
        capability="clarify",
        cost_class="none",
        metadata=MACHINERY,
    )


def ask_person(
    ctx: StageContext,
    questions: Any,
    *,
    turn: int,
    name: str | None = None,
    deadline: float = DEFAULT_DEADLINE,
    on_deadline: Sequence[str] = ("remind", "escalate", "park"),
) -> dict[str, Any]:
    """Ask a person question set number ``turn`` of the run, from inside a node; returns
    ``{turn, question_id, questions, answers, actor}`` once answered (the node waits till then).

    The set's id is ``question_id(run_id, turn)``: give each set of a run its own ``turn``.
    """
    qs = normalize_questions(questions)
    qid = question_id(ctx.run_id, turn)
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
