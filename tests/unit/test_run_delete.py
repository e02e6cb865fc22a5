"""``Runner.delete`` on a real SQLite file: the run named goes, its checkpoints with it, and
every other run stays as it was."""

from __future__ import annotations

from typing import Any, TypedDict

import pytest

from stageline.errors import RunNotFound
from stageline.runner import Runner
from stageline.stages import StageContext
from stageline.templates import Template


class S(TypedDict, total=False):
    text: str


async def write(state: S, ctx: StageContext) -> dict[str, Any]:
    return {"text": "draft"}


async def test_a_deleted_run_is_gone_with_its_checkpoints_and_the_others_stay(
    runner: Runner,
) -> None:
    template = Template("deleted", state=S).add_stage("write", write)
    gone = (await runner.start(template, {}, run_id="gone")).run.run_id
    kept = await runner.start(template, {}, run_id="kept")
    await runner.delete(gone)
    with pytest.raises(RunNotFound):
        await runner.status(gone)
    with pytest.raises(RunNotFound):
        await runner.history(gone)
    assert [r.run_id for r in await runner.ledger.list_runs()] == ["kept"]
    assert (await runner.status("kept")).state == kept.state == {"text": "draft"}
    graph = runner.graph(template)  # the checkpoints, read with LangGraph's own API
    assert (await graph.aget_state({"configurable": {"thread_id": "gone"}})).values == {}
    assert (await graph.aget_state({"configurable": {"thread_id": "kept"}})).values["text"] == (
        "draft"
    )
