"""Effects in doubt: settle one (it happened, or run it again); admin only."""

from __future__ import annotations

from fastapi import APIRouter

from stageline.server._models import EffectOut, EffectSettleBody
from stageline.server.api._common import ERRORS, Admin, Reader, RunId, RunnerDep, jsonable

__all__ = ["router"]

router = APIRouter(prefix="/v1/runs/{run_id}/effects", tags=["effects"], responses=ERRORS)


@router.get("", response_model=list[EffectOut], summary="The run's side-effect journal",
            responses={404: {"description": "No such run"}})
async def effects(run_id: RunId, runner: RunnerDep, _: Reader) -> list[EffectOut]:
    await runner.ledger.get_run(run_id)
    return [EffectOut.model_validate(jsonable(e.to_dict()))
            for e in await runner.ledger.effects(run_id)]


@router.post("/settle", response_model=list[EffectOut],
             summary="Settle an effect in doubt: done (with its result) or to be run again",
             responses={404: {"description": "No such run"},
                        400: {"description": "The run has no such effect"}})
async def settle(run_id: RunId, body: EffectSettleBody, runner: RunnerDep,
                 _: Admin) -> list[EffectOut]:
    await runner.ledger.get_run(run_id)
    await runner.resolve_effect(run_id, body.node, body.key, done=body.done, result=body.result)
    return [EffectOut.model_validate(jsonable(e.to_dict()))
            for e in await runner.ledger.effects(run_id)]
