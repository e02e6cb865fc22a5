"""Question sets: free text, a choice from a list, or a small JSON schema; answers checked."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from stageline.errors import AnswerInvalid, UsageError
from stageline.plaindata import plain_problem, shown

__all__ = [
    "QUESTION_ID_NAMESPACE",
    "legacy_question_id",
    "normalize_questions",
    "question_id",
    "validate_answers",
]

QUESTION_ID_NAMESPACE = uuid.UUID("a7b9c1d2-3e4f-5061-7283-94a5b6c7d8e9")
"""The namespace of question ids, as seed 002's clarifier derives them."""

KINDS = ("text", "choice", "json")
_KEYS = ("id", "text", "kind", "choices", "schema", "default", "required")


def question_id(run_id: str, turn: int, *, node: str) -> str:
    """The stable id of question set number ``turn`` asked by ``node`` of a run: the same on
    every replay, and its own for each node (parallel nodes may share a history key)."""
    return uuid.uuid5(QUESTION_ID_NAMESPACE, f"{run_id}:{node}:{turn}").hex


def legacy_question_id(run_id: str, turn: int) -> str:
    """The id sets had before ids named their node: a set asked then still waits under it."""
    return uuid.uuid5(QUESTION_ID_NAMESPACE, f"{run_id}:{turn}").hex


def normalize_questions(spec: Any) -> list[dict[str, Any]]:
    """A question set as plain dicts ``{id, text, kind, required, [choices|schema], [default]}``.

    Each question is a string (free text; ids ``q1``, ``q2``...) or a mapping with ``text`` and
    optionally ``id``, ``choices`` (a list: a choice), ``schema`` (a JSON schema: a JSON
    value), ``default`` (used by the ``default`` deadline policy; makes the answer optional)
    and ``required``.
    """
    if isinstance(spec, str | Mapping) or not isinstance(spec, Sequence):
        spec = [spec]
    out: list[dict[str, Any]] = []
    for i, item in enumerate(spec, start=1):
        if isinstance(item, str):
            item = {"text": item}
        if not isinstance(item, Mapping):
            raise UsageError(f"question {i} must be a string or a mapping, got {item!r}")
        if unknown := [k for k in item if k not in _KEYS]:
            raise UsageError(f"question {i}: unknown key {unknown[0]!r}; keys: {', '.join(_KEYS)}")
        text = item.get("text")
        if not isinstance(text, str) or not text.strip():
            raise UsageError(f"question {i} needs a non-empty `text`")
        qid = str(item.get("id") or f"q{i}")
        kind = item.get("kind") or (
            "choice"
            if item.get("choices") is not None
            else "json"
            if item.get("schema") is not None
            else "text"
        )
        if kind not in KINDS:
            raise UsageError(f"question {qid!r}: kind must be one of {', '.join(KINDS)}")
        q: dict[str, Any] = {"id": qid, "text": text, "kind": kind}
        if kind == "choice":
            choices = item.get("choices")
            if (
                not isinstance(choices, Sequence)
                or isinstance(choices, str)
                or not choices
                or not all(isinstance(c, str) for c in choices)
            ):
                raise UsageError(f"question {qid!r}: choices must be a non-empty list of strings")
            q["choices"] = list(choices)
        if kind == "json":
            schema = item.get("schema")
            if not isinstance(schema, Mapping):
                raise UsageError(f"question {qid!r}: schema must be a JSON schema (a mapping)")
            _check_schema(qid, schema)
            q["schema"] = dict(schema)
        if "default" in item and item["default"] is not None:
            q["default"] = item["default"]
        q["required"] = bool(item.get("required", "default" not in q))
        out.append(q)
    ids = [q["id"] for q in out]
    if dupes := sorted({i for i in ids if ids.count(i) > 1}):
        raise UsageError(f"question id {dupes[0]!r} is used twice in one set")
    for q in out:
        if "default" in q:
            validate_answers([q], {q["id"]: q["default"]})
    return out


def _check_schema(qid: str, schema: Mapping[str, Any]) -> None:
    import jsonschema

    try:
        jsonschema.Draft202012Validator.check_schema(dict(schema))
    except jsonschema.SchemaError as exc:
        raise UsageError(f"question {qid!r}: invalid JSON schema: {exc.message}") from exc


def validate_answers(
    questions: Sequence[Mapping[str, Any]], answers: Any, *, defaults: bool = False
) -> dict[str, Any]:
    """The answers, checked against their questions; ``AnswerInvalid`` names what is wrong.

    A JSON question takes a JSON value, or text that parses as one. ``defaults`` fills every
    unanswered question that has a default.
    """
    if not isinstance(answers, Mapping):
        raise AnswerInvalid(
            f"answers must map question ids to values, got {type(answers).__name__}"
        )
    by_id = {q["id"]: q for q in questions}
    if unknown := [k for k in answers if k not in by_id]:
        raise AnswerInvalid(
            f"there is no question {unknown[0]!r} in this set; its questions: " + ", ".join(by_id)
        )
    out: dict[str, Any] = {}
    for qid, q in by_id.items():
        if qid not in answers:
            if defaults and "default" in q:
                out[qid] = q["default"]
            elif q.get("required", True):
                raise AnswerInvalid(f"question {qid!r} needs an answer: {q['text']}")
            continue
        out[qid] = _check(q, answers[qid])
        why = plain_problem(out[qid])
        if why:  # it is stored as JSON (Postgres jsonb holds no NaN, no NUL)
            raise AnswerInvalid(f"the answer to {qid!r} cannot be stored: {why}"[:300])
    return out


def _check(q: Mapping[str, Any], value: Any) -> Any:
    qid, kind = q["id"], q.get("kind", "text")
    if kind == "text":
        if not isinstance(value, str):
            raise AnswerInvalid(f"question {qid!r} takes text, got {type(value).__name__}")
        return value
    if kind == "choice":
        if value not in q["choices"]:
            raise AnswerInvalid(
                f"{shown(value)} is not a choice of question {qid!r}; choose one of: "
                + ", ".join(q["choices"])
            )
        return value
    schema = q.get("schema") or {}
    if isinstance(value, str) and schema.get("type") != "string":
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise AnswerInvalid(f"question {qid!r} takes JSON: {exc}") from exc
    import jsonschema

    error = jsonschema.exceptions.best_match(
        jsonschema.Draft202012Validator(dict(schema)).iter_errors(value)
    )
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path)
        raise AnswerInvalid(
            f"the answer to question {qid!r} does not fit its schema"
            + (f" at {where}" if where else "")
            + f": {error.message}"
        )
    return value
