"""Gates and question nodes in a template: the builder's ``add_gate`` and ``add_question``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from langgraph.graph import END

from stageline.errors import TemplateError, UsageError
from stageline.stages import (
    DEFAULT_DEADLINE,
    GATES_KEY,
    deadline_steps,
    gate_stage,
    parse_duration,
    question_stage,
)
from stageline.stages._human import Author
from stageline.templates._shape import GateSpec, QuestionSpec

if TYPE_CHECKING:
    from stageline.templates._builder import Template
    from stageline.templates._shape import Where

__all__ = ["GateSpec", "QuestionSpec", "add_gate", "add_question"]

Duration = float | int | str | timedelta


def _options(
    kind: str, name: str, deadline: Duration, on_deadline: str | Sequence[str], where: Where
) -> tuple[float, tuple[str, ...]]:
    try:
        return (
            parse_duration(deadline, f"{kind} {name!r} deadline"),
            deadline_steps(on_deadline, kind),
        )
    except UsageError as exc:
        raise TemplateError(str(exc), source=where[0], line=where[1]) from exc


def add_gate(
    template: Template,
    name: str,
    *,
    changes_to: str | None = None,
    reject_to: str | None = None,
    max_changes: int = 3,
    feedback_key: str = "feedback",
    show: Sequence[str] = (),
    deadline: Duration = DEFAULT_DEADLINE,
    on_deadline: str | Sequence[str] = "park",
    where: Where,
) -> Template:
    """Add gate node ``name``: the run waits there until a person approves (the run goes on
    along the gate's edge, or ends), rejects (the run ends ``rejected``, or goes to
    ``reject_to``) or requests changes (back to ``changes_to`` with the note in
    ``feedback_key``, at most ``max_changes`` times). Past ``deadline`` the sweeper applies
    ``on_deadline``: remind, escalate, then ``reject``, ``park`` or ``fail``.
    """

    def fail(message: str) -> TemplateError:
        return TemplateError(f"gate {name!r}: {message}", source=where[0], line=where[1])

    seconds, steps = _options("gate", name, deadline, on_deadline, where)
    if not isinstance(max_changes, int) or isinstance(max_changes, bool) or max_changes < 0:
        raise fail(f"max_changes must be a whole number, got {max_changes!r}")
    hints = _state_keys(template.state)
    if changes_to is not None and hints and feedback_key not in hints:
        raise fail(
            f"changes put the note in state key {feedback_key!r}, which the state "
            f"does not declare (keys: {', '.join(sorted(hints))})"
        )
    loop = None
    if changes_to is not None:
        loop = next((lp for lp in template.loops if lp.head == changes_to), None)
        if loop is None:
            template.add_loop(
                f"{name}.changes", head=changes_to, max_iterations=max_changes + 1, where=where
            )
            loop = next(lp for lp in template.loops if lp.head == changes_to)
    made = gate_stage(
        name,
        changes_to=changes_to,
        reject_to=reject_to,
        feedback_key=feedback_key,
        changes_loop=(loop.name, loop.max_iterations) if loop else None,
        show=tuple(show),
        deadline=seconds,
        on_deadline=steps,
    )
    template.add_stage(name, made, where=where)
    targets = {"changes": changes_to or name, "reject": reject_to or END}
    if changes_to is None:
        del targets["changes"]
    template.add_route(name, _router(name), targets, where=where)
    template._gates[name] = GateSpec(
        name=name, changes_to=changes_to, reject_to=reject_to, deadline=seconds, on_deadline=steps
    )
    return template


def _router(name: str) -> Any:
    def route(state: Any) -> str:
        decisions = (
            state.get(GATES_KEY) if isinstance(state, Mapping) else getattr(state, GATES_KEY, None)
        ) or {}
        return str(decisions.get(name, "approve"))

    route.__name__ = route.__qualname__ = f"gate_route[{name}]"
    return route


def add_question(
    template: Template,
    name: str,
    *,
    questions: Any = None,
    ask: Author | None = None,
    max_turns: int = 1,
    history_key: str = "qa_history",
    answers_key: str | None = None,
    deadline: Duration = DEFAULT_DEADLINE,
    on_deadline: str | Sequence[str] = "park",
    where: Where,
) -> Template:
    """Add question node ``name``: it asks ``questions`` (or, turn after turn, what ``ask``
    authors until it returns nothing, at most ``max_turns`` sets), records each set and its
    answers in ``history_key`` and, with ``answers_key``, the answers there. Past ``deadline``
    the sweeper applies ``on_deadline``: remind, escalate, then ``default`` (each question's
    default answer), ``park`` or ``fail``.
    """

    def fail(message: str) -> TemplateError:
        return TemplateError(f"question node {name!r}: {message}", source=where[0], line=where[1])

    seconds, steps = _options("question", name, deadline, on_deadline, where)
    hints = _state_keys(template.state)
    for key in (history_key, answers_key):
        if key is not None and hints and key not in hints:
            raise fail(
                f"it writes state key {key!r}, which the state does not declare "
                f"(keys: {', '.join(sorted(hints))})"
            )
    try:
        made = question_stage(
            name,
            questions=questions,
            ask=ask,
            max_turns=max_turns,
            history_key=history_key,
            answers_key=answers_key,
            deadline=seconds,
            on_deadline=steps,
        )
    except UsageError as exc:
        raise fail(str(exc)) from exc
    if steps[-1] == "default" and questions is not None:
        from stageline.stages import normalize_questions

        if missing := [
            q["id"] for q in normalize_questions(questions) if q["required"] and "default" not in q
        ]:
            raise fail(f"on_deadline `default` needs a default for question {missing[0]!r}")
    template.add_stage(name, made, where=where)
    template._questions[name] = QuestionSpec(
        name=name, max_turns=max_turns, deadline=seconds, on_deadline=steps
    )
    return template


def _state_keys(schema: type[Any]) -> set[str]:
    from stageline.templates._graphs import _hints

    return set(_hints(schema))
