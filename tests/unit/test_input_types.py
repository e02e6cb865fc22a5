"""Declared input types are checked (and exact conversions made) before a run exists."""

from __future__ import annotations

import operator
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from pydantic import BaseModel

from stageline.config import Settings
from stageline.errors import InputError
from stageline.runner import Runner
from stageline.stages import StageContext
from stageline.templates import Template
from stageline.templates._yaml import load_yaml_template
from stageline.testing import memory_runner


class Typed(TypedDict, total=False):
    sleep: float
    n: int
    flag: bool
    topic: str
    tags: Annotated[list[str], operator.add]
    anything: Any


class Model(BaseModel):
    sleep: float = 0.0
    n: int = 0


async def echo(state: Any, ctx: StageContext) -> dict[str, Any]:
    return {}


@pytest.fixture
async def runner(memory_settings: Settings) -> AsyncIterator[Runner]:
    async with memory_runner(memory_settings) as opened:
        yield opened


def typed() -> Template:
    return Template("typed", state=Typed).add_stage("echo", echo)


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [
        ("sleep", "abc", "a number (float)"),
        ("n", "3.5", "an integer (int)"),
        ("n", "three", "an integer (int)"),
        ("flag", "maybe", "true or false (bool)"),
        ("topic", 5, "a string (str)"),
        ("tags", "not-a-list", "a list"),
    ],
)
async def test_a_value_that_does_not_fit_its_declared_type_is_refused_before_the_run(
    runner: Runner, key: str, value: Any, words: str
) -> None:
    with pytest.raises(InputError) as info:
        await runner.start(typed(), {key: value})
    message = str(info.value)
    assert f"input {key!r} of template 'typed' must be {words}" in message
    assert repr(value) in message
    assert info.value.exit_code == 2
    with pytest.raises(InputError):
        await runner.create(typed(), {key: value})
    assert await runner.ledger.list_runs() == []  # nothing half-made


async def test_exact_conversions_of_text_are_made_and_recorded(runner: Runner) -> None:
    given = {
        "sleep": "2.5",
        "n": "3",
        "flag": "true",
        "topic": "x",
        "tags": ["a"],
        "anything": "left as is",
    }
    summary = await runner.start(typed(), given)
    assert summary.state == {
        "sleep": 2.5,
        "n": 3,
        "flag": True,
        "topic": "x",
        "tags": ["a"],
        "anything": "left as is",
    }
    assert type(summary.state["n"]) is int
    queued = await runner.create(typed(), {"n": "7"})
    assert queued.inputs["n"] == 7


async def test_a_pydantic_state_model_is_checked_field_by_field(runner: Runner) -> None:
    template = Template("modelled", state=Model).add_stage("echo", echo)
    with pytest.raises(InputError, match="input 'sleep' of template 'modelled' must be a num"):
        await runner.start(template, {"sleep": "abc"})
    summary = await runner.start(template, {"n": "4"})
    assert summary.state["n"] == 4


async def test_a_yaml_state_type_is_checked(runner: Runner, tmp_path: Path) -> None:
    path = tmp_path / "sleepy.yaml"
    path.write_text(
        "name: sleepy\nstate:\n  sleep: float\n  n: int\nstages:\n  a: tests_input_types_echo\n"
    )
    from stageline.stages import stage

    stage(name="tests_input_types_echo")(echo)
    template = load_yaml_template(path)
    with pytest.raises(InputError, match="input 'sleep' of template 'sleepy' must be a number"):
        await runner.start(template, {"sleep": "abc"})
    assert (await runner.start(template, {"sleep": "0", "n": "2"})).state == {"sleep": 0.0, "n": 2}


class Claims(TypedDict, total=False):
    topic: str
    stageline_gates: dict[str, Any]
    stageline_loops: dict[str, Any]
    stageline_deadlines: dict[str, Any]
    stageline_context: dict[str, Any]


@pytest.mark.parametrize(
    "key", ["stageline_gates", "stageline_loops", "stageline_deadlines", "stageline_context"]
)
async def test_a_key_stageline_reserves_is_refused_as_an_input_even_when_the_state_has_it(
    runner: Runner, key: str
) -> None:
    claims = Template("claims", state=Claims).add_stage("echo", echo)
    with pytest.raises(InputError) as info:
        await runner.start(claims, {"topic": "tides", key: {}})
    assert str(info.value) == f"{key!r} is reserved for stageline"
    assert await runner.ledger.list_runs() == []
