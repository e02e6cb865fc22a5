"""Operations as stages: ``operation_stage`` makes a template node that runs one operation."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypedDict

from stageline.errors import OperationFailed
from stageline.harnesses import DEFAULT_ENV_ALLOWLIST, Harness, HarnessResult, make_harness
from stageline.operations._isolation import (
    WritesOutside,
    allowed_paths,
    isolate_operation,
    isolation_state,
    land,
    written_outside,
)
from stageline.operations._models import (
    SERVICE_FRESH,
    SERVICE_HARNESS,
    SERVICE_LIVE,
    SERVICE_SINKS,
    FailurePhase,
    HarnessEventSink,
    OperationContext,
    PostStep,
)
from stageline.operations._recorder import transcript_path
from stageline.operations._runner import OperationRunner, Stopped
from stageline.operations._session import SessionFile, continue_prompt
from stageline.operations._worktree import Isolation, revert
from stageline.stages import Stage, StageContext, budget_gate, live_overrun

__all__ = ["OperationInputs", "operation_stage"]

DEFAULT_HARNESS = "scripted"
_log = logging.getLogger("stageline.operations")


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
    max_turns: int
    """Turns the agent may take (Claude: ``--max-turns``; others: stopped past it)."""
    max_cost: float
    """US dollars the operation may spend (Claude: ``--max-budget-usd``); stopped past it."""
    max_tokens: float
    """Tokens (input + output) the operation may spend; stopped past it."""
    summary: str
    transcript_path: str
    apply: bool
    """Bring the result into the checkout at once, without the ``apply`` gate (``--apply``)."""
    checkout: str
    """The person's own working tree, which the agent never writes."""
    branch: str
    """``stageline/RUN``: the branch the result is committed on."""
    worktree: str
    base_commit: str
    """Where the run's branch started (the checkout's ``HEAD`` plus the carried paths)."""
    commit: str
    """The branch's last commit: the operation's result."""
    changes: str
    """What the run's operations changed on the branch (``git diff --stat``)."""
    applied: list[str]
    """The files the ``apply`` step changed in the checkout."""


