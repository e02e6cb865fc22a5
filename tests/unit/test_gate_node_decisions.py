"""The gate node itself: what it asks, which decisions it refuses (asking again), and what a
decision it takes leaves in the state. Run straight on LangGraph, so the node sees responses
the runner would have stopped first (a missed rollback, a hand-made resume)."""

from __future__ import annotations

from typing import Any, TypedDict

from direct_run import DirectRun, decision
from stageline.stages import StageContext, gate_stage, state_hash
from stageline.templates import Template

SEEN: list[dict[str, Any]] = []


class S(TypedDict, total=False):
    text: str
    n: int
    feedback: str
    notes: str
    published: bool
    archived: bool


async def write(state: S, ctx: StageContext) -> dict[str, Any]:
    SEEN.append(dict(state))
    n = state.get("n", 0) + 1
    return {"text": f"draft {n}", "n": n}


def done(key: str) -> Any:
    """A stage that marks ``key`` done."""

    async def mark(state: S, ctx: StageContext) -> dict[str, Any]:
        return {key: True}

    return mark


publish, archive = done("published"), done("archived")


def gated(**gate: Any) -> Template:
    """write -> approval -> publish; changes go back to write, reject to archive."""
    SEEN.clear()
    template = Template("gated", state=S)
    template.add_stage("write", write).add_stage("publish", publish)
    template.add_stage("archive", archive)
    options = {"changes_to": "write", "reject_to": "archive", "show": ("text",), **gate}
    template.add_gate("approval", **options)
    template.add_sequence("write", "approval", "publish")
    return template


async def test_a_gate_asks_with_all_a_decision_binds_to() -> None:
    run = DirectRun(gated(deadline="1m", on_deadline=["remind", "fail"]), attempt=3)
    asked = await run.start({})
    assert asked == {
        "kind": "gate",
        "gate": "approval",
        "node": "approval",
        "attempt": 3,
        "state_hash": state_hash({"text": "draft 1", "n": 1}),
        "deadline": 60.0,
        "on_deadline": ["remind", "fail"],
        "changes_to": "write",
        "reject_to": "archive",
        "changes_left": 3,
        "show": {"text": "draft 1"},
    }
    assert asked["state_hash"] != state_hash({})  # the hash is of the state it shows


async def test_a_gate_node_named_apart_from_its_node_reports_both() -> None:
    template = Template("apart", state=S)
    template.add_stage("write", write)
    template.add_stage("review", gate_stage("editor", show=("text", "absent")))
    template.add_stage("publish", publish)
    template.add_sequence("write", "review", "publish")
    run = DirectRun(template)
    asked = await run.start({})
    assert asked is not None
    assert (asked["gate"], asked["node"]) == ("editor", "review")
    assert (asked["changes_to"], asked["reject_to"], asked["changes_left"]) == (None, None, None)
    assert asked["show"] == {"text": "draft 1"}  # a key the state lacks is left out
    assert asked["on_deadline"] == ["remind", "escalate", "park"]
    assert asked["deadline"] == 24 * 3600.0
    assert "park" not in asked
    assert await run.respond(decision(asked)) is None
    assert (await run.state())["published"] is True


async def test_what_a_gate_shows_is_clipped_to_2000_characters() -> None:
    async def long_text(state: S, ctx: StageContext) -> dict[str, Any]:
        return {"text": "x" * 2500, "notes": "y" * 2000}

    template = Template("long", state=S)
    template.add_stage("write", long_text)
    template.add_gate("approval", show=("text", "notes"))
    template.add_edge("write", "approval")
    asked = await DirectRun(template).start({})
    assert asked is not None
    assert asked["show"]["text"] == "x" * 1999 + "…"
    assert asked["show"]["notes"] == "y" * 2000  # at the limit: shown whole


