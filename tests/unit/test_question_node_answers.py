"""The question node itself: what it asks, answers it refuses (asking again), turn after turn
of authored questions, and the history and answers it leaves. Run straight on LangGraph, so
the node sees responses the runner would have stopped first."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict

import pytest

from direct_run import DirectRun
from stageline.errors import UsageError
from stageline.stages import StageContext, question_id, question_stage
from stageline.templates import Template

AUTHORED: list[list[dict[str, Any]]] = []
"""The history each call of ``author`` was given."""


class Q(TypedDict, total=False):
    topic: str
    qa_history: list[dict[str, Any]]
    talk: list[dict[str, Any]]
    answers: dict[str, Any]
    done: bool


GOAL = {"id": "goal", "text": "What is the goal?", "kind": "text", "required": True}
TONE = {"id": "tone", "text": "Which tone?", "kind": "choice", "choices": ["dry", "warm"]}
TONE = {**TONE, "default": "dry", "required": False}


async def finish(state: Q, ctx: StageContext) -> dict[str, Any]:
    return {"done": True}


def asking(node: str = "ask", stage: Any = None, **question: Any) -> Template:
    template = Template("asking", state=Q)
    if stage is None:
        options = {"questions": [GOAL, TONE], "answers_key": "answers", **question}
        template.add_question(node, **options)
    else:
        template.add_stage(node, stage)
    template.add_stage("finish", finish)
    template.add_edge(node, "finish")
    return template


def answer(asked: Mapping[str, Any], answers: Any, **over: Any) -> dict[str, Any]:
    """What the runner resumes a question node with."""
    return {"question_id": asked["question_id"], "answers": answers, "actor": "ann", **over}


async def test_a_question_node_asks_with_the_set_and_its_id() -> None:
    run = DirectRun(asking(deadline="2h", on_deadline="fail"), run_id="run-7", attempt=2)
    asked = await run.start({})
    assert asked == {
        "kind": "question",
        "name": "ask",
        "node": "ask",
        "run_id": "run-7",
        "thread_id": "run-7",
        "question_id": question_id("run-7", 0, node="ask"),
        "turn": 0,
        "attempt": 2,
        "question_set": {"questions": [GOAL, TONE]},
        "deadline": 7200.0,
        "on_deadline": ["remind", "escalate", "fail"],
    }


async def test_answers_land_in_the_history_and_the_answers_key() -> None:
    run = DirectRun(asking())
    asked = await run.start({})
    assert asked is not None
    assert await run.respond(answer(asked, {"goal": "the API", "tone": "warm"})) is None
    state = await run.state()
    assert state["answers"] == {"goal": "the API", "tone": "warm"}
    assert state["qa_history"] == [
        {
            "turn": 0,
            "question_id": question_id("run-1", 0, node="ask"),
            "questions": [GOAL, TONE],
            "answers": {"goal": "the API", "tone": "warm"},
            "actor": "ann",
        }
    ]
    assert state["done"] is True


async def test_without_an_answers_key_only_the_history_is_written() -> None:
    run = DirectRun(asking(answers_key=None, history_key="talk"))
    asked = await run.start({})
    assert asked is not None
    await run.respond(answer(asked, {"goal": "all"}))
    state = await run.state()
    assert "answers" not in state and "qa_history" not in state
    assert [entry["answers"] for entry in state["talk"]] == [{"goal": "all"}]


@pytest.mark.parametrize(
    ("response", "reason"),
    [
        ("the API", "stale: an answer for question set 'the API', not {qid!r}"),
        ({"answers": {"goal": "x"}}, "stale: an answer for question set None, not {qid!r}"),
        (
            {"question_id": "other", "answers": {"goal": "x"}},
            "stale: an answer for question set 'other', not {qid!r}",
        ),
        ({"question_id": "{qid}", "answers": ["x"]}, "answers must map question ids"),
        ({"question_id": "{qid}", "answers": {"tone": "dry"}}, "question 'goal' needs"),
        ({"question_id": "{qid}", "answers": {"goal": "x", "tone": "loud"}}, "'loud' is not"),
    ],
)
async def test_answers_for_another_set_or_that_do_not_fit_are_refused(
    response: Any, reason: str
) -> None:
    run = DirectRun(asking())
    asked = await run.start({})
    assert asked is not None
    qid = asked["question_id"]
    if isinstance(response, dict):
        response = {k: v.format(qid=qid) if k == "question_id" else v for k, v in response.items()}
        response["token"] = "tok-3"
    again = await run.respond(response)
    assert again is not None
    token = "tok-3" if isinstance(response, dict) else None
    assert {k: v for k, v in again.items() if k != "refused"} == asked
    assert again["refused"]["token"] == token
    assert again["refused"]["reason"].startswith(reason.format(qid=qid))
    assert await run.respond(answer(asked, {"goal": "x"})) is None  # then a fit one passes
    assert (await run.state())["answers"] == {"goal": "x"}


async def author(state: Q, history: list[dict[str, Any]], ctx: StageContext) -> Any:
    AUTHORED.append(list(history))
    if not history:
        return [f"What about {state.get('topic')}, {ctx.node}?"]
    if history[-1]["answers"]["q1"] == "unsure":
        return "Say more."
    return []


def sync_author(state: Q, history: list[dict[str, Any]], ctx: StageContext) -> Any:
    AUTHORED.append(list(history))
    return None if history else ["Why?"]


async def test_an_author_asks_turn_after_turn_until_satisfied() -> None:
    AUTHORED.clear()
    run = DirectRun(asking(questions=None, ask=author, max_turns=3, answers_key="answers"))
    asked = await run.start({"topic": "caching"})
    assert asked is not None and asked["turn"] == 0
    assert asked["question_set"]["questions"][0]["text"] == "What about caching, ask?"
    asked = await run.respond(answer(asked, {"q1": "unsure"}))
    assert asked is not None and asked["turn"] == 1
    assert asked["question_id"] == question_id("run-1", 1, node="ask")
    assert asked["question_set"]["questions"][0]["text"] == "Say more."
    assert await run.respond(answer(asked, {"q1": "reads"})) is None
    state = await run.state()
    assert [e["turn"] for e in state["qa_history"]] == [0, 1]
    assert state["answers"] == {"q1": "reads"}  # later turns win
    # authored once per turn, however often the node was replayed, each time with what went before
    assert [len(h) for h in AUTHORED] == [0, 1, 2]
    assert AUTHORED[2][1]["answers"] == {"q1": "reads"}
    assert run.journal.effect_calls == ["questions:0", "questions:1", "questions:2"]


async def test_an_author_stops_at_max_turns() -> None:
    AUTHORED.clear()
    run = DirectRun(asking(questions=None, ask=author, max_turns=1))
    asked = await run.start({})
    assert asked is not None
    assert await run.respond(answer(asked, {"q1": "unsure"})) is None  # would ask more
    assert len((await run.state())["qa_history"]) == 1


async def test_a_sync_author_that_returns_nothing_asks_nothing_more() -> None:
    AUTHORED.clear()
    run = DirectRun(asking(questions=None, ask=sync_author, max_turns=5))
    asked = await run.start({})
    assert asked is not None and asked["question_set"]["questions"][0]["text"] == "Why?"
    assert await run.respond(answer(asked, {"q1": "because"})) is None
    assert len((await run.state())["qa_history"]) == 1


async def test_turns_go_on_from_the_history_the_state_already_has() -> None:
    earlier = {"turn": 0, "question_id": "x", "questions": [], "answers": {}, "actor": None}
    run = DirectRun(asking())
    asked = await run.start({"qa_history": [earlier]})
    assert asked is not None
    assert (asked["turn"], asked["question_id"]) == (1, question_id("run-1", 1, node="ask"))
    await run.respond(answer(asked, {"goal": "x"}))
    history = (await run.state())["qa_history"]
    assert history[0] == earlier and history[1]["turn"] == 1


async def test_a_fixed_set_is_asked_once_per_visit_whatever_max_turns() -> None:
    run = DirectRun(asking(max_turns=3))
    asked = await run.start({})
    assert asked is not None
    assert await run.respond(answer(asked, {"goal": "x"})) is None
    assert len((await run.state())["qa_history"]) == 1


async def test_question_stage_defaults() -> None:
    """Used on its own (not through ``add_question``): one set, history in ``qa_history``, a
    day's deadline, then remind, escalate and park."""
    stage = question_stage("clarify", questions="What for?")
    assert (stage.name, stage.capability, stage.cost_class) == (
        "question:clarify",
        "clarify",
        "none",
    )
    run = DirectRun(asking(node="ask_node", stage=stage))
    asked = await run.start({})
    assert asked is not None
    assert (asked["name"], asked["node"]) == ("clarify", "ask_node")
    assert (asked["deadline"], asked["on_deadline"]) == (86400.0, ["remind", "escalate", "park"])
    assert await run.respond(answer(asked, {"q1": "fun"})) is None
    state = await run.state()
    assert [e["answers"] for e in state["qa_history"]] == [{"q1": "fun"}]
    assert "answers" not in state


