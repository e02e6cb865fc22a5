"""Authoring questions is harmless to repeat: if the process stopped while a model authored
a question set (its effect in doubt), resuming the run authors it again instead of failing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, TypedDict

import pytest

from stageline.config import Settings
from stageline.ledger import Effect, RunStatus
from stageline.runner import Runner
from stageline.stages import StageContext
from stageline.templates import Template
from stageline.testing import memory_runner


class Q(TypedDict, total=False):
    qa_history: list[dict[str, Any]]


@pytest.fixture
async def runner(memory_settings: Settings) -> AsyncIterator[Runner]:
    async with memory_runner(memory_settings) as opened:
        yield opened


def author(state: Q, history: list[dict[str, Any]], ctx: StageContext) -> Any:
    return ["What is the goal?"]


async def test_questions_authored_when_the_process_stopped_are_authored_again(
    runner: Runner,
) -> None:
    template = Template("authored", state=Q)
    template.add_question("clarify", ask=author)
    run = await runner.create(template, {}, run_id="doubt-1")
    started = Effect(run_id=run.run_id, node="clarify", key="questions:0", attempt=1)
    await runner.ledger.begin_effect(started)  # and the process stopped there
    resumed = await runner.resume(run.run_id)
    assert resumed.status is RunStatus.WAITING
    [wait] = resumed.waiting
    assert wait.payload["question_set"]["questions"][0]["text"] == "What is the goal?"
