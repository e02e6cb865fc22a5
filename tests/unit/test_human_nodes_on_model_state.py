"""Gates and question nodes on a pydantic state: they read the model's fields as they read a
TypedDict's keys (what the gate shows and hashes, its rounds of changes, the history)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from direct_run import DirectRun, decision
from stageline.stages import StageContext, question_id, state_hash
from stageline.templates import Template


class Draft(BaseModel):
    text: str = ""
    feedback: str = ""
    qa_history: list[dict[str, Any]] = Field(default_factory=list)
    answers: dict[str, Any] = Field(default_factory=dict)


async def write(state: Draft, ctx: StageContext) -> dict[str, Any]:
    return {"text": f"draft {state.feedback}".strip()}


def reviewed() -> Template:
    template = Template("reviewed", state=Draft)
    template.add_stage("write", write)
    template.add_question("ask", questions=["Why?"], answers_key="answers")
    template.add_gate("approval", changes_to="write", max_changes=2, show=("text", "answers"))
    template.add_sequence("write", "ask", "approval")
    return template


async def test_a_gate_on_a_model_state_shows_and_hashes_its_fields() -> None:
    run = DirectRun(reviewed())
    asked = await run.start({})
    assert asked is not None and asked["kind"] == "question"
    asked = await run.respond(
        {"question_id": asked["question_id"], "answers": {"q1": "because"}, "actor": "ann"}
    )
    assert asked is not None and asked["kind"] == "gate"
    assert asked["show"] == {"text": "draft", "answers": {"q1": "because"}}
    history = (await run.state())["qa_history"]
    assert asked["state_hash"] == state_hash(
        {"text": "draft", "feedback": "", "qa_history": history, "answers": {"q1": "because"}}
    )
    assert asked["changes_left"] == 2
    asked = await run.respond(decision(asked, "changes", note="shorter"))
    assert asked is not None and asked["kind"] == "question"  # write ran again, then ask
    asked = await run.respond(
        {"question_id": asked["question_id"], "answers": {"q1": "still"}, "actor": "ann"}
    )
    assert asked is not None
    assert asked["show"]["text"] == "draft shorter" and asked["changes_left"] == 1


async def test_a_question_on_a_model_state_goes_on_from_its_history() -> None:
    earlier = {"turn": 0, "question_id": "x", "questions": [], "answers": {}, "actor": None}
    run = DirectRun(reviewed())
    asked = await run.start({"qa_history": [earlier]})
    assert asked is not None
    assert (asked["turn"], asked["question_id"]) == (1, question_id("run-1", 1, node="ask"))
