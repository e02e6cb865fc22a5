"""Composing a goal into a YAML template file: plan, write the YAML, check it with the checks
every YAML template gets (file, line, reason), and only then put it where it was asked.

A refused goal (``CannotCompose``) or a draft that fails its checks leaves nothing behind: the
draft is checked in a temporary file beside the target, and moved over it once it passes.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from stageline.architect._intent import read_goal
from stageline.architect._plan import Plan, plan_goal
from stageline.config import Settings
from stageline.errors import ConflictError, TemplateError
from stageline.names import path_under
from stageline.templates import CatalogEntry, Template, load_template

__all__ = [
    "Composed",
    "check_yaml",
    "compose_goal",
    "compose_offline",
    "render_plan",
    "revise_or_go_on",
    "templates_folder",
]

MIN_SCORE = 0.7
"""The review score a revision loop goes on at (state key ``min_score`` overrides it)."""


def revise_or_go_on(state: Mapping[str, Any]) -> str:
    """A revision loop's route: ``done`` once the review approves (``verdict``) or scores at
    least ``min_score``, else ``revise``."""
    verdict = state.get("verdict")
    if isinstance(verdict, str):
        return "done" if verdict.lower() in ("approve", "approved", "pass") else "revise"
    score = state.get("score")
    threshold = state.get("min_score", MIN_SCORE)
    return "done" if isinstance(score, int | float) and score >= threshold else "revise"


@dataclass(frozen=True, kw_only=True)
class Composed:
    """A composed template: its YAML, where it was written, and its graph."""

    name: str
    yaml: str
    path: Path | None
    mermaid: str
    inputs: list[str]
    example: dict[str, str]
    template: Template | None = None
    """The checked template (not in ``to_dict``)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "path": str(self.path) if self.path else None,
            "inputs": self.inputs,
            "example": self.example,
            "yaml": self.yaml,
            "mermaid": self.mermaid,
        }


class _Flow(list[Any]):
    """A list written in flow style (``[a, b]``)."""


def _flow(dumper: yaml.SafeDumper, data: _Flow) -> Any:
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=True)


class _Dumper(yaml.SafeDumper):
    pass


_Dumper.add_representer(_Flow, _flow)


def _state(plan: Plan) -> dict[str, Any]:
    state: dict[str, Any] = {}
    for key, kind in plan.types.items():
        if key.startswith("stageline_"):
            continue
        spec: dict[str, Any] = {"type": kind}
        if key in plan.inputs:
            spec["required"] = True
        if key in plan.reducers:
            spec["reducer"] = plan.reducers[key]
        state[key] = spec if len(spec) > 1 else kind
    return state


def render_plan(plan: Plan) -> str:
    """The plan as a YAML template (the format of ``stageline.templates._yaml``)."""
    doc: dict[str, Any] = {
        "name": plan.name,
        "version": "1",
        "description": plan.description,
        "state": _state(plan),
        "stages": {
            node: (
                {"use": _Flow(plan.routed[node][1]), "capability": plan.routed[node][0]}
                if node in plan.routed
                else use
            )
            for node, use in plan.nodes.items()
        },
    }
    if plan.questions:
        doc["questions"] = plan.questions
    if plan.gates:
        doc["gates"] = plan.gates
    if plan.start:
        doc["start"] = plan.start
    if plan.edges:
        doc["edges"] = [_Flow(edge) for edge in plan.edges]
    if plan.fanout:
        doc["fanout"] = [
            {k: _Flow(v) if isinstance(v, list) else v for k, v in f.items()} for f in plan.fanout
        ]
    if plan.routes:
        doc["routes"] = plan.routes
    if plan.loops:
        doc["loops"] = plan.loops
    head = [
        "# Composed by `stageline compose` from the goal:",
        *(f"#   {line}" for line in plan.description.splitlines()),
    ]
    if plan.inputs:
        example = " ".join(f'-i {k}="{plan.example.get(k, "...")}"' for k in plan.inputs)
        head.append(f"# Run it: stageline run {plan.name}.yaml {example}")
    body = yaml.dump(doc, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=100)
    return "\n".join(head) + "\n" + body


def check_yaml(text: str, target: Path, *, write: bool = True) -> Template:
    """``text`` checked as a YAML template at ``target`` (errors name ``target`` and a line);
    the file is written (with ``write``) only when it passes."""
    folder = target.parent
    folder.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(prefix=f".{target.stem}.", suffix=".yaml", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        try:
            made = load_template(temp)
        except TemplateError as exc:
            raise TemplateError(exc.reason, source=str(target), line=exc.line) from None
        if write:
            os.replace(temp, target)
        return made
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)


def compose_offline(
    goal: str,
    catalog: Sequence[CatalogEntry],
    *,
    target: Path | None = None,
    folder: Path,
    name: str | None = None,
) -> Composed:
    """The goal composed without a model into a checked YAML template at ``target`` (default:
    ``folder/<name>.yaml``)."""
    plan = plan_goal(read_goal(goal), catalog, name=name or (target.stem if target else None))
    text = render_plan(plan)
    path = target or folder / f"{plan.name}.yaml"
    made = check_yaml(text, path)
    return Composed(
        name=plan.name,
        yaml=text,
        path=path,
        mermaid=made.mermaid(),
        inputs=list(plan.inputs),
        example=dict(plan.example),
        template=made,
    )


def templates_folder(settings: Settings) -> Path:
    """Where a composed template is saved: the project's first templates folder."""
    return next((d for d in settings.template_dirs if d.suffix != ".json"), settings.root)


def compose_goal(
    goal: str,
    catalog: Sequence[CatalogEntry],
    *,
    folder: Path,
    name: str | None = None,
    target: Path | None = None,
    save: bool = True,
    force: bool = False,
) -> Composed:
    """What every door does: compose ``goal`` offline into ``target`` (default: ``folder``/
    NAME.yaml, NAME from the goal), refusing to replace a file unless ``force``; or, without
    ``save``, a preview checked in a scratch folder and never kept."""
    name = name or (target.stem if target else None) or plan_goal(read_goal(goal), catalog).name
    if not save:
        with tempfile.TemporaryDirectory() as scratch:
            preview = Path(scratch) / f"{name}.yaml"
            made = compose_offline(goal, catalog, target=preview, folder=preview.parent, name=name)
            return replace(made, path=None)
    target = target or path_under(folder, f"{name}.yaml")
    if target.exists() and not force:
        raise ConflictError(f"{target} exists; replace it with force (--force), or name another")
    return compose_offline(goal, catalog, target=target, folder=folder, name=name)
