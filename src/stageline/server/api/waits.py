"""People's part: what waits for them (gates, question sets, interrupts), decide, answer,
respond.

A decision is the runner's ``approve``/``reject``/``request_changes`` with the token's name as
actor, bound to the ``attempt``, ``state_hash`` and visit (``wait_id`` or ``seen_at``) the
caller saw (stale: 409); the first decision stands (a second: 409 naming who came first). The
answer comes when the run stops again: it ended, or waits at its next gate or question.
"""

from __future__ import annotations

from fastapi import APIRouter

from stageline.server._models import AnswerBody, DecideBody, RespondBody, SummaryOut, WaitOut
from stageline.server.api._common import (
    ERRORS,
    AdvancerDep,
    Decider,
    Reader,
    Responses,
    RunId,
    RunnerDep,
    summary_out,
    wait_out,
)

__all__ = ["router"]

router = APIRouter(prefix="/v1", tags=["gates and questions"], responses=ERRORS)

_DECIDE: Responses = {
    404: {"description": "No such run"},
    409: {
        "description": "Not waiting there, stale (another attempt or state), or "
        "already decided (the detail names who decided first)"
    },
    422: {"description": "A malformed body, or answers that do not fit the questions"},
}


@router.get(
    "/pending",
    response_model=list[WaitOut],
    summary="Gates, question sets and interrupts waiting for a person, oldest first",
)
async def pending(runner: RunnerDep, _: Reader) -> list[WaitOut]:
    return [wait_out(w) for w in await runner.pending()]


@router.get(
    "/runs/{run_id}/pending",
    response_model=list[WaitOut],
    summary="What one run waits on",
    responses={404: {"description": "No such run"}},
)
async def run_pending(run_id: RunId, runner: RunnerDep, _: Reader) -> list[WaitOut]:
    await runner.ledger.get_run(run_id)
    return [wait_out(w) for w in await runner.pending(run_id)]


@router.post(
    "/runs/{run_id}/decide",
    response_model=SummaryOut,
    responses=_DECIDE,
    summary="Decide at the gate the run waits at: approve, reject, changes, takeover (park)",
)
async def decide(
    run_id: RunId, body: DecideBody, runner: RunnerDep, advancer: AdvancerDep, actor: Decider
) -> SummaryOut:
    common = dict(
        gate=body.gate,
        actor=actor,
        attempt=body.attempt,
        state_hash=body.state_hash,
        wait_id=body.wait_id,
        seen_at=body.seen_at,
        force=body.force,
    )
    if body.decision == "approve":
        work = runner.approve(run_id, note=body.note, **common)  # type: ignore[arg-type]
    elif body.decision == "reject":
        work = runner.reject(run_id, note=body.note, **common)  # type: ignore[arg-type]
    elif body.decision == "takeover":
        work = runner.take_over(run_id, note=body.note, **common)  # type: ignore[arg-type]
    else:
        work = runner.request_changes(run_id, note=body.note or "", **common)  # type: ignore[arg-type]
    return summary_out(await advancer.run(work))


@router.post(
    "/runs/{run_id}/answer",
    response_model=SummaryOut,
    responses=_DECIDE,
    summary="Answer the question set the run waits on",
)
async def answer(
    run_id: RunId, body: AnswerBody, runner: RunnerDep, advancer: AdvancerDep, actor: Decider
) -> SummaryOut:
    return summary_out(
        await advancer.run(
            runner.answer(
                run_id,
                body.answers,
                question_id=body.question_id,
                actor=actor,
                defaults=body.defaults,
                seen_at=body.seen_at,
                force=body.force,
            )
        )
    )


@router.post(
    "/runs/{run_id}/respond",
    response_model=SummaryOut,
    responses=_DECIDE,
    summary="Answer an interrupt the graph made itself (`interrupt(value)`) with a value",
)
async def respond(
    run_id: RunId, body: RespondBody, runner: RunnerDep, advancer: AdvancerDep, actor: Decider
) -> SummaryOut:
    return summary_out(
        await advancer.run(
            runner.respond(
                run_id,
                body.value,
                wait_id=body.wait_id,
                actor=actor,
                seen_at=body.seen_at,
                force=body.force,
            )
        )
    )
