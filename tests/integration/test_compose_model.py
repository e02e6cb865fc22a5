"""Composing with a model (issue 27): a fake chat model of ``langchain_core`` drafts first an
invalid template, then a valid one; the check's error (file, line, reason) goes back to it, and
the rounds are a recorded run of the built-in ``compose`` template (with an optional gate)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from langchain_core.language_models import GenericFakeChatModel
from langchain_core.messages import AIMessage

from stageline.architect import compose_with_model, plan_goal, read_goal, render_plan
from stageline.config import Settings
from stageline.ledger import RunStatus
from stageline.llm import Completion, LangChainModel
from stageline.runner import Runner, RunSummary
from stageline.templates import build_catalog, load_template

pytestmark = pytest.mark.timeout(120)

GOALS = [
    "Write a blog post about durable pipelines",
    "Research notes about vector databases",
    "Write a blog post about caching, reviewed by two critics",
    "Write a draft about retries, reviewed by two critics and revised at most 2 rounds",
    "Write a blog post about queues; an editor approves before publishing",
    "Write a blog post about testing; first ask me about the audience and scope",
    "Draft an implementation plan for adding retries, reviewed and revised up to 3 times",
    "An implementation plan for a cache layer; ask about scope first; the tech lead approves",
    "Build a wiki for this repository",
    "An outline for a talk about LangGraph",
]


class Recording:
    """A ``ChatModel`` over a LangChain fake chat model that keeps every prompt it was sent."""

    name = "fake"

    def __init__(self, replies: list[str]) -> None:
        fake = GenericFakeChatModel(messages=iter([AIMessage(content=r) for r in replies]))
        self.inner = LangChainModel("fake", fake)
        self.prompts: list[str] = []

    async def complete(self, prompt: str, *, system: str | None = None) -> Completion:
        self.prompts.append(prompt)
        return await self.inner.complete(prompt, system=system)


def _drafts(goal: str, tmp_path: Path) -> tuple[str, str]:
    """A valid draft (what the offline composer writes) and the same with an unknown stage."""
    valid = render_plan(plan_goal(read_goal(goal), build_catalog(tmp_path)))
    first_stage = yaml.safe_load(valid)["stages"]
    node, ref = next(iter(first_stage.items()))
    invalid = valid.replace(f"  {node}: {ref}\n", f"  {node}: nowhere.stages:{node}\n", 1)
    assert invalid != valid
    return invalid, valid


async def _compose(
    goal: str,
    replies: list[str],
    tmp_path: Path,
    settings: Settings,
    *,
    target: Path | None = None,
    **options: Any,
) -> tuple[RunSummary, Recording, Path]:
    """``compose_with_model`` of ``goal`` over the project's catalog, the model answering
    ``replies`` in turn, into ``target`` (default ``tmp_path/composed.yaml``): what it says,
    the model (with the prompts it was sent) and the target."""
    model = Recording(replies)
    target = target or tmp_path / "composed.yaml"
    summary = await compose_with_model(
        goal, build_catalog(tmp_path), target=target, model=model, settings=settings, **options
    )
    return summary, model, target


@pytest.mark.parametrize("goal", GOALS)
async def test_an_invalid_draft_goes_back_with_its_error_and_the_valid_one_is_written(
    goal: str, tmp_path: Path, sqlite_settings: Settings
) -> None:
    invalid, valid = _drafts(goal, tmp_path)
    replies = [f"Here it is:\n```yaml\n{invalid}```", f"```yaml\n{valid}```"]
    summary, model, target = await _compose(
        goal, replies, tmp_path, sqlite_settings, target=tmp_path / "templates" / "composed.yaml"
    )
    assert summary.status is RunStatus.SUCCEEDED, summary.records
    assert summary.run.template == "compose"
    assert target.read_text() == valid
    assert load_template(str(target)).name == yaml.safe_load(valid)["name"]
    first, second = summary.state["rounds"]
    (error,) = first["errors"]
    assert error["file"] == str(target) and isinstance(error["line"], int)
    assert "nowhere.stages" in error["reason"] and second["errors"] == []
    assert len(model.prompts) == 2
    assert f"{target}:{error['line']}: " in model.prompts[1]  # the error went back to it
    assert "nowhere.stages" in model.prompts[1] and goal in model.prompts[1]
    drafts = [r for r in summary.records if r.node == "draft"]
    assert len(drafts) == 2  # each round is a node record of the run


async def test_with_approval_the_file_waits_for_the_gate(
    tmp_path: Path, sqlite_settings: Settings
) -> None:
    _, valid = _drafts(GOALS[0], tmp_path)
    # A bare reply: the whole reply is the draft.
    summary, _, target = await _compose(GOALS[0], [valid], tmp_path, sqlite_settings, approve=True)
    assert summary.status is RunStatus.WAITING and not target.exists()
    # Changes go back to `draft`, whose loop allows 3 drafts: one is made, 2 rounds are left.
    assert summary.waiting[0].payload["changes_left"] == 2
    async with Runner.open(sqlite_settings) as runner:
        done = await runner.approve(summary.run.run_id)
    assert done.status is RunStatus.SUCCEEDED and target.read_text() == valid


async def test_a_model_that_never_passes_fails_the_run_naming_the_last_error(
    tmp_path: Path, sqlite_settings: Settings
) -> None:
    invalid, _ = _drafts(GOALS[1], tmp_path)
    summary, _, target = await _compose(GOALS[1], [invalid] * 3, tmp_path, sqlite_settings)
    assert summary.status is RunStatus.FAILED and not target.exists()
    assert len(summary.state["rounds"]) == 3
    failed = [r for r in summary.records if r.node == "exhausted"]
    assert failed and "nowhere.stages" in (failed[0].error or "")