async def test_a_decision_for_another_state_is_refused_and_the_gate_asks_again() -> None:
    run = DirectRun(gated())
    asked = await run.start({})
    assert asked is not None
    other = state_hash({"text": "draft 0", "n": 0})
    again = await run.respond(decision(asked, state_hash=other, token="tok-9"))
    reason = (
        f"stale: the decision was made on state {other}, but the state is now {asked['state_hash']}"
    )
    assert again == {**asked, "refused": {"token": "tok-9", "reason": reason}}
    assert "published" not in await run.state()
    assert await run.respond(decision(asked)) is None
    assert (await run.state())["published"] is True


async def test_a_decision_for_another_attempt_is_refused() -> None:
    run = DirectRun(gated(), attempt=2)
    asked = await run.start({})
    assert asked is not None
    again = await run.respond(decision(asked, attempt=1))
    reason = "stale: the decision is for attempt 1, but the run is at attempt 2"
    assert again == {**asked, "refused": {"token": "tok-1", "reason": reason}}


async def test_what_is_not_a_decision_is_refused() -> None:
    run = DirectRun(gated())
    asked = await run.start({})
    assert asked is not None
    again = await run.respond("approve")
    assert again == {**asked, "refused": {"token": None, "reason": "not a decision: 'approve'"}}
    again = await run.respond(decision(asked, "maybe"))
    assert again is not None and again["refused"]["token"] == "tok-1"
    assert again["refused"]["reason"].startswith("not a decision: {'decision': 'maybe'")
    assert await run.respond(decision(asked, "reject")) is None
    state = await run.state()
    assert state.get("archived") is True and "published" not in state


async def test_changes_land_under_the_feedback_key_and_go_back() -> None:
    run = DirectRun(gated())
    asked = await run.start({})
    assert asked is not None
    asked = await run.respond(decision(asked, "changes", note="shorter"))
    assert SEEN[-1]["feedback"] == "shorter"  # write ran again with the note
    assert asked is not None and asked["changes_left"] == 2  # one round of changes used

    run = DirectRun(gated(feedback_key="notes"))
    asked = await run.start({})
    assert asked is not None
    await run.respond(decision(asked, "changes", note="longer"))
    assert SEEN[-1].get("notes") == "longer" and "feedback" not in SEEN[-1]


async def test_changes_without_a_note_leave_empty_feedback() -> None:
    run = DirectRun(gated())
    asked = await run.start({"feedback": "old"})
    assert asked is not None
    await run.respond(decision(asked, "changes"))
    assert SEEN[-1]["feedback"] == ""


async def test_a_gate_takes_no_more_changes_than_its_bound() -> None:
    run = DirectRun(gated(max_changes=1))
    asked = await run.start({})
    assert asked is not None and asked["changes_left"] == 1
    asked = await run.respond(decision(asked, "changes", note="again"))
    assert asked is not None and asked["changes_left"] == 0
    again = await run.respond(decision(asked, "changes", note="once more"))
    refused = {"token": "tok-1", "reason": "this gate takes no (more) changes"}
    assert again == {**asked, "refused": refused}
    assert len(SEEN) == 2  # write did not run a third time


async def test_a_gate_without_a_changes_route_refuses_changes() -> None:
    run = DirectRun(gated(changes_to=None))
    asked = await run.start({})
    assert asked is not None and asked["changes_left"] is None
    again = await run.respond(decision(asked, "changes", note="no"))
    assert again is not None
    assert again["refused"]["reason"] == "this gate takes no (more) changes"


async def test_gate_stage_on_its_own_puts_the_note_under_feedback() -> None:
    """``gate_stage`` used without ``add_gate``: the default feedback key is ``feedback``."""
    stage = gate_stage("editor", changes_to="write", changes_loop=("edits", 5))
    assert (stage.name, stage.capability, stage.cost_class) == ("gate:editor", "approval", "none")
    template = Template("own", state=S)
    template.add_stage("write", write).add_stage("review", stage).add_stage("publish", publish)
    template.add_sequence("write", "review", "publish")
    run = DirectRun(template)
    asked = await run.start({})
    assert asked is not None and asked["changes_left"] == 5  # no round of the loop counted
    await run.respond(decision(asked, "changes", note="tighter"))
    state = await run.state()
    assert (state["feedback"], state["published"]) == ("tighter", True)
