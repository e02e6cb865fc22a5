"""What the issue comments say for a run's endings and forge facts (the comment mirror's
renderer, which the Slack thread shares for CI and pull request lines)."""

from __future__ import annotations

import time

from stageline.ledger import Run, RunStatus
from stageline.ledger.records import Event
from stageline.server.forge import comment_text, fact_line, slack_link

RUN = Run(
    run_id="gh-acme-app-3",
    template="sdlc",
    template_version="1",
    status=RunStatus.RUNNING,
    attempt=1,
    inputs={},
    created_at=time.time(),
    updated_at=time.time(),
)


def said(kind: str, message: str = "", node: str | None = None, **data: object) -> str | None:
    event = Event(run_id=RUN.run_id, kind=kind, seq=1, node=node, message=message, data=data)
    return comment_text(event, RUN)


def test_endings_say_where_and_why() -> None:
    assert said("run.succeeded") == "✅ The run succeeded."
    assert said("run.failed", "boom", node="build") == "❌ The run failed at `build`: boom"
    assert said("run.parked", "out of build rounds", node="verify") == (
        "🅿️ The run is parked: a person decides what next at `verify`: out of build rounds"
    )
    assert said("run.cancelled") == "⏹️ The run was cancelled."
    assert said("run.queued") == "🤖 stageline took this issue: run `gh-acme-app-3` (sdlc)."


def test_only_forge_facts_of_the_stage_logs_are_told() -> None:
    assert said("stage.log", "editing app.py") is None
    assert said("node.started") is None
    assert said("stage.log", "CI run 4: timed_out", ci_run_id=4, conclusion="timed_out") == (
        "❌ CI run 4: timed_out"
    )
    event = Event(
        run_id="r", kind="stage.log", seq=2, message="", data={"pr_url": "https://x/pull/2"}
    )
    assert fact_line(event, slack_link) == "🔀 pull request: <https://x/pull/2|pull request>"
    assert said("gate.decided", "gate 'plan_approval': approve by bob") == (
        "➜ gate 'plan_approval': approve by bob"
    )


def test_gates_show_the_plan_or_their_summary() -> None:
    from stageline.ledger import Wait, WaitKind, WaitStatus

    def gate(name: str, **payload: object) -> str | None:
        wait = Wait(
            wait_id="w1",
            interrupt_id="i1",
            run_id=RUN.run_id,
            kind=WaitKind.GATE,
            name=name,
            node=name,
            status=WaitStatus.PENDING,
            attempt=1,
            payload=payload,
            requested_at=time.time(),
        )
        event = Event(run_id=RUN.run_id, kind="gate.waiting", seq=3, node=name)
        return comment_text(event, RUN, wait)

    approval = gate("plan_approval", show={"plan": "1. Do\n2. Test", "reviews": []})
    assert approval is not None
    assert approval.startswith("📋 **The plan**, waiting for approval at gate `plan_approval`:")
    assert "\n\n1. Do\n2. Test\n\n" in approval
    parked = gate("plan_parked", park=True, show={"plan": "p", "feedback": "too vague"})
    assert parked is not None and parked.startswith("🅿️ Out of rounds at gate `plan_parked`")
    assert '"feedback": "too vague"' in parked
    other = gate("apply", summary="branch stageline/r1")
    assert other is not None and "```\nbranch stageline/r1\n```" in other
