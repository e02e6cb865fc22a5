"""Every template's required inputs are checked before a run exists: declared with
``require_input`` or derived from its state (a TypedDict's ``Required`` keys, a pydantic
model's required fields, a dataclass's fields without a default, YAML ``required: true``)."""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated, Any, Required, TypedDict

import pytest
from pydantic import BaseModel

from stageline.config import Settings
from stageline.errors import InputError
from stageline.runner import Runner
from stageline.templates import Template, load_template
from stageline.testing import memory_runner


@pytest.fixture
async def runner(memory_settings: Settings) -> AsyncIterator[Runner]:
    async with memory_runner(memory_settings) as opened:
        yield opened


async def _done(state: Any, ctx: Any) -> dict[str, Any]:
    return {}


class Marked(TypedDict, total=False):
    topic: Required[str]
    notes: Annotated[Required[list[str]], operator.add]
    audience: str


class Total(TypedDict):  # LangGraph does not enforce totality: nothing here is required
    topic: str
    draft: str


class Model(BaseModel):
    topic: str
    audience: str = "engineers"


@dataclasses.dataclass
class Data:
    topic: str
    audience: str = "engineers"


def _template(state: type[Any]) -> Template:
    template = Template("t", state=state)
    template.add_stage("done", _done)
    return template


@pytest.mark.parametrize(
    ("state", "required"),
    [(Marked, ["topic", "notes"]), (Total, []), (Model, ["topic"]), (Data, ["topic"])],
)
def test_required_inputs_are_derived_from_the_state(state: type[Any], required: list[str]) -> None:
    assert list(_template(state).required_inputs) == required


def test_declared_ones_say_what_they_are() -> None:
    made = _template(Total).require_input("draft", "the text to review")
    assert made.required_inputs == {"draft": "the text to review"}


@pytest.mark.parametrize("template", ["blog_post", "sdlc", "wiki_build", "wiki_ingest"])
async def test_a_builtin_template_refuses_a_run_without_its_required_inputs(
    runner: Runner, template: str
) -> None:
    required = load_template(template, []).required_inputs
    assert required
    first = next(iter(required))
    with pytest.raises(InputError, match=f"missing required inputs? '{first}'.* -i {first}=..."):
        await runner.start(template, {})
    with pytest.raises(InputError, match=f"'{first}'"):
        await runner.create(template, {first: "  "})  # blank text is missing too
    assert await runner.ledger.list_runs() == []


async def test_every_missing_input_is_named_at_once(runner: Runner) -> None:
    with pytest.raises(InputError) as caught:
        await runner.start(_template(Marked), {"audience": "ops"})
    assert str(caught.value) == (
        "missing required inputs 'topic', 'notes' of template 't'; "
        "pass them with -i topic=... -i notes=..."
    )
    assert await runner.ledger.list_runs() == []


async def test_a_required_key_is_still_type_checked(runner: Runner) -> None:
    with pytest.raises(InputError, match="input 'topic' of template 't' must be a string"):
        await runner.start(_template(Marked), {"topic": 5, "notes": ["a"]})


async def test_a_fork_changes_some_keys_and_is_not_refused_for_the_others(
    runner: Runner,
) -> None:
    made = _template(Marked)
    done = await runner.start(made, {"topic": "x", "notes": ["a"]})
    forked = await runner.fork(done.run.run_id, changes={"audience": "ops"})
    assert forked.state["topic"] == "x" and forked.state["audience"] == "ops"


def test_a_yaml_state_key_can_be_required(tmp_path: Path) -> None:
    path = tmp_path / "flow.yaml"
    path.write_text(
        "name: flow\n"
        "state:\n"
        "  topic: {type: str, required: true}\n"
        "  notes: {type: list, reducer: append, required: true}\n"
        "  audience: str\n"
        "stages:\n"
        "  done: tests.unit.test_required_inputs:_done\n"
    )
    assert list(load_template(str(path), []).required_inputs) == ["topic", "notes"]
