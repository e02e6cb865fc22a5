"""The operation runner: the one lifecycle every harness-driven stage goes through (seed 003).

``begin`` -> readiness -> harness run -> record transcript and events -> validate harness
success -> post steps -> ``finish`` with the harness summary. Each step runs inside an explicit
failure phase; ``fail`` writes the readable error event and the terminal failure each on its
own, so a broken ledger cannot swallow the failure and a failure cannot skip the event.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import subprocess
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from langgraph.errors import GraphBubbleUp

from stageline.errors import OperationFailed
from stageline.harnesses import (
    DEFAULT_ENV_ALLOWLIST,
    Harness,
    HarnessEvent,
    HarnessEventKind,
    HarnessRequest,
    HarnessResult,
    closing_stream,
)
from stageline.ledger import EventCategory
from stageline.operations._classify import classify, fallback_event
from stageline.operations._models import (
    FailurePhase,
    HarnessEventSink,
    LiveCallback,
    OperationContext,
    PostStep,
)
from stageline.operations._recorder import LedgerEventSink, Transcript, transcript_path
from stageline.operations._session import SessionFile
from stageline.stages import StageContext

__all__ = [
    "USAGE_KEYS",
    "EventSinkFailed",
    "HarnessFailed",
    "OperationRunner",
    "Stopped",
    "one_line_summary",
]

_log = logging.getLogger("stageline.operations")

SUMMARY_LIMIT = 300
USAGE_KEYS = ("input_tokens", "cached_input_tokens", "output_tokens", "cost")
"""The usage every operation records as node metrics, whatever its harness."""


class EventSinkFailed(Exception):
    """Recording a harness event failed: the caller's persistence, so ``internal_error``."""


class HarnessFailed(Exception):
    """The harness ran and reported failure (non-zero exit, failed result, timeout)."""


def one_line_summary(exc: BaseException) -> str:
    """A one-line description of ``exc``; never raises."""
    try:
        cause = exc.__cause__ if isinstance(exc, EventSinkFailed) and exc.__cause__ else exc
        text = str(cause).strip()
        line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
        if not line or isinstance(cause, EventSinkFailed | KeyError | AttributeError):
            line = f"{type(cause).__name__}: {line}" if line else type(cause).__name__
        return line if len(line) <= SUMMARY_LIMIT else line[: SUMMARY_LIMIT - 1] + "…"
    except Exception:  # a __str__ that raises must not hide the failure
        return type(exc).__name__


@dataclass
class _Collected:
    result: HarnessResult | None = None
    error: BaseException | None = None
    sink_error: BaseException | None = None
    events: int = 0
    usage: dict[str, float] = field(default_factory=dict)
    """What the agent spent so far, from its usage events (``USAGE_KEYS``)."""
    session_id: str | None = None
    turns: int = 0
    stopped: dict[str, Any] | None = None
    """The limit that stopped the agent mid-stream (a budget, a cap), if one did."""


@dataclass(frozen=True)
class Stopped:
    """The agent was stopped mid-stream past a limit; ``over`` names it."""

    over: Mapping[str, Any]
    usage: Mapping[str, float]
    session_id: str | None


Watch = Callable[[Mapping[str, float]], Awaitable["Mapping[str, Any] | None"]]
"""Given the operation's spend so far (metric names), the limit it passed, or None."""


def _add_usage(into: dict[str, float], data: Mapping[str, Any]) -> None:
    """Usage events add up; a ``total`` one (the agent's own final count) replaces the sum."""
    got = {
        k: float(v)
        for k, v in data.items()
        if isinstance(v, int | float) and not isinstance(v, bool)
    }
    if data.get("total"):
        into.update(got)
        return
    for key, value in got.items():
        into[key] = into.get(key, 0.0) + value


