"""Two question nodes of one run, in parallel and sharing a history key, on SQLite and on
Postgres: each waits under its own question id, each takes its answer, both answers land."""

from __future__ import annotations

import operator
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest

from stageline.config import Settings
from stageline.ledger import RunStatus, WaitStatus
from stageline.runner import Runner
from stageline.stages import StageContext, question_id
from stageline.templates import Template


class S(TypedDict, total=False):
    qa_history: Annotated[list[dict[str, Any]], operator.add]
    seen: dict[str, Any]


async def start(state: S, ctx: StageContext) -> dict[str, Any]:
    return {}


async def join(state: S, ctx: StageContext) -> dict[str, Any]:
    return {"seen": {e["question_id"]: e["answers"] for e in state.get("qa_history") or []}}


TEMPLATE = Template("parallel_questions", state=S)
TEMPLATE.add_stage("start", start)
TEMPLATE.add_question("audience", questions=["Who is it for?"])
TEMPLATE.add_question("tone", questions=["Which tone?"])
TEMPLATE.add_stage("join", join)
TEMPLATE.add_fanout("start", ["audience", "tone"], join="join")


@pytest.fixture(params=["sqlite", "postgres"])
def settings(
    request: pytest.FixtureRequest, tmp_path: Path, settings_for: Callable[[str], Settings]
) -> Settings:
    if request.param == "sqlite":
        return settings_for(f"sqlite:///{tmp_path / 'questions.db'}")
    return settings_for(request.getfixturevalue("postgres_url"))


async def step(settings: Settings, action: Callable[[Runner], Any]) -> Any:
    """One command's worth: a fresh runner over the database, closed after."""
    async with Runner.open(settings) as runner:
        runner.load(TEMPLATE)
        return await action(runner)


async def test_parallel_question_nodes_wait_under_their_own_ids_and_both_answers_land(
    settings: Settings,
) -> None:
    first = await step(settings, lambda r: r.start(TEMPLATE, {}))
    run_id = first.run.run_id
    asked = {w.node: w for w in first.waiting}
    assert sorted(asked) == ["audience", "tone"]
    assert asked["audience"].wait_id == question_id(run_id, 0, node="audience")
    assert asked["tone"].wait_id == question_id(run_id, 0, node="tone")
    assert asked["audience"].wait_id != asked["tone"].wait_id
    rows = await step(settings, lambda r: r.ledger.waits(run_id))
    assert sorted((w.node, w.wait_id) for w in rows if w.status is WaitStatus.PENDING) == sorted(
        (w.node, w.wait_id) for w in asked.values()
    )

    half = await step(
        settings,
        lambda r: r.answer(run_id, {"q1": "editors"}, question_id=asked["audience"].wait_id),
    )
    assert half.status is RunStatus.WAITING
    [left] = half.waiting
    assert left.wait_id == asked["tone"].wait_id

    done = await step(settings, lambda r: r.answer(run_id, {"q1": "dry"}, question_id=left.wait_id))
    assert done.status is RunStatus.SUCCEEDED, done.run.error
    assert done.state["seen"] == {
        asked["audience"].wait_id: {"q1": "editors"},
        asked["tone"].wait_id: {"q1": "dry"},
    }
