"""Operations as stages: ``operation_stage`` makes a template node that runs one operation."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypedDict

from stageline.harnesses import DEFAULT_ENV_ALLOWLIST, Harness, make_harness
from stageline.operations._models import (
    SERVICE_HARNESS,
    SERVICE_LIVE,
    SERVICE_SINKS,
    FailurePhase,
    HarnessEventSink,
    OperationContext,
    PostStep,
)
from stageline.operations._recorder import transcript_path
from stageline.operations._runner import OperationRunner
from stageline.stages import Stage, StageContext

__all__ = ["OperationInputs", "operation_stage"]

DEFAULT_HARNESS = "scripted"


class OperationInputs(TypedDict, total=False):
    """State keys every operation stage reads or writes; a template's state extends this."""

    harness: str
    """``scripted`` (default), ``chat``, ``command:claude`` or ``command:codex``."""
    model: str
    script: list[dict[str, Any]]
    """The scripted harness's steps; without it the template derives them from the inputs."""
    timeout: float
    """Seconds the harness may run before its process group is killed."""
    env_allowlist: list[str]
    """Environment variables passed to the agent besides the default ones (API keys)."""
    summary: str
    transcript_path: str


Prepare = Callable[
    [Any, OperationContext], "Mapping[str, Any] | Awaitable[Mapping[str, Any] | None] | None"
]


def _get(state: Any, key: str) -> Any:
    return state.get(key) if isinstance(state, Mapping) else getattr(state, key, None)


def _sinks(services: Mapping[str, Any]) -> list[HarnessEventSink]:
    given = services.get(SERVICE_SINKS)
    if given is None:
        return []
    return list(given) if isinstance(given, list | tuple) else [given]


def operation_stage(
    name: str,
    *,
    prompt: Callable[[Any, OperationContext], str],
    repo: Callable[[Any], str | Path],
    prepare: Prepare | None = None,
    script: Callable[[Any, OperationContext], list[dict[str, Any]]] | None = None,
    post_steps: Sequence[PostStep] = (),
    title: Callable[[Any], str] | str | None = None,
    timeout: float = 600.0,
    capability: str | None = "agent",
    cost_class: str | None = "high",
) -> Stage:
    """A stage that runs one operation: ``prepare`` (its ``source_preparation``), the harness,
    then ``post_steps``; it writes ``summary``, ``transcript_path`` and the post steps' updates.

    ``repo`` names a path inside the git repository the agent works in. ``prompt`` renders the
    agent's prompt; ``script`` derives the scripted harness's steps from the inputs.
    """

    async def run(state: Any, ctx: StageContext) -> dict[str, Any]:
        services = ctx.services
        runner = OperationRunner(ctx, sinks=_sinks(services), live=services.get(SERVICE_LIVE))
        given: Harness | None = services.get(SERVICE_HARNESS)
        spec = str(_get(state, "harness") or DEFAULT_HARNESS)
        kind = given.kind if given is not None else spec
        with runner.failure_phase(FailurePhase.SOURCE_PREPARATION):
            op = runner.begin(repo=repo(state), harness=kind, model=_get(state, "model"))
            if prepare is not None:
                prepared = prepare(state, op)
                if inspect.isawaitable(prepared):
                    prepared = await prepared
                op.prepared.update(prepared or {})
            text = prompt(state, op)
            options: dict[str, Any] = {}
            if kind == "scripted":
                steps = _get(state, "script")
                if steps is None and script is not None:
                    steps = script(state, op)
                if steps is not None:
                    options["script"] = steps
        with runner.failure_phase(FailurePhase.HARNESS_READINESS):
            harness = given if given is not None else make_harness(spec)
        result = await runner.execute(
            op, harness, prompt=text,
            title=title(state) if callable(title) else title,
            timeout=float(_get(state, "timeout") or timeout),
            env_allowlist=(*DEFAULT_ENV_ALLOWLIST, *(_get(state, "env_allowlist") or ())),
            options=options,
        )
        updates: dict[str, Any] = {}
        for step in post_steps:
            updates.update(await runner.post(step, state, op, result))
        summary = runner.finish(op, result)
        return {**updates, "summary": summary,
                "transcript_path": str(transcript_path(op.run_dir, op.node))}

    return Stage(fn=run, name=f"operation:{name}", capability=capability, cost_class=cost_class)
