"""Inputs must be plain JSON, and YAML cannot expand without bound (templates, input files)."""

from __future__ import annotations

import datetime
import math
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from plain_ids import plain_id
from stageline.cli._inputs import parse_assignment, parse_inputs, read_input_file
from stageline.config import Settings
from stageline.errors import AnswerInvalid, InputError, TemplateError, UsageError
from stageline.plaindata import (
    BoundedSafeLoader,
    check_plain_inputs,
    load_plain_yaml,
    plain_problem,
    shown,
)
from stageline.runner import Runner
from stageline.stages import validate_answers
from stageline.templates import load_template
from stageline.testing import memory_runner

BOMB = textwrap.dedent("""
    name: bomb
    a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
    b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
    c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
    d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
    e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
    f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
    g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
    h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
    stages: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
    """).lstrip()


@pytest.mark.parametrize(
    ("value", "says"),
    [
        (math.nan, "nan is not a JSON number"),
        (math.inf, "inf is not a JSON number"),
        ({"a": [1, -math.inf]}, "-inf is not a JSON number at ['a'][1]"),
        ("a\x00b", "has a NUL character"),
        ({"k\x00": 1}, "has a NUL character"),
        ("\ud800", "lone surrogate"),
        ({1: "a"}, "the key 1 is not text"),
        ({"a": {2: "b"}}, "the key 2 at ['a'] is not text"),
        ({1, 2}, "a set is not plain JSON"),
        (b"bytes", "a bytes is not plain JSON"),
        (datetime.date(2024, 1, 1), "a date is not plain JSON"),
        ([datetime.datetime(2024, 1, 1)], "a datetime at [0] is not plain JSON"),
    ],
    ids=plain_id,
)
def test_values_json_cannot_hold_are_named(value: Any, says: str) -> None:
    why = plain_problem(value)
    assert why is not None and says in why


@pytest.mark.parametrize(
    "value",
    [None, True, 0, -1.5, "text", [1, "a", None], {"a": {"b": [1.0, {"c": "d"}]}}, (1, 2)],
    ids=plain_id,
)
def test_plain_values_pass(value: Any) -> None:
    assert plain_problem(value) is None


def test_too_deep_nesting_is_refused_without_a_crash() -> None:
    value: Any = "leaf"
    for _ in range(1000):
        value = [value]
    assert "nests deeper" in (plain_problem(value) or "")


def test_check_plain_inputs_names_the_key() -> None:
    with pytest.raises(InputError, match=r"input 'topic' cannot be stored: nan"):
        check_plain_inputs({"ok": 1, "topic": math.nan})
    with pytest.raises(InputError, match=r"input name 'to\\x00pic' has a NUL"):
        check_plain_inputs({"to\x00pic": "a"})


def test_shown_cuts_long_values() -> None:
    assert shown("short") == "'short'"
    assert len(shown("x" * 10_000)) == 80 and shown("x" * 10_000).endswith("...")


@pytest.mark.parametrize(
    "raw", ["topic:=NaN", "topic:=Infinity", "topic:=1e999", "topic:=-1e999", 'topic:="a\\u0000b"']
)
def test_cli_assignments_json_cannot_hold_are_refused_by_the_check(raw: str) -> None:
    key, value = parse_assignment(raw)
    with pytest.raises(InputError, match="input 'topic' cannot be stored"):
        check_plain_inputs({key: value})


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("topic: 2024-01-01\n", "a date or time on line 1 at ['topic']"),
        ("topic: 2024-01-01T10:00:00Z\n", "a date or time on line 1"),
        ("a: 1\ntopic: !!binary aGVsbG8=\n", "!!binary data on line 2 at ['topic']"),
        ("topic: !!set {a, b}\n", "a !!set on line 1"),
        ("topic: !!omap [{a: 1}]\n", "an !!omap on line 1"),
        ("topic: .nan\n", "nan is not a JSON number at ['topic']"),
        ("topic: .inf\n", "inf is not a JSON number"),
        ("topic: {1: a}\n", "the key 1 at ['topic'] is not text"),
        ('topic: "a\\0b"\n', "the text at ['topic'] has a NUL character"),
    ],
    ids=lambda v: v if len(v) < 30 else None,
)
def test_input_files_hold_only_json_values(tmp_path: Path, text: str, says: str) -> None:
    path = tmp_path / "in.yaml"
    path.write_text(text)
    with pytest.raises(InputError) as caught:
        read_input_file(str(path))
    assert str(caught.value).startswith(f"--input-file {path}: ")
    assert says in str(caught.value)


