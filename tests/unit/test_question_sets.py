"""Question sets as declared (normalized, or refused naming the question), their stable ids,
and answers checked against them (refused naming what does not fit)."""

from __future__ import annotations

from typing import Any

import pytest

from stageline.errors import AnswerInvalid, UsageError
from stageline.stages import normalize_questions, question_id, validate_answers
from stageline.stages._questions import legacy_question_id

SCOPE = {"id": "scope", "text": "What is in scope?", "kind": "text", "required": True}
SIZE = {
    "id": "size",
    "text": "How big?",
    "kind": "choice",
    "choices": ["small", "large"],
    "default": "small",
    "required": False,
}
LIMITS = {
    "id": "limits",
    "text": "Limits?",
    "kind": "json",
    "schema": {"type": "object", "required": ["rps"], "properties": {"rps": {"type": "integer"}}},
    "required": False,
}


def test_a_question_sets_id_is_stable_across_releases() -> None:
    """Each run's sets are looked up by id (answer links, replays after an upgrade)."""
    assert question_id("run-1", 0, node="ask") == "146a4f6090af53b5b148428dce91bd74"
    assert question_id("run-1", 1, node="ask") == "deabfe0006665635892e0b0a3c423608"
    ids = {question_id(r, t, node=n) for r in ("run-1", "run-2") for t in (0, 1) for n in "ab"}
    assert len(ids) == 8
    # the ids of sets asked before ids named their node, which such a set keeps
    assert legacy_question_id("run-1", 0) == "7e32bfe64c855376aa4f91ef3dcc36fc"
    assert legacy_question_id("run-1", 1) == "f1ed9eca75b65dfbb739f295ad7e0d98"
    assert legacy_question_id("run-1", 0) not in ids


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("Why?", [{"id": "q1", "text": "Why?", "kind": "text", "required": True}]),
        (
            ("Why?", "How?"),
            [
                {"id": "q1", "text": "Why?", "kind": "text", "required": True},
                {"id": "q2", "text": "How?", "kind": "text", "required": True},
            ],
        ),
        (
            {"text": "Why?", "id": 7},
            [{"id": "7", "text": "Why?", "kind": "text", "required": True}],
        ),
        (
            ["a", {"text": "Which?", "id": "", "choices": ("x", "y")}],
            [
                {"id": "q1", "text": "a", "kind": "text", "required": True},
                {
                    "id": "q2",
                    "text": "Which?",
                    "kind": "choice",
                    "choices": ["x", "y"],
                    "required": True,
                },
            ],
        ),
        (
            {"text": "Plain?", "kind": "text", "choices": ["x"], "schema": {"type": "string"}},
            [{"id": "q1", "text": "Plain?", "kind": "text", "required": True}],
        ),
        (
            {"text": "Data?", "schema": {"type": "integer"}, "default": 3},
            [
                {
                    "id": "q1",
                    "text": "Data?",
                    "kind": "json",
                    "schema": {"type": "integer"},
                    "default": 3,
                    "required": False,
                }
            ],
        ),
        (
            {"text": "Must?", "default": "yes", "required": True},
            [{"id": "q1", "text": "Must?", "kind": "text", "default": "yes", "required": True}],
        ),
        (
            {"text": "Maybe?", "required": 0, "default": None},
            [{"id": "q1", "text": "Maybe?", "kind": "text", "required": False}],
        ),
        (
            {"text": "None given?", "default": None},
            [{"id": "q1", "text": "None given?", "kind": "text", "required": True}],
        ),
        ([SCOPE, SIZE, LIMITS], [SCOPE, SIZE, LIMITS]),  # normalized stays as it is
    ],
)
def test_question_sets_are_normalized(spec: Any, expected: list[dict[str, Any]]) -> None:
    assert normalize_questions(spec) == expected


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (5, "question 1 must be a string or a mapping, got 5"),
        (["a", 3], "question 2 must be a string or a mapping, got 3"),
        (
            [{"text": "a", "colour": 1}],
            "question 1: unknown key 'colour'; keys: id, text, kind, choices, schema, default, "
            "required",
        ),
        ([{"text": "  "}], "question 1 needs a non-empty `text`"),
        (["a", {"id": "x"}], "question 2 needs a non-empty `text`"),
        ([{"text": 5}], "question 1 needs a non-empty `text`"),
        ([{"text": "a", "kind": "date"}], "question 'q1': kind must be one of text, choice, json"),
        (
            [{"text": "a", "choices": []}],
            "question 'q1': choices must be a non-empty list of strings",
        ),
        ([{"text": "a", "choices": "ab"}], "question 'q1': choices must be a non-empty list"),
        ([{"text": "a", "choices": ["x", 2]}], "question 'q1': choices must be a non-empty list"),
        ([{"text": "a", "kind": "choice"}], "question 'q1': choices must be a non-empty list"),
        (
            [{"text": "a", "kind": "json"}],
            "question 'q1': schema must be a JSON schema (a mapping)",
        ),
        (
            [{"text": "a", "schema": ["x"]}],
            "question 'q1': schema must be a JSON schema (a mapping)",
        ),
        (
            [{"id": "lim", "text": "a", "schema": {"type": "nope"}}],
            "question 'lim': invalid JSON schema: 'nope' is not valid under any of the given "
            "schemas",
        ),
        (["a", {"id": "q1", "text": "b"}], "question id 'q1' is used twice in one set"),
        (
            [
                {"id": "b", "text": "b"},
                {"id": "a", "text": "a"},
                {"id": "a", "text": "c"},
                {"id": "b", "text": "d"},
            ],
            "question id 'a' is used twice in one set",
        ),
    ],
)
def test_mistakes_in_a_question_set_name_the_question(spec: Any, message: str) -> None:
    with pytest.raises(UsageError) as info:
        normalize_questions(spec)
    assert str(info.value).startswith(message)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"text": "a", "choices": ["x"], "default": "y"}, "'y' is not a choice of question 'q1'"),
        ({"text": "a", "default": 5}, "question 'q1' takes text, got int"),
        ({"text": "a", "schema": {"type": "integer"}, "default": "x"}, "question 'q1' takes JSON"),
    ],
)
def test_a_default_must_be_a_valid_answer(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(AnswerInvalid) as info:
        normalize_questions(spec)
    assert str(info.value).startswith(message)


def test_answers_are_checked_and_returned() -> None:
    qs = [SCOPE, SIZE, LIMITS]
    got = validate_answers(qs, {"scope": "all", "size": "large", "limits": '{"rps": 5}'})
    assert got == {"scope": "all", "size": "large", "limits": {"rps": 5}}
    assert validate_answers(qs, {"scope": "all"}) == {"scope": "all"}  # optional ones left out
    filled = validate_answers(qs, {"scope": "all"}, defaults=True)
    assert filled == {"scope": "all", "size": "small"}  # limits has no default
    assert validate_answers(qs, {"scope": "all", "limits": {"rps": 1}}) == {
        "scope": "all",
        "limits": {"rps": 1},
    }


def test_a_question_that_does_not_say_is_required_text() -> None:
    bare = [{"id": "why", "text": "Why?"}]
    with pytest.raises(AnswerInvalid, match=r"^question 'why' needs an answer: Why\?$"):
        validate_answers(bare, {})
    with pytest.raises(AnswerInvalid, match=r"^question 'why' takes text, got list$"):
        validate_answers(bare, {"why": ["x"]})


def test_json_answers_take_any_json_without_a_schema_and_text_for_a_string_schema() -> None:
    free = [{"id": "data", "text": "Data?", "kind": "json"}]
    assert validate_answers(free, {"data": "[1, 2]"}) == {"data": [1, 2]}
    assert validate_answers(free, {"data": {"a": None}}) == {"data": {"a": None}}
    text = [{"id": "name", "text": "Name?", "kind": "json", "schema": {"type": "string"}}]
    assert validate_answers(text, {"name": "[1, 2]"}) == {"name": "[1, 2]"}  # not parsed


@pytest.mark.parametrize(
    ("answers", "message"),
    [
        (["scope"], "answers must map question ids to values, got list"),
        (None, "answers must map question ids to values, got NoneType"),
        (
            {"scope": "x", "nope": 1},
            "there is no question 'nope' in this set; its questions: scope, size, limits",
        ),
        ({"size": "small"}, "question 'scope' needs an answer: What is in scope?"),
        ({"scope": 3}, "question 'scope' takes text, got int"),
        (
            {"scope": "x", "size": "huge"},
            "'huge' is not a choice of question 'size'; choose one of: small, large",
        ),
        ({"scope": "x", "limits": "{"}, "question 'limits' takes JSON: Expecting property name"),
        (
            {"scope": "x", "limits": {"rps": "many"}},
            "the answer to question 'limits' does not fit its schema at rps: 'many' is not of "
            "type 'integer'",
        ),
        (
            {"scope": "x", "limits": [1]},
            "the answer to question 'limits' does not fit its schema: [1] is not of type 'object'",
        ),
        ({"scope": "a\x00b"}, "the answer to 'scope' cannot be stored: the text has a NUL"),
        (
            {"scope": "x", "limits": {"rps": 1, "max": float("nan")}},
            "the answer to 'limits' cannot be stored: nan is not a JSON number",
        ),
    ],
)
def test_answers_that_do_not_fit_are_refused_naming_the_question(
    answers: Any, message: str
) -> None:
    with pytest.raises(AnswerInvalid) as info:
        validate_answers([SCOPE, SIZE, LIMITS], answers)
    assert str(info.value).startswith(message)


def test_a_schema_misfit_deep_in_an_answer_names_its_path() -> None:
    plan = {
        "id": "plan",
        "text": "Plan?",
        "kind": "json",
        "schema": {"properties": {"steps": {"type": "array", "items": {"type": "integer"}}}},
    }
    with pytest.raises(AnswerInvalid) as info:
        validate_answers([plan], {"plan": {"steps": [1, "two"]}})
    assert str(info.value) == (
        "the answer to question 'plan' does not fit its schema at steps/1: "
        "'two' is not of type 'integer'"
    )


def test_a_refusal_for_a_huge_answer_stays_short() -> None:
    deep = {"rps": 1, "x" * 1000: float("inf")}
    with pytest.raises(AnswerInvalid) as info:
        validate_answers([LIMITS], {"limits": deep})
    assert len(str(info.value)) == 300