async def test_an_author_on_its_own_asks_one_set() -> None:
    """``question_stage`` with ``ask`` and no ``max_turns``: one turn, however unsure."""
    AUTHORED.clear()
    run = DirectRun(asking(stage=question_stage("clarify", ask=author)))
    asked = await run.start({"topic": "x"})
    assert asked is not None
    assert await run.respond(answer(asked, {"q1": "unsure"})) is None
    assert len((await run.state())["qa_history"]) == 1


async def test_ctx_ask_names_the_set_after_its_node_by_default() -> None:
    async def clarify(state: Q, ctx: StageContext) -> dict[str, Any]:
        got = ctx.ask(["Which?"], turn=4)
        return {"answers": got["answers"], "topic": str(got["turn"])}

    run = DirectRun(asking(node="clarifier", stage=clarify))
    asked = await run.start({})
    assert asked is not None
    assert (asked["name"], asked["turn"]) == ("clarifier", 4)
    await run.respond(answer(asked, {"q1": "that"}))
    state = await run.state()
    assert (state["answers"], state["topic"]) == ({"q1": "that"}, "4")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "a question node takes `questions` or `ask`, not both or neither"),
        (
            {"questions": ["a"], "ask": author},
            "a question node takes `questions` or `ask`, not both or neither",
        ),
        ({"questions": ["a"], "max_turns": 0}, "max_turns must be at least 1"),
        ({"questions": ["a"], "max_turns": "2"}, "max_turns must be at least 1"),
    ],
)
def test_question_stage_options_are_checked(options: dict[str, Any], message: str) -> None:
    with pytest.raises(UsageError) as info:
        question_stage("q", **options)
    assert str(info.value) == message