def test_json_input_files_are_checked_too(tmp_path: Path) -> None:
    path = tmp_path / "in.json"
    path.write_text('{"topic": NaN}')
    with pytest.raises(InputError, match="key 'topic' cannot be stored: nan"):
        parse_inputs([], str(path))


def test_plain_yaml_keeps_strings_and_small_aliases() -> None:
    assert load_plain_yaml("a: &x [1, '2024-01-01']\nb: *x\n") == {
        "a": [1, "2024-01-01"],
        "b": [1, "2024-01-01"],
    }


def test_a_billion_laughs_fails_at_once_naming_the_line(tmp_path: Path) -> None:
    with pytest.raises(yaml.YAMLError) as caught:
        yaml.load(BOMB, Loader=BoundedSafeLoader)
    assert "expand to more than" in str(caught.value)
    assert caught.value.problem_mark is not None  # type: ignore[attr-defined]
    path = tmp_path / "bomb.yaml"
    path.write_text(BOMB)
    with pytest.raises(InputError, match=r"line \d+: .*expand to more than 100000 values"):
        read_input_file(str(path))


def test_a_recursive_alias_is_refused() -> None:
    with pytest.raises(yaml.YAMLError, match="holds it"):
        load_plain_yaml("a: &x [1, *x]\n")


def test_a_billion_laughs_template_is_a_template_error_at_its_line(tmp_path: Path) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(BOMB)
    with pytest.raises(TemplateError) as caught:
        load_template(str(path))
    message = str(caught.value)
    assert message.startswith(f"{path}:") and "expand to more than" in message
    assert len(message) < 400


def test_template_errors_never_echo_a_whole_value(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_text("name: big\nstages: [" + ", ".join(["x" * 50] * 2000) + "]\n")
    with pytest.raises(TemplateError) as caught:
        load_template(str(path))
    assert len(str(caught.value)) < 400


@pytest.fixture
async def runner(memory_settings: Settings) -> AsyncIterator[Runner]:
    async with memory_runner(memory_settings) as opened:
        yield opened


@pytest.mark.parametrize(
    "inputs",
    [
        {"topic": math.nan},
        {"topic": "a\x00b"},
        {"topic": {1, 2}},
        {"topic": datetime.date(2024, 1, 1)},
        {"topic": b"x"},
        {"to\x00pic": "a"},
    ],
    ids=plain_id,
)
async def test_the_runner_refuses_before_a_run_exists(
    runner: Runner, inputs: dict[str, Any]
) -> None:
    with pytest.raises(InputError, match=r"topic|to\\x00pic"):
        await runner.start("blog_post", inputs)
    with pytest.raises(InputError):
        await runner.create("blog_post", inputs)
    assert await runner.ledger.list_runs() == []


@pytest.mark.parametrize(
    ("question", "answer"),
    [
        ({"id": "q", "text": "t", "kind": "json"}, "NaN"),
        ({"id": "q", "text": "t", "kind": "json"}, '{"a": 1e999}'),
        ({"id": "q", "text": "t"}, "a\x00b"),
    ],
    ids=["json NaN", "json 1e999", "text with NUL"],  # plain ids: mutmut passes them back to pytest
)
def test_answers_json_cannot_hold_are_refused(question: dict[str, Any], answer: str) -> None:
    with pytest.raises(AnswerInvalid, match="the answer to 'q' cannot be stored"):
        validate_answers([question], {"q": answer})


@pytest.mark.parametrize("limit", [math.nan, math.inf])
async def test_a_budget_json_cannot_hold_is_refused(runner: Runner, limit: float) -> None:
    with pytest.raises(UsageError, match="budget cost must be a positive number"):
        await runner.start("blog_post", {"topic": "a"}, budget={"cost": limit})
    assert await runner.ledger.list_runs() == []
