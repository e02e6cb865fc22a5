"""Agent Inbox's view of gates and question sets, and its responses as decisions and answers
(the served flows: tests/acceptance/test_langgraph_inbox.py)."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi import HTTPException

from stageline.ledger import Wait, WaitKind
from stageline.server.langgraph._inbox import human_view, inbox_resume


def _gate(**extra: Any) -> dict[str, Any]:
    return {
        "kind": "gate",
        "gate": "ship",
        "node": "ship",
        "attempt": 1,
        "state_hash": "h",
        "changes_to": None,
        "reject_to": "fix",
        "changes_left": None,
        "show": {"plan": "do it"},
        **extra,
    }


def _questions(*questions: dict[str, Any]) -> dict[str, Any]:
    return {
        "kind": "question",
        "name": "ask",
        "node": "ask",
        "attempt": 1,
        "question_id": "q",
        "question_set": {"questions": list(questions)},
    }


def _wait(payload: dict[str, Any]) -> Wait:
    kind = WaitKind(payload["kind"])
    return Wait(
        run_id="r", wait_id="w", kind=kind, name="ask", node="n", attempt=1, interrupt_id="i",
        payload=payload,
    )  # fmt: skip


def test_other_values_are_left_as_they_are() -> None:
    asked = [{"action_request": {"action": "a", "args": {}}, "config": {}, "description": "d"}]
    for value in ("which colour?", asked, asked[0], {"kind": "gate"}, None):
        assert human_view(value) == value


def test_a_gate_offers_what_it_takes_and_says_why_a_response_was_refused() -> None:
    seen = human_view(_gate(refused={"token": "t", "reason": "stale: the state changed"}))
    assert seen["gate"] == "ship" and seen["action_request"]["args"] == {"plan": "do it"}
    assert seen["config"] == {
        "allow_accept": True,
        "allow_edit": False,
        "allow_respond": False,  # no changes_to
        "allow_ignore": True,
    }
    assert "`fix`" in seen["description"] and "stale: the state changed" in seen["description"]
    spent = human_view(_gate(changes_to="plan", changes_left=0))
    assert not spent["config"]["allow_respond"]
    assert human_view(_gate(changes_to="plan", changes_left=None))["config"]["allow_respond"]


def test_gate_responses_are_decisions() -> None:
    wait = _wait(_gate())
    assert inbox_resume(wait, [{"type": "accept", "args": None}]) == {"decision": "approve"}
    assert inbox_resume(wait, {"type": "ignore"}) == {"decision": "reject"}
    assert inbox_resume(wait, [{"type": "response", "args": "shorter"}]) == {
        "decision": "changes",
        "note": "shorter",
    }
    for plain in ("approve", {"decision": "changes", "note": "x"}, {"i1": "approve"}):
        assert inbox_resume(wait, plain) == plain  # the forms of today, untouched
    for bad, status in (
        ([{"type": "edit", "args": {"action": "ship", "args": {}}}], 409),
        ([{"type": "accept"}, {"type": "ignore"}], 422),
        ([{"type": "nope"}], 422),
        ([{"type": "response", "args": None}], 422),
    ):
        with pytest.raises(HTTPException) as refused:
            inbox_resume(wait, bad)
        assert refused.value.status_code == status


def test_question_sets_answer_from_responses_with_defaults_filling_the_rest() -> None:
    one = {"id": "name", "text": "Name?", "kind": "text", "required": True}
    tier = {"id": "tier", "text": "Tier?", "kind": "choice", "choices": ["a", "b"]}
    tier |= {"default": "a", "required": False}
    payload = _questions(one, tier)
    seen = human_view(payload)
    assert seen["action_request"] == {"action": "ask", "args": {"name": "", "tier": "a"}}
    assert seen["config"] == {
        "allow_accept": False,
        "allow_edit": True,
        "allow_respond": True,
        "allow_ignore": False,
    }
    wait = _wait(payload)
    assert inbox_resume(wait, [{"type": "response", "args": "Ann"}]) == {"name": "Ann", "tier": "a"}
    edit = {"type": "edit", "args": {"action": "ask", "args": {"name": "Bo", "tier": "b"}}}
    assert inbox_resume(wait, [edit]) == {"name": "Bo", "tier": "b"}
    assert inbox_resume(wait, {"type": "accept"}) == {"type": "accept"}  # answers, not a response

    defaults = _wait(_questions(tier))
    assert inbox_resume(defaults, [{"type": "accept", "args": None}]) == {"tier": "a"}
    two = _wait(_questions(one, {**one, "id": "other"}))
    assert not human_view(two.payload)["config"]["allow_respond"]
    for bad in ({"type": "response", "args": "x"}, {"type": "ignore"}, {"type": "accept"}):
        with pytest.raises(HTTPException) as refused:
            inbox_resume(two, [bad])
        assert refused.value.status_code == 409
