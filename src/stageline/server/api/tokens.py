"""``GET /v1/whoami``: the caller's token name and scope (to check a token works)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel

from stageline.server._auth import require_scope

__all__ = ["router"]

router = APIRouter(prefix="/v1", tags=["tokens"])


class WhoAmI(BaseModel):
    name: str
    """The token's name: the actor recorded for what it does."""
    scope: str


@router.get("/whoami", response_model=WhoAmI, summary="The calling token's name and scope")
async def whoami(request: Request, actor: Annotated[str, Depends(require_scope("read"))]) -> WhoAmI:
    return WhoAmI(name=actor, scope=str(request.state.token.scope))
