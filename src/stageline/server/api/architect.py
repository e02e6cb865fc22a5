"""The stage catalog and the architect: ``GET /v1/stages``, ``POST /v1/compose``."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from stageline.architect import compose_goal, templates_folder
from stageline.server._models import TEMPLATE_NAME
from stageline.server.api._common import ERRORS, Admin, Reader, Responses, RunnerDep, jsonable
from stageline.templates import build_catalog, measure_stages, use_project, with_measured

__all__ = ["router"]

router = APIRouter(prefix="/v1", tags=["architect"], responses=ERRORS)

_409: Responses = {409: {"description": "A template file by that name exists (pass force)"}}


class ComposeIn(BaseModel):
    goal: str = Field(min_length=1, max_length=2000, description="What the pipeline is for.")
    name: str | None = Field(
        default=None,
        pattern=TEMPLATE_NAME,
        description="The template's name (default: the goal's).",
    )
    save: bool = Field(
        default=False, description="Write it to the project's templates folder (else: a preview)."
    )
    force: bool = Field(default=False, description="With save: replace a file that exists.")


class ComposeOut(BaseModel):
    name: str
    path: str | None
    """Where it was saved; None for a preview."""
    inputs: list[str]
    example: dict[str, str]
    yaml: str
    mermaid: str


@router.get("/stages", summary="The stage catalog: capability, tier, cost, reads and writes")
async def stages(
    runner: RunnerDep,
    _: Reader,
    capability: Annotated[str | None, Query(max_length=100)] = None,
) -> list[dict[str, Any]]:
    settings = runner.settings
    use_project(settings)
    entries = await asyncio.to_thread(build_catalog, settings.root, settings.template_dirs)
    entries = with_measured(entries, await measure_stages(runner.ledger))
    return [
        jsonable(e.to_dict()) for e in entries if capability is None or e.capability == capability
    ]


@router.post(
    "/compose",
    response_model=ComposeOut,
    responses=_409,
    summary="Compose a template for a goal, offline; a preview unless `save`",
)
async def compose(body: ComposeIn, runner: RunnerDep, _: Admin) -> ComposeOut:
    settings = runner.settings
    use_project(settings)
    folder = templates_folder(settings)
    catalog = await asyncio.to_thread(build_catalog, settings.root, settings.template_dirs)

    def make() -> ComposeOut:
        made = compose_goal(
            body.goal, catalog, folder=folder, name=body.name, save=body.save, force=body.force
        )
        return ComposeOut(**{**made.to_dict(), "path": str(made.path) if made.path else None})

    return await asyncio.to_thread(make)
