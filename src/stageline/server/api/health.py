"""``GET /ok``: the one route that needs no token (load balancers, scripts, tests)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends
from pydantic import BaseModel

from stageline.runner import Runner
from stageline.server._state import get_runner

__all__ = ["router"]

router = APIRouter(tags=["health"])


class Health(BaseModel):
    ok: bool
    version: str
    schema_version: int


@router.get(
    "/ok", response_model=Health, summary="Health: the server is up and its database answers"
)
async def ok(runner: Annotated[Runner, Depends(get_runner)]) -> Health:
    from importlib.metadata import version

    return Health(
        ok=True, version=version("stageline"), schema_version=await runner.ledger.schema_version()
    )
