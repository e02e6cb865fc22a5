"""A park gate (where a bounded loop that ran out of rounds waits): approve or changes grant
the loop more rounds, reject grants none and ends the run."""

from __future__ import annotations

from typing import Any, TypedDict

from direct_run import DirectRun, decision
from stageline.stages import StageContext
from stageline.templates import Template
from stageline.templates._park import add_park


class S(TypedDict, total=False):
    n: int
    feedback: str
    seen: str


async def work(state: S, ctx: StageContext) -> dict[str, Any]:
    return {"n": state.get("n", 0) + 1, "seen": state.get("feedback", "")}


def looping(rounds: int = 2) -> Template:
    """work loops on itself, 2 rounds; then it parks at ``more``, which grants ``rounds``."""
    template = Template("looping", state=S)
    template.add_stage("work", work)
    template.add_route("work", lambda s: "again", {"again": "work"})
    template.add_loop("rounds", head="work", max_iterations=2, on_exhausted="more")
    add_park(template, "more", loop="rounds", head="work", rounds=rounds)
    return template


async def test_approve_at_a_park_gate_grants_the_rounds_it_names() -> None:
    run = DirectRun(looping(rounds=3))
    asked = await run.start({})
    assert asked is not None and asked["park"] == {"loop": "rounds", "rounds": 3}
    assert (await run.state())["n"] == 2
    asked = await run.respond(decision(asked))
    assert asked is not None and asked["gate"] == "more"  # parked again, 3 rounds later
    assert (await run.state())["n"] == 5


async def test_changes_at_a_park_gate_grant_rounds_with_the_note() -> None:
    run = DirectRun(looping())
    asked = await run.start({})
    assert asked is not None
    asked = await run.respond(decision(asked, "changes", note="try harder"))
    state = await run.state()
    assert (state["n"], state["seen"]) == (4, "try harder")


async def test_reject_at_a_park_gate_ends_the_run_with_no_more_rounds() -> None:
    run = DirectRun(looping())
    asked = await run.start({})
    assert asked is not None
    assert await run.respond(decision(asked, "reject")) is None
    assert (await run.state())["n"] == 2