Paths = Callable[[Any], "Sequence[str | Path]"] | Sequence[str | Path]
"""Where the agent may write: paths relative to the repository, or absolute in it."""
CommitMessage = Callable[[Any, OperationContext, HarnessResult], str]

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
    allowed: Paths | None = None,
    isolation: bool = True,
    commit_message: CommitMessage | None = None,
) -> Stage:
    """A stage that runs one operation: ``prepare`` (its ``source_preparation``), the harness,
    then ``post_steps``; it writes ``summary``, ``transcript_path`` and the post steps' updates.

    ``repo`` names a path inside the git repository the agent works in. ``prompt`` renders the
    agent's prompt; ``script`` derives the scripted harness's steps from the inputs.

    Isolated (the default), the agent works in the run's git worktree on branch
    ``stageline/RUN``, never in the checkout. ``allowed`` (a list, or a function of the state)
    names where it may write, relative to the repository; by default the path ``repo`` names
    (the whole repository when that is its root). Paths below the root are carried in from the
    checkout, uncommitted changes included. A write elsewhere fails ``validation`` and the
    worktree is reset, as it is when a post step fails; a success is committed on the branch
    (``commit_message``) and the stage writes ``branch``, ``commit``, ``changes`` and the keys
    the ``apply`` step needs (``add_apply``). ``isolation=False``: the agent writes in the
    checkout itself, and nothing is checked, reset or committed.
    """

    async def run(state: Any, ctx: StageContext) -> dict[str, Any]:
        services = ctx.services
        runner = OperationRunner(ctx, sinks=_sinks(services), live=services.get(SERVICE_LIVE))
        given: Harness | None = services.get(SERVICE_HARNESS)
        spec = str(_get(state, "harness") or DEFAULT_HARNESS)
        kind = given.kind if given is not None else spec
        with runner.failure_phase(FailurePhase.SOURCE_PREPARATION):
            target = repo(state)
            op = runner.begin(repo=target, harness=kind, model=_get(state, "model"))
            if isolation:
                given_paths = allowed(state) if callable(allowed) else allowed
                op.allowed = allowed_paths(op.repo, Path(target).resolve(), given_paths)
                op.isolation = isolate_operation(op.repo, op.run_dir, op.run_id, op.allowed)
                op.repo = op.isolation.worktree  # the agent never works in the checkout
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
        sessions = SessionFile(ctx.run_dir, ctx.node)
        stops = sessions.budget_stops(ctx.attempt)
        for stop in stops:  # a replay after budget stops: their gates again, in order
            for key, value in dict(stop.get("usage") or {}).items():
                ctx.metric(key, float(value))
            await budget_gate(ctx, state, ctx.task_id, stop["over"])
        while True:
            resume = _resume(sessions, services, kind)
            if resume:
                options["resume"] = resume
            result = await runner.execute(
                op,
                harness,
                prompt=continue_prompt(text) if resume else text,
                title=title(state) if callable(title) else title,
                timeout=float(_get(state, "timeout") or timeout),
                env_allowlist=(*DEFAULT_ENV_ALLOWLIST, *(_get(state, "env_allowlist") or ())),
                options={**options, **_caps(state)},
                watch=_watch(ctx, state),
                max_turns=None if kind == "command:claude" else _get(state, "max_turns"),
            )
            if not isinstance(result, Stopped):
                break
            # Past the budget mid-stream: the agent is stopped; wait at the budget gate. The
            # approval comes back through LangGraph's replay of this node (see above).
            stops.append({"over": dict(result.over), "usage": dict(result.usage)})
            sessions.update(budget_stops={"attempt": ctx.attempt, "stops": stops})
            await budget_gate(ctx, state, ctx.task_id, result.over)
        updates: dict[str, Any] = {}
        try:
            if op.isolation is not None:
                with runner.failure_phase(FailurePhase.VALIDATION):
                    outside = written_outside(op.repo, op.isolation.base, op.allowed)
                    if outside:
                        raise WritesOutside(outside, op.allowed)
            for step in post_steps:
                updates.update(await runner.post(step, state, op, result))
        except OperationFailed:
            if op.isolation is not None:  # nothing of a failed operation is kept
                _discard(op.isolation)
            raise
        if op.isolation is not None:
            with runner.failure_phase(FailurePhase.VALIDATION):
                message = (commit_message or _message)(state, op, result)
                base = str(_get(state, "base_commit") or op.isolation.base)
                commit, changes = land(op.isolation, base, message)
            updates.update(isolation_state(op.isolation, base, commit, changes))
        summary = runner.finish(op, result)
        return {
            **updates,
            "summary": summary,
            "transcript_path": str(transcript_path(op.run_dir, op.node)),
        }

    return Stage(fn=run, name=f"operation:{name}", capability=capability, cost_class=cost_class)


def _discard(iso: Isolation) -> None:
    """The worktree back where the operation started; a failure to do so is only logged."""
    try:
        revert(iso.worktree, iso.base)
    except Exception:  # the operation's own failure is what the person must see
        _log.warning("could not reset the worktree %s", iso.worktree, exc_info=True)


def _message(state: Any, op: OperationContext, result: HarnessResult) -> str:
    return f"{op.node}: {result.summary or 'the operation'}\n\nstageline run {op.run_id}"


def _resume(sessions: SessionFile, services: Mapping[str, Any], kind: str) -> str | None:
    """The agent session to continue: one an earlier pass left unfinished, unless fresh."""
    if services.get(SERVICE_FRESH) or not kind.startswith("command"):
        return None
    if sessions.read().get("done"):
        return None
    return sessions.session(kind)


def _caps(state: Any) -> dict[str, Any]:
    """The operation's own limits that the agent is told (those it supports)."""
    return {k: _get(state, k) for k in ("max_turns", "max_cost") if _get(state, k)}


def _watch(ctx: StageContext, state: Any) -> Any:
    """Checks the spend while the agent runs: the operation's caps, then the run's budgets."""
    caps = {"tokens": _get(state, "max_tokens"), "cost": _get(state, "max_cost")}

    async def watch(spent: Mapping[str, float]) -> Mapping[str, Any] | None:
        used = {
            "tokens": spent.get("input_tokens", 0.0) + spent.get("output_tokens", 0.0),
            "cost": spent.get("cost", 0.0),
        }
        for measure, cap in caps.items():
            if cap and used[measure] > float(cap):
                return {
                    "scope": "operation",
                    "measure": measure,
                    "limit": float(cap),
                    "used": used[measure],
                }
        return await live_overrun(ctx, spent)

    return watch
