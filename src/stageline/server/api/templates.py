"""Templates: what can be started, and each one's graph (nodes and edges, and Mermaid)."""

from __future__ import annotations

import typing
from typing import Any

from fastapi import APIRouter
from fastapi.responses import PlainTextResponse
from pydantic import BaseModel

from stageline.server.api._common import ERRORS, Reader, RunnerDep, TemplateName, find_template
from stageline.templates import Template, list_templates

__all__ = ["router"]

router = APIRouter(prefix="/v1/templates", tags=["templates"], responses=ERRORS)

_404 = {404: {"description": "No such template"}}


class TemplateInfoOut(BaseModel):
    name: str
    origin: str
    """builtin, entry point or templates folder."""


class NodeOut(BaseModel):
    id: str
    kind: str
    """stage, gate, question, or start / end."""


class EdgeOut(BaseModel):
    source: str
    target: str
    conditional: bool
    label: str | None = None


class GraphOut(BaseModel):
    nodes: list[NodeOut]
    edges: list[EdgeOut]
    mermaid: str


class TemplateOut(BaseModel):
    name: str
    version: str
    full_version: str
    description: str
    state_keys: list[str]
    gates: list[str]
    questions: list[str]
    graph: GraphOut


def _graph(made: Template) -> GraphOut:
    drawn = made.build().compile().get_graph()

    def kind(node_id: str) -> str:
        if node_id in ("__start__", "__end__"):
            return node_id.strip("_")
        return ("gate" if node_id in made.gates
                else "question" if node_id in made.questions else "stage")

    return GraphOut(
        nodes=[NodeOut(id=n.id, kind=kind(n.id)) for n in drawn.nodes.values()],
        edges=[EdgeOut(source=e.source, target=e.target, conditional=e.conditional,
                       label=None if e.data is None else str(e.data)) for e in drawn.edges],
        mermaid=drawn.draw_mermaid(),
    )


def _state_keys(made: Template) -> list[str]:
    try:
        return list(typing.get_type_hints(made.state))
    except Exception:
        hints: dict[str, Any] = getattr(made.state, "__annotations__", {})
        return list(hints)


@router.get("", response_model=list[TemplateInfoOut], summary="Templates that can be started")
async def templates(runner: RunnerDep, _: Reader) -> list[TemplateInfoOut]:
    return [TemplateInfoOut(name=i.name, origin=i.origin)
            for i in list_templates(runner.settings.template_dirs)]


@router.get("/{name}", response_model=TemplateOut, responses=_404,
            summary="A template: version, state keys, gates, questions, graph")
async def template(name: TemplateName, runner: RunnerDep, _: Reader) -> TemplateOut:
    made = find_template(runner, name)
    return TemplateOut(name=made.name, version=made.version, full_version=made.full_version,
                       description=made.description, state_keys=_state_keys(made),
                       gates=sorted(made.gates), questions=sorted(made.questions),
                       graph=_graph(made))


@router.get("/{name}/graph", response_model=GraphOut, responses=_404,
            summary="A template's graph: nodes and edges, and Mermaid text")
async def graph(name: TemplateName, runner: RunnerDep, _: Reader) -> GraphOut:
    return _graph(find_template(runner, name))


@router.get("/{name}/mermaid", response_class=PlainTextResponse,
            responses={**_404, 200: {"content": {"text/plain": {"schema": {"type": "string"}}},
                                     "description": "Mermaid text"}},
            summary="A template's graph as Mermaid text")
async def mermaid(name: TemplateName, runner: RunnerDep, _: Reader) -> PlainTextResponse:
    return PlainTextResponse(find_template(runner, name).mermaid())
