"""Question nodes, answers and the side-effect journal, over the in-memory runner."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any, TypedDict

import pytest

from stageline.config import Settings
from stageline.errors import AlreadyDecided, AnswerInvalid, TemplateError, UsageError
from stageline.ledger import Effect, EffectStatus, RunStatus, WaitKind, WaitStatus
from stageline.runner import Runner
from stageline.stages import StageContext, normalize_questions, question_id, validate_answers
from stageline.templates import Template
from stageline.testing import RecordingSink, memory_runner

CALLS: Counter[str] = Counter()


class Q(TypedDict, total=False):
    topic: str
    qa_history: list[dict[str, Any]]
    answers: dict[str, Any]
    sent: Any
    done: bool


QUESTIONS = [
    {"id": "scope", "text": "What is in scope?"},
    {"id": "size", "text": "How big?", "choices": ["small", "large"], "default": "small"},
    {
        "id": "limits",
        "text": "Limits?",
        "schema": {
            "type": "object",
            "required": ["rps"],
            "properties": {"rps": {"type": "integer"}},
        },
        "required": False,
    },
]


@pytest.fixture(autouse=True)
def _reset() -> None:
    CALLS.clear()


@pytest.fixture
def sink() -> RecordingSink:
    return RecordingSink()


@pytest.fixture
async def runner(memory_settings: Settings, sink: RecordingSink) -> AsyncIterator[Runner]:
    async with memory_runner(memory_settings, sinks=(sink,)) as opened:
        yield opened


async def finish(state: Q, ctx: StageContext) -> dict[str, Any]:
    return {"done": True}


def asking(name: str = "asking", **question: Any) -> Template:
    template = Template(name, state=Q)
    template.add_question("ask", **{"questions": QUESTIONS, "answers_key": "answers", **question})
    template.add_stage("finish", finish)
    template.add_edge("ask", "finish")
    return template


async def test_a_question_set_waits_and_its_id_agrees_everywhere(runner: Runner) -> None:
    first = await runner.start(asking(), {})
    run_id = first.run.run_id
    assert first.status is RunStatus.WAITING
    [wait] = first.waiting
    qid = question_id(run_id, 0, node="ask")
    assert wait.kind is WaitKind.QUESTION and wait.wait_id == qid
    assert wait.payload["question_id"] == qid and wait.payload["turn"] == 0
    assert [q["kind"] for q in wait.payload["question_set"]["questions"]] == [
        "text",
        "choice",
        "json",
    ]

    done = await runner.answer(run_id, {"scope": "the API", "limits": '{"rps": 5}'}, actor="ann")
    assert done.status is RunStatus.SUCCEEDED
    assert done.state["answers"] == {"scope": "the API", "limits": {"rps": 5}}
    [entry] = done.state["qa_history"]
    assert (entry["question_id"], entry["turn"], entry["actor"]) == (qid, 0, "ann")
    [answered] = (await runner.status(run_id)).waits
    assert answered.status is WaitStatus.APPLIED and answered.wait_id == qid
    assert answered.response is not None and answered.response["question_id"] == qid
    with pytest.raises(AlreadyDecided, match="already answered by ann"):
        await runner.answer(run_id, {"scope": "again"}, question_id=qid)


@pytest.mark.parametrize(
    ("answers", "message"),
    [
        (
            {"scope": "x", "size": "huge"},
            "'huge' is not a choice of question 'size'; choose one of: small, large",
        ),
        ({"size": "small"}, "question 'scope' needs an answer"),
        ({"scope": "x", "nope": 1}, "there is no question 'nope'"),
        ({"scope": 3}, "question 'scope' takes text"),
        ({"scope": "x", "limits": "{"}, "question 'limits' takes JSON"),
        ({"scope": "x", "limits": {"rps": "many"}}, "does not fit its schema at rps"),
    ],
)
async def test_an_answer_that_does_not_fit_changes_nothing(
    runner: Runner, sink: RecordingSink, answers: dict[str, Any], message: str
) -> None:
    run_id = (await runner.start(asking(), {})).run.run_id
    before = sink.kinds(run_id)
    with pytest.raises(AnswerInvalid, match=message.replace("(", r"\(").replace(")", r"\)")):
        await runner.answer(run_id, answers)
    [wait] = await runner.pending(run_id)
    assert wait.status is WaitStatus.PENDING and wait.response is None
    assert sink.kinds(run_id) == before


async def author(state: Q, history: list[dict[str, Any]], ctx: StageContext) -> Any:
    CALLS["author"] += 1
    if not history:
        return ["What is the goal?"]
    if history[-1]["answers"]["q1"] == "unsure":
        return ["Say more about the goal."]
    return None


async def test_a_clarifier_asks_turn_after_turn_within_its_bound(runner: Runner) -> None:
    template = Template("clarifier", state=Q)
    template.add_question("clarify", ask=author, max_turns=2)
    template.add_stage("finish", finish)
    template.add_edge("clarify", "finish")
    run_id = (await runner.start(template, {})).run.run_id
    second = await runner.answer(run_id, {"q1": "unsure"})
    [wait] = second.waiting
    assert (wait.wait_id, wait.payload["turn"]) == (question_id(run_id, 1, node="clarify"), 1)
    done = await runner.answer(run_id, {"q1": "unsure"})  # the bound: no third turn
    assert done.status is RunStatus.SUCCEEDED
    assert [e["turn"] for e in done.state["qa_history"]] == [0, 1]
    assert CALLS["author"] == 2  # replays take the authored questions from the journal


async def test_the_default_policy_answers_with_the_defaults(runner: Runner) -> None:
    template = asking(
        "defaults",
        questions=[{"id": "size", "text": "How big?", "choices": ["s", "l"], "default": "s"}],
        deadline=30,
        on_deadline=["default"],
    )
    run_id = (await runner.start(template, {})).run.run_id
    [wait] = await runner.pending(run_id)
    [step] = await runner.sweep(now=wait.requested_at + 31)
    assert (step["step"], step["outcome"]) == ("default", "succeeded")
    run = await runner.status(run_id)
    assert run.state["answers"] == {"size": "s"} and run.waits[0].actor == "stageline sweep"
    with pytest.raises(TemplateError, match="needs a default for question 'scope'"):
        asking("nodefault", on_deadline="default")


def test_question_sets_are_checked_when_declared() -> None:
    assert normalize_questions("Why?") == [
        {"id": "q1", "text": "Why?", "kind": "text", "required": True}
    ]
    for bad, message in [
        ([{"text": ""}], "non-empty `text`"),
        ([{"text": "a", "choices": []}], "non-empty list"),
        ([{"text": "a", "schema": {"type": "nope"}}], "invalid JSON schema"),
        (["a", {"id": "q1", "text": "b"}], "used twice"),
        ([{"text": "a", "choices": ["x"], "default": "y"}], "not a choice"),
        ([{"text": "a", "colour": 1}], "unknown key 'colour'"),
    ]:
        with pytest.raises(UsageError, match=message):
            normalize_questions(bad)
    qs = normalize_questions(QUESTIONS)
    assert validate_answers(qs, {"scope": "x"}, defaults=True) == {"scope": "x", "size": "small"}
    with pytest.raises(AnswerInvalid, match="'scope' needs an answer"):
        validate_answers(qs, {}, defaults=True)  # scope has no default
    assert question_id("r", 0, node="a") == question_id("r", 0, node="a")
    assert question_id("r", 0, node="a") not in (
        question_id("r", 1, node="a"),
        question_id("r", 0, node="b"),
    )


# -- the side-effect journal ----------------------------------------------------------------


async def notify_then_ask(state: Q, ctx: StageContext) -> dict[str, Any]:
    def send() -> dict[str, Any]:
        CALLS["send"] += 1
        return {"message_id": CALLS["send"]}

    sent = await ctx.effect("notify", send)
    asked = ctx.ask(["Go ahead?"], turn=0)
    return {"sent": sent, "answers": asked["answers"]}


async def test_an_effect_before_an_interrupt_happens_once(runner: Runner) -> None:
    template = Template("effects", state=Q)
    template.add_stage("notify", notify_then_ask)
    run_id = (await runner.start(template, {})).run.run_id
    assert CALLS["send"] == 1
    done = await runner.answer(run_id, {"q1": "yes"})
    assert done.status is RunStatus.SUCCEEDED
    assert CALLS["send"] == 1  # the replay took the kept result
    assert done.state == {"sent": {"message_id": 1}, "answers": {"q1": "yes"}}
    [effect] = await runner.ledger.effects(run_id)
    assert (effect.node, effect.key, effect.status, effect.result) == (
        "notify",
        "notify",
        EffectStatus.DONE,
        {"message_id": 1},
    )


async def sends_once(state: Q, ctx: StageContext) -> dict[str, Any]:
    async def send() -> str:
        CALLS["send"] += 1
        return "sent"

    return {"sent": await ctx.effect("email", send)}


async def test_an_effect_in_doubt_fails_the_run_naming_it_until_resolved(runner: Runner) -> None:
    template = Template("doubt", state=Q)
    template.add_stage("mail", sends_once)
    run_id = "doubt-1"
    await runner.ledger.create_run(_run(runner, run_id, template))
    await runner.ledger.begin_effect(
        Effect(run_id=run_id, node="mail", key="email", attempt=1, started_at=time.time() - 5)
    )
    failed = await runner.resume(run_id)
    assert failed.status is RunStatus.FAILED and failed.run.failure_phase == "effect_in_doubt"
    assert failed.run.error is not None and "effect 'email' of node 'mail'" in failed.run.error
    assert f"stageline effect {run_id} mail email --done" in failed.run.error
    assert CALLS["send"] == 0
    await runner.resolve_effect(run_id, "mail", "email", done=False)
    assert (await runner.retry(run_id)).state == {"sent": "sent"} and CALLS["send"] == 1


async def test_an_idempotent_effect_in_doubt_runs_again(runner: Runner) -> None:
    async def again(state: Q, ctx: StageContext) -> dict[str, Any]:
        return {"sent": await ctx.effect("ping", lambda: "pong", idempotent=True)}

    template = Template("idem", state=Q)
    template.add_stage("ping", again)
    await runner.ledger.create_run(_run(runner, "idem-1", template))
    await runner.ledger.begin_effect(Effect(run_id="idem-1", node="ping", key="ping", attempt=1))
    assert (await runner.resume("idem-1")).state == {"sent": "pong"}


async def test_an_effect_that_raises_is_not_kept(runner: Runner) -> None:
    async def flaky(state: Q, ctx: StageContext) -> dict[str, Any]:
        def send() -> str:
            CALLS["flaky"] += 1
            if CALLS["flaky"] == 1:
                raise ConnectionError("smtp down")
            return "sent"

        return {"sent": await ctx.effect("email", send)}

    template = Template("flaky_effect", state=Q)
    template.add_stage("mail", flaky)
    first = await runner.start(template, {})
    assert first.status is RunStatus.FAILED and "smtp down" in (first.run.error or "")
    assert await runner.ledger.effects(first.run.run_id) == []
    assert (await runner.retry(first.run.run_id)).state == {"sent": "sent"}


def _run(runner: Runner, run_id: str, template: Template) -> Any:
    """A queued run of ``template`` (which the runner can then find by name)."""
    from stageline.ledger import Run

    runner.load(template)
    return Run(
        run_id=run_id,
        template=template.name,
        template_version=template.full_version,
        status=RunStatus.QUEUED,
    )