class OperationRunner:
    """Runs one operation inside a stage: ``ctx`` gives the run, node and ledger journal."""

    def __init__(
        self,
        ctx: StageContext,
        *,
        sinks: Sequence[HarnessEventSink] = (),
        live: LiveCallback | None = None,
    ) -> None:
        self.ctx = ctx
        self.ledger = LedgerEventSink(ctx)
        self._sinks: list[HarnessEventSink] = [self.ledger, *sinks]
        self._live = live

    # -- phases and failure -------------------------------------------------------------------

    @contextlib.contextmanager
    def failure_phase(self, phase: FailurePhase) -> Iterator[None]:
        """Any exception inside fails the operation in ``phase`` (event-sink errors excepted)."""
        try:
            yield
        except (OperationFailed, GraphBubbleUp):
            raise
        except EventSinkFailed as exc:
            self.fail(FailurePhase.INTERNAL_ERROR, exc)
        except Exception as exc:
            self.fail(phase, exc)

    def fail(self, phase: FailurePhase, exc: BaseException) -> NoReturn:
        """Record the error event (best effort), then fail the node and the run in ``phase``."""
        summary = one_line_summary(exc)
        try:
            self.ledger.note(
                "operation.failed",
                category=EventCategory.ERROR,
                level="error",
                message=summary,
                data={"failure_phase": str(phase), "error_type": type(exc).__name__},
            )
        except Exception:  # the terminal failure below must happen whatever the ledger does
            _log.warning("could not record the failure of %s", self.ctx.node, exc_info=True)
        raise OperationFailed(summary, str(phase)) from exc

    # -- lifecycle ----------------------------------------------------------------------------

    def begin(
        self, *, repo: str | Path, harness: str, model: str | None = None
    ) -> OperationContext:
        """Resolve the repository holding ``repo`` and record that the operation started."""
        found = _git_root(Path(repo))
        op = OperationContext(
            run_id=self.ctx.run_id,
            node=self.ctx.node,
            repo=found,
            run_dir=self.ctx.run_dir,
            harness=harness,
            model=model,
        )
        with self.failure_phase(FailurePhase.INTERNAL_ERROR):
            self.ledger.note(
                "operation.started",
                category=EventCategory.LIFECYCLE,
                data={"repo": str(found), "harness": harness, "model": model},
            )
        return op

    async def execute(
        self,
        op: OperationContext,
        harness: Harness,
        *,
        prompt: str,
        title: str | None = None,
        timeout: float | None = 600.0,
        env_allowlist: Sequence[str] = DEFAULT_ENV_ALLOWLIST,
        options: Mapping[str, Any] | None = None,
        watch: Watch | None = None,
        max_turns: int | None = None,
    ) -> HarnessResult | Stopped:
        """Readiness, the harness run with its events recorded, then its success checked.

        What the agent spent becomes the node's metrics whether it succeeded or not. ``watch``
        is asked after each usage event; past the limit it names, the agent is stopped (its
        process group killed) and a ``Stopped`` comes back. ``max_turns`` stops it likewise,
        as a failure, for agents that cannot be told their own limit.
        """
        request = HarnessRequest(
            kind=harness.kind,
            model=op.model,
            repo_root=op.repo,
            prompt=prompt,
            title=title,
            timeout=timeout,
            env_allowlist=tuple(env_allowlist),
            options=dict(options or {}),
        )
        with self.failure_phase(FailurePhase.HARNESS_READINESS):
            await harness.ensure_ready(request)
        with self.failure_phase(FailurePhase.INTERNAL_ERROR):
            transcript = Transcript(
                transcript_path(op.run_dir, op.node),
                {
                    "run_id": op.run_id,
                    "node": op.node,
                    "attempt": self.ctx.attempt,
                    "try": self.ctx.try_no,
                    "harness": harness.kind,
                    "model": op.model,
                    "repo": str(op.repo),
                    "title": title,
                    "resume": request.options.get("resume"),
                },
            )
        before = dict(self.ctx.metrics)
        sessions = SessionFile(op.run_dir, op.node)
        try:
            got = await self._collect(
                harness, request, transcript, before, watch, max_turns, sessions, op.harness
            )
            self._spent(got, before)
            self._record_outcome(got, transcript)
        finally:
            transcript.close()
        if got.stopped is not None and got.stopped.get("scope") != "operation":
            with self.failure_phase(FailurePhase.INTERNAL_ERROR):
                self.ledger.note(
                    "operation.stopped",
                    category=EventCategory.LIFECYCLE,
                    level="warning",
                    message=_limit_text(got.stopped),
                    data={
                        "limit": dict(got.stopped),
                        "usage": got.usage,
                        "session_id": got.session_id,
                    },
                )
            return Stopped(over=got.stopped, usage=got.usage, session_id=got.session_id)
        with self.failure_phase(FailurePhase.PROVIDER_EXECUTION):
            if got.stopped is not None:
                raise HarnessFailed(f"the agent was stopped: {_limit_text(got.stopped)}")
            if got.error is not None:
                raise got.error
            if got.result is None:
                raise HarnessFailed(f"harness {harness.kind} ended without a result")
            if not got.result.ok:
                raise HarnessFailed(got.result.summary or f"harness {got.result.status}")
        sessions.update(done=True)
        return got.result

    def _spent(self, got: _Collected, before: Mapping[str, float]) -> None:
        """The node's metrics: what it spent before this pass plus what the agent spent now."""
        usage = dict(got.usage)
        if got.result is not None and got.stopped is None:
            usage.update({k: float(v) for k, v in got.result.usage.items()})
        got.usage = usage
        for key in USAGE_KEYS:
            if key in usage:
                self.ctx.metrics[key] = float(before.get(key, 0.0)) + float(usage[key])

    async def post(
        self, step: PostStep, state: Any, op: OperationContext, result: HarnessResult
    ) -> dict[str, Any]:
        """Run one post step in its phase; its state updates."""
        with self.failure_phase(step.phase):
            out = step.run(state, op, result)
            if inspect.isawaitable(out):
                out = await out
        with self.failure_phase(FailurePhase.INTERNAL_ERROR):
            self.ledger.note(
                "operation.step",
                category=EventCategory.LOG,
                message=step.name,
                data={"step": step.name, "phase": str(step.phase)},
            )
        return dict(out or {})

    def finish(self, op: OperationContext, result: HarnessResult) -> str:
        """Record the operation's end and its cost; returns the summary the run keeps."""
        summary = result.summary or f"{op.node} finished"
        with self.failure_phase(FailurePhase.INTERNAL_ERROR):
            self.ledger.note(
                "operation.finished",
                category=EventCategory.LIFECYCLE,
                message=summary,
                data={"usage": dict(result.usage), "session_id": result.session_id},
            )
        return summary

    # -- recording ----------------------------------------------------------------------------

    async def _collect(
        self,
        harness: Harness,
        request: HarnessRequest,
        transcript: Transcript,
        before: Mapping[str, float],
        watch: Watch | None,
        max_turns: int | None,
        sessions: SessionFile,
        harness_name: str,
    ) -> _Collected:
        got = _Collected()
        try:
            async with closing_stream(harness.run(request)) as items:
                async for item in items:  # leaving the loop early closes it: the agent stops
                    if isinstance(item, HarnessResult):
                        got.result = item
                        continue
                    self._live_event(item)
                    if self._record(item, transcript):
                        got.events += 1
                    got.stopped = await self._follow(
                        item, got, before, watch, max_turns, sessions, harness_name
                    )
                    if got.stopped is not None:
                        break
        except GraphBubbleUp:
            raise
        except EventSinkFailed as exc:
            got.sink_error = exc  # closing the stream above stopped the agent
        except Exception as exc:  # an adapter that raises: provider_execution, not a crash
            got.error = exc
        return got

    async def _follow(
        self,
        item: HarnessEvent,
        got: _Collected,
        before: Mapping[str, float],
        watch: Watch | None,
        max_turns: int | None,
        sessions: SessionFile,
        harness_name: str,
    ) -> dict[str, Any] | None:
        """Keep the session and the spend as they stream; the limit passed, if any."""
        kind = item.kind
        if kind == HarnessEventKind.PROVIDER_SESSION and item.data.get("session_id"):
            got.session_id = str(item.data["session_id"])
            sessions.update(session_id=got.session_id, harness=harness_name, done=False)
        elif kind == HarnessEventKind.STATUS and item.text == "turn started":
            got.turns += 1
            if max_turns and got.turns > max_turns:
                return {
                    "scope": "operation",
                    "measure": "turns",
                    "limit": max_turns,
                    "used": got.turns,
                }
        elif kind == HarnessEventKind.USAGE and watch is not None:
            _add_usage(got.usage, item.data)
            spent = {k: float(before.get(k, 0.0)) + got.usage.get(k, 0.0) for k in USAGE_KEYS}
            over = await watch(spent)
            return dict(over) if over else None
        elif kind == HarnessEventKind.USAGE:
            _add_usage(got.usage, item.data)
        return None

    def _record(self, event: HarnessEvent, transcript: Transcript | None) -> bool:
        category = classify(event)
        if category is None:
            return False
        try:
            if transcript is not None:
                transcript.event(event)
            for sink in self._sinks:
                sink.record(event, category=category, node=self.ctx.node)
        except Exception as exc:
            raise EventSinkFailed(f"recording a {event.kind} event failed: {exc}") from exc
        return True

    def _record_outcome(self, got: _Collected, transcript: Transcript) -> None:
        """The fallback event, the transcript's last line and the ledger's reference to it."""
        if got.sink_error is not None:
            with contextlib.suppress(Exception):  # the ledger may be what is broken
                self._reference(transcript, got)
            self.fail(FailurePhase.INTERNAL_ERROR, got.sink_error)
        with self.failure_phase(FailurePhase.INTERNAL_ERROR):
            if got.result is not None and got.events == 0:
                self._record(fallback_event(got.result), None)
                got.events = 1
            if got.result is not None:
                transcript.result(got.result)
            self._reference(transcript, got)

    def _reference(self, transcript: Transcript, got: _Collected) -> None:
        self.ledger.note(
            "operation.transcript",
            category=EventCategory.OUTPUT,
            message=str(transcript.path),
            data={
                "path": str(transcript.path),
                "events": got.events,
                "status": str(got.result.status) if got.result else "error",
            },
        )

    def _live_event(self, event: HarnessEvent) -> None:
        if event.kind == "text_delta":
            _log.debug("[%s] %s", self.ctx.node, event.text)
        if self._live is None:
            return
        try:
            self._live(event)
        except Exception:  # live output is a courtesy; it never fails a run
            _log.debug("live callback failed on %s", event.kind, exc_info=True)


def _limit_text(over: Mapping[str, Any]) -> str:
    measure = str(over.get("measure", "?"))
    unit = {"cost": "in cost", "tokens": "tokens", "turns": "turns"}.get(measure, measure)
    whose = {"run": "the run", "operation": "the operation"}.get(
        str(over.get("scope")), str(over.get("scope", "")).replace("node:", "node ")
    )
    used, limit = float(over.get("used", 0)), float(over.get("limit", 0))
    return f"{whose} used {used:g} of its {limit:g} {unit}"


def _git_root(path: Path) -> Path:
    """The top of the git work tree holding ``path`` (which may not exist yet)."""
    probe = path.resolve()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if probe.is_file():
        probe = probe.parent
    try:
        done = subprocess.run(
            ["git", "-C", str(probe), "rev-parse", "--show-toplevel"],
            capture_output=True,
            text=True,
            check=False,
        )
    except FileNotFoundError as exc:
        raise RuntimeError("git is not installed; operations run in a git repository") from exc
    if done.returncode != 0:
        raise RuntimeError(f"{path} is not inside a git repository; run `git init` there first")
    return Path(done.stdout.strip()).resolve()
