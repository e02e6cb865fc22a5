"""A decision binds to the state the person saw: the gate's state hash, and a decision made on
the state before an edit is refused once the gate asks again on the edited state."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypedDict

import pytest

from stageline.config import Settings
from stageline.errors import InvalidTransition, StaleDecision
from stageline.ledger import RunStatus
from stageline.runner import Runner
from stageline.stages import GATES_KEY, LOOPS_KEY, StageContext, state_hash
from stageline.templates import Template
from stageline.testing import memory_runner


class S(TypedDict, total=False):
    text: str
    feedback: str
    published: bool


@dataclass
class Draft:
    text: str
    n: int = 1


async def write(state: S, ctx: StageContext) -> dict[str, Any]:
    return {"text": state.get("text") or "draft"}


async def publish(state: S, ctx: StageContext) -> dict[str, Any]:
    return {"published": True}


@pytest.fixture
async def runner(memory_settings: Settings) -> AsyncIterator[Runner]:
    async with memory_runner(memory_settings) as opened:
        yield opened


def test_the_hash_is_of_the_public_values_whatever_their_order() -> None:
    one = state_hash({"text": "a", "n": 1})
    assert one == state_hash({"n": 1, "text": "a"})
    assert one != state_hash({"text": "b", "n": 1})
    assert one != state_hash({"text": "a", "n": 1, "extra": None})
    assert len(one) == 16 and int(one, 16) >= 0


def test_stagelines_own_keys_do_not_change_the_hash() -> None:
    """Loop counts and past gate decisions are not what the person is asked about."""
    plain = {"text": "a"}
    kept = {"text": "a", LOOPS_KEY: {"write": 2}, GATES_KEY: {"approval": "changes"}}
    assert state_hash(kept) == state_hash(plain)


def test_a_dataclass_state_hashes_by_its_fields_and_a_bare_object_as_empty() -> None:
    assert state_hash(Draft("a")) == state_hash({"text": "a", "n": 1})
    assert state_hash(Draft("a")) != state_hash(Draft("b"))
    assert state_hash(object()) == state_hash({})  # no fields: the empty state


def test_values_that_are_not_json_hash_by_their_text() -> None:
    early = state_hash({"at": datetime(2026, 1, 1, 9, 0)})
    assert early == state_hash({"at": "2026-01-01 09:00:00"})
    assert early != state_hash({"at": datetime(2026, 1, 1, 10, 0)})


def test_the_hash_is_stable_across_releases() -> None:
    """Waits keep the hash they were asked with (and chat buttons carry it): a new release
    hashing the same state otherwise would refuse every decision pending at the upgrade."""
    assert state_hash({"text": "draft 1", "n": 1}) == "6e34c2132e36af0f"
    assert state_hash({}) == "44136fa355b3678a"
    assert state_hash({"text": "é"}) == state_hash({"text": "\u00e9"})


async def test_a_decision_on_the_state_before_an_edit_is_refused(runner: Runner) -> None:
    """An edit lands before the gate it passed (a failed run, retried), so the gate asks again
    on the edited state; an approval of the old state is stale."""
    failures = ["publish fails once"]

    async def publish_once(state: S, ctx: StageContext) -> dict[str, Any]:
        if failures:
            raise RuntimeError(failures.pop())
        return {"published": True}

    template = Template("edited", state=S)
    template.add_stage("write", write).add_stage("publish", publish_once)
    template.add_gate("approval", changes_to="write", show=("text",))
    template.add_sequence("write", "approval", "publish")
    run_id = (await runner.start(template, {})).run.run_id
    [before] = await runner.pending(run_id)
    assert before.state_hash == state_hash({"text": "draft"})
    assert (await runner.approve(run_id)).status is RunStatus.FAILED

    with pytest.raises(InvalidTransition, match="without a recorded decision"):
        await runner.update_state(run_id, {"text": "unseen"})  # as the gate: it passed it
    with pytest.raises(InvalidTransition, match="has not run"):
        await runner.update_state(run_id, {"text": "unseen"}, as_node="publish")
    edited = await runner.update_state(run_id, {"text": "a better draft"}, as_node="write")
    assert edited.status is RunStatus.FAILED
    again = await runner.retry(run_id)
    assert again.status is RunStatus.WAITING
    [after] = await runner.pending(run_id)
    assert after.state_hash == state_hash({"text": "a better draft"}) != before.state_hash
    with pytest.raises(StaleDecision, match="made on state"):
        await runner.approve(run_id, state_hash=before.state_hash)
    done = await runner.approve(run_id, state_hash=after.state_hash)
    assert done.status is RunStatus.SUCCEEDED and done.state["text"] == "a better draft"
