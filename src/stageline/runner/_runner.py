"""The runner: the one path by which every interface starts, resumes, retries and cancels runs."""

from __future__ import annotations

import asyncio
import dataclasses
import contextlib
import logging
import time
import typing
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.errors import GraphDrained, InvalidUpdateError, NodeTimeoutError
from langgraph.runtime import RunControl

from stageline.checkpoints import checkpoint_serde, ensure_checkpointable
from stageline.config import Settings, load_settings
from stageline.errors import (
    InputError,
    InvalidTransition,
    LeaseHeld,
    StagelineError,
    TemplateChanged,
)
from stageline.events import EventBus, Sink
from stageline.ledger import (
    Backend,
    Event,
    EventCategory,
    NodeRecord,
    Run,
    RunStatus,
    open_backend,
    this_holder,
)
from stageline.llm import ChatModel, chat_model
from stageline.runner._journal import LedgerJournal
from stageline.stages import LOOPS_KEY, RunContext
from stageline.templates import Template, load_template

__all__ = ["RunSummary", "Runner"]

_log = logging.getLogger("stageline.runner")

RECURSION_LIMIT = 10_000
"""Declared loop bounds stop cycles; LangGraph's step limit only backs them up."""


@dataclass(frozen=True, kw_only=True)
class RunSummary:
    """What a run did: its ledger row, per-node records and its latest state."""

    run: Run
    records: list[NodeRecord]
    state: dict[str, Any]

    @property
    def status(self) -> RunStatus:
        return self.run.status

    def to_dict(self) -> dict[str, Any]:
        return {
            "run": self.run.to_dict(),
            "records": [r.to_dict() for r in self.records],
            "state": self.state,
        }


def new_run_id() -> str:
    return uuid.uuid4().hex[:12]


class Runner:
    """Starts and advances runs; holds the backend (ledger + checkpoints) for one process."""

    def __init__(
        self,
        settings: Settings,
        backend: Backend,
        *,
        bus: EventBus | None = None,
        model: ChatModel | None = None,
    ) -> None:
        self.settings = settings
        self.backend = backend
        self.ledger = backend.ledger
        self.bus = bus or EventBus()
        self.ledger.publisher = self.bus.publish
        self._model = model
        self._graphs: dict[tuple[int, str], Any] = {}
        self._templates: dict[str, Template] = {}
        """Templates given as objects, by name, so resume and retry find them in this process."""

    @classmethod
    @contextlib.asynccontextmanager
    async def open(
        cls,
        settings: Settings | None = None,
        *,
        sinks: tuple[Sink, ...] = (),
        model: ChatModel | None = None,
        extra_types: tuple[type[Any], ...] = (),
    ) -> AsyncIterator[Runner]:
        """A runner over the configured database, closed on exit."""
        settings = settings or load_settings()
        backend = await open_backend(settings.database_url, checkpoint_serde(extra_types))
        try:
            yield cls(settings, backend, bus=EventBus(sinks), model=model)
        finally:
            await backend.aclose()

    @property
    def model(self) -> ChatModel:
        if self._model is None:
            self._model = chat_model(self.settings.model)
        return self._model

    # -- templates --------------------------------------------------------------------------

    def load(self, ref: str | Template) -> Template:
        if isinstance(ref, Template):
            self._templates[ref.name] = ref
            return ref
        if ref in self._templates:
            return self._templates[ref]
        return load_template(ref, self.settings.template_dirs)

    def _graph(self, template: Template) -> Any:
        key = (id(template), template.digest)
        graph = self._graphs.get(key)
        if graph is None:
            graph = template.build().compile(checkpointer=self._saver(template))
            self._graphs[key] = graph
        return graph

    def _saver(self, template: Template) -> BaseCheckpointSaver[Any]:
        """The checkpoint saver, its allowlist widened by the types the template registers."""
        saver = self.backend.saver
        if not template.checkpoint_types:
            return saver
        return saver.with_allowlist([(t.__module__, t.__qualname__)
                                     for t in template.checkpoint_types])

    def _check_inputs(self, template: Template, inputs: Mapping[str, Any]) -> None:
        hints = _schema_keys(template.state)
        unknown = [k for k in inputs if hints and k not in hints]
        if unknown:
            raise InputError(
                f"unknown input {unknown[0]!r} for template {template.name!r}; "
                f"its state keys are: {', '.join(sorted(hints))}"
            )
        if LOOPS_KEY in inputs:
            raise InputError(f"{LOOPS_KEY!r} is reserved for stageline")
        serde = self._saver(template).serde
        for key, value in inputs.items():
            why = ensure_checkpointable(serde, value)  # type: ignore[arg-type]
            if why:
                raise InputError(
                    f"input {key!r} cannot be checkpointed: {why}; "
                    "pass live objects (clients, handles) as services instead"
                )

    # -- lifecycle --------------------------------------------------------------------------

    async def create(
        self, template: str | Template, inputs: Mapping[str, Any], *, run_id: str | None = None
    ) -> Run:
        """Record a queued run after checking its inputs; nothing runs yet."""
        made = self.load(template)
        self._check_inputs(made, inputs)
        ref = template if isinstance(template, str) else made.name
        run = Run(
            run_id=run_id or new_run_id(), template=_stable_ref(ref), template_version=made.full_version,
            status=RunStatus.QUEUED, inputs=dict(inputs),
        )
        return await self.ledger.create_run(
            run,
            events=[Event(run_id=run.run_id, kind="run.queued",
                          data={"template": made.name, "version": made.full_version})],
        )

    async def start(
        self,
        template: str | Template,
        inputs: Mapping[str, Any],
        *,
        services: Mapping[str, Any] | None = None,
        run_id: str | None = None,
    ) -> RunSummary:
        """Create a run and advance it until it ends or waits."""
        made = self.load(template)
        self._check_inputs(made, inputs)
        ref = template if isinstance(template, str) else made.name
        holder = this_holder()
        run_id = run_id or new_run_id()
        # Created running and leased in one transaction: a fresh run costs one commit to begin.
        run = await self.ledger.create_run(
            Run(
                run_id=run_id, template=_stable_ref(ref), template_version=made.full_version,
                status=RunStatus.RUNNING, inputs=dict(inputs), lease_holder=holder,
                lease_expires_at=time.time() + self.settings.lease_ttl,
            ),
            events=[Event(run_id=run_id, kind="run.started",
                          data={"attempt": 1, "template": made.name,
                                "version": made.full_version})],
        )
        return await self._advance(run, made, dict(inputs), services or {}, holder=holder,
                                   fresh=True)

    async def resume(
        self, run_id: str, *, services: Mapping[str, Any] | None = None, force: bool = False
    ) -> RunSummary:
        """Continue a run from its last checkpoint (after a crash, or a queued run)."""
        run = await self.ledger.get_run(run_id)
        if run.status is RunStatus.FAILED:
            raise InvalidTransition(f"run {run_id} failed; use `stageline retry {run_id}`")
        if run.status.terminal:
            raise InvalidTransition(f"run {run_id} is {run.status}; there is nothing to resume")
        made = self._checked_template(run, force)
        payload = None if run.status is not RunStatus.QUEUED or await self._has_checkpoint(made, run_id) \
            else dict(run.inputs)
        return await self._advance(
            run, made, payload, services or {}, holder=await self._claim(run, made, "run.resumed")
        )

    async def retry(
        self, run_id: str, *, services: Mapping[str, Any] | None = None, force: bool = False
    ) -> RunSummary:
        """Re-run a failed run's failed node from the checkpoint, as attempt + 1."""
        run = await self.ledger.get_run(run_id)
        if run.status is not RunStatus.FAILED:
            raise InvalidTransition(f"run {run_id} is {run.status}; only a failed run can be retried")
        made = self._checked_template(run, force)
        payload = None if await self._has_checkpoint(made, run_id) else dict(run.inputs)
        holder = await self._claim(run, made, "run.retried", attempt=run.attempt + 1)
        return await self._advance(
            dataclasses.replace(run, attempt=run.attempt + 1), made, payload, services or {},
            holder=holder,
        )

    async def cancel(self, run_id: str) -> Run:
        """Cancel a run: at once if no live process advances it, else between its next steps."""
        run = await self.ledger.get_run(run_id)
        if run.status.terminal:
            raise InvalidTransition(f"run {run_id} is already {run.status}")
        lease_live = run.lease_holder is not None and (run.lease_expires_at or 0) > time.time()
        if run.status is RunStatus.RUNNING and lease_live:
            return await self.ledger.request_cancel(run_id)
        return await self.ledger.transition(
            run_id, RunStatus.CANCELLED, finished_at=time.time(),
            expect=[RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.WAITING, RunStatus.FAILED],
            events=[Event(run_id=run_id, kind="run.cancelled", level="warning")],
        )

    async def status(self, run_id: str) -> RunSummary:
        """The run as recorded, with its latest checkpointed state."""
        run = await self.ledger.get_run(run_id)
        state: dict[str, Any] = {}
        with contextlib.suppress(StagelineError):
            state = await self._state(self.load(run.template), run_id)
        return RunSummary(run=run, records=await self.ledger.node_records(run_id), state=state)

    def _checked_template(self, run: Run, force: bool) -> Template:
        made = self.load(run.template)
        if made.full_version != run.template_version and not force:
            raise TemplateChanged(run.run_id, run.template_version, made.full_version)
        return made

    async def _has_checkpoint(self, made: Template, run_id: str) -> bool:
        try:
            snapshot = await self._graph(made).aget_state(_config(run_id))
        except InvalidUpdateError:  # pending writes that clash: there is a checkpoint
            return True
        return bool(snapshot.values) or bool(snapshot.next)

    async def _state(self, made: Template, run_id: str) -> dict[str, Any]:
        """The run's latest state; its last checkpoint's when pending writes clash (fan-in)."""
        try:
            snapshot = await self._graph(made).aget_state(_config(run_id))
        except InvalidUpdateError:
            saved = await self._saver(made).aget_tuple(typing.cast(Any, _config(run_id)))
            values = saved.checkpoint["channel_values"] if saved else {}
            keys = _schema_keys(made.state)
            return _public_state({k: v for k, v in values.items() if k in keys})
        return _public_state(snapshot.values)

    # -- advancing --------------------------------------------------------------------------

    async def _claim(self, run: Run, template: Template, kind: str, *, attempt: int | None = None) -> str:
        """Take the run's lease and mark it running; returns the lease holder's name."""
        holder = this_holder()  # one per advance: a second advance in this process is refused too
        await self.ledger.acquire_lease(run.run_id, holder, self.settings.lease_ttl)
        attempt = attempt or run.attempt
        fields: dict[str, Any] = {"attempt": attempt, "error": None, "failure_phase": None,
                                  "failed_node": None, "cancel_requested": False}
        if template.full_version != run.template_version:
            fields["template_version"] = template.full_version
        try:
            # `expect`: the run may have moved on between reading it and taking the lease.
            await self.ledger.transition(
                run.run_id, RunStatus.RUNNING, expect=[run.status], **fields,
                events=[Event(run_id=run.run_id, kind=kind,
                              data={"attempt": attempt, "template": template.name,
                                    "version": template.full_version})],
            )
        except BaseException:
            with contextlib.suppress(StagelineError):
                await self.ledger.release_lease(run.run_id, holder)
            raise
        return holder

    async def _advance(
        self,
        run: Run,
        template: Template,
        payload: Any,
        services: Mapping[str, Any],
        *,
        holder: str,
        fresh: bool = False,
    ) -> RunSummary:
        """Drive a run whose lease ``holder`` holds until it ends, waits or stops."""
        run_id = run.run_id
        ttl = self.settings.lease_ttl
        finished: Run | None = None
        try:
            control = RunControl()
            journal = LedgerJournal(self.ledger, run_id, run.attempt)
            context = RunContext(
                run_id=run_id, attempt=run.attempt, template=template.name, services=services,
                journal=journal, run_dir=self.settings.run_dir(run_id), model=self.model,
            )
            keeper = asyncio.create_task(self._keep_lease(run_id, holder, ttl, control))
            try:
                outcome, state = await self._drive(template, run_id, payload, context, control)
            finally:
                keeper.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await keeper
            finished = await self._finish(run_id, outcome, journal)
        finally:
            if finished is None:
                with contextlib.suppress(StagelineError):
                    await self.ledger.release_lease(run_id, holder)
        if state is None:
            state = await self._state(template, run_id)
        if fresh:  # every record of a fresh run is this attempt's, already written
            records = sorted(journal.records.values(), key=lambda r: (r.started_at, r.node))
        else:
            records = await self.ledger.node_records(run_id)
        return RunSummary(run=finished, records=records, state=state)

    async def _drive(
        self, template: Template, run_id: str, payload: Any, context: RunContext, control: RunControl
    ) -> tuple[BaseException | str | None, dict[str, Any] | None]:
        """Run the graph. Returns the outcome (None when it ended, 'waiting', a drain reason, or
        the error) and the latest state seen in the stream (None if it must be read back)."""
        graph = self._graph(template)
        state: dict[str, Any] | None = None
        waiting = False
        try:
            async for chunk in graph.astream(
                payload, _config(run_id), context=context, durability="sync",
                stream_mode="values", control=control,
            ):
                if "__interrupt__" in chunk:
                    waiting = True
                    chunk = {k: v for k, v in chunk.items() if k != "__interrupt__"}
                state = chunk
        except GraphDrained as drained:
            return drained.reason, None
        except InvalidUpdateError as exc:
            return exc, None
        except Exception as exc:
            return exc, None if state is None else _public_state(state)
        return ("waiting" if waiting else None), None if state is None else _public_state(state)

    async def _finish(
        self, run_id: str, outcome: BaseException | str | None, journal: LedgerJournal
    ) -> Run:
        now = time.time()
        if outcome is None:
            return await self.ledger.transition(
                run_id, RunStatus.SUCCEEDED, finished_at=now, release=True,
                events=[Event(run_id=run_id, kind="run.succeeded")],
            )
        if outcome == "waiting":
            return await self.ledger.transition(
                run_id, RunStatus.WAITING, release=True, events=[Event(run_id=run_id, kind="run.waiting")]
            )
        if outcome == "cancel":
            return await self.ledger.transition(
                run_id, RunStatus.CANCELLED, finished_at=now, release=True,
                events=[Event(run_id=run_id, kind="run.cancelled", level="warning")],
            )
        if isinstance(outcome, str):  # drained for shutdown: another process may resume it
            return await self.ledger.transition(
                run_id, RunStatus.QUEUED, release=True, events=[Event(run_id=run_id, kind="run.drained",
                                                        message=outcome)],
            )
        failed = journal.last_failure
        error, phase = _describe_failure(outcome)
        if failed is not None:
            error, phase = failed.error or error, failed.failure_phase or phase
        _log.debug("run %s failed", run_id, exc_info=outcome)
        return await self.ledger.transition(
            run_id, RunStatus.FAILED, finished_at=now, error=error, failure_phase=phase, release=True,
            failed_node=failed.node if failed else None,
            events=[Event(run_id=run_id, kind="run.failed", level="critical", message=error,
                          category=EventCategory.ERROR,
                          node=failed.node if failed else None,
                          data={"failure_phase": phase})],
        )

    async def _keep_lease(
        self, run_id: str, holder: str, ttl: float, control: RunControl
    ) -> None:
        """Renew the lease while the run advances; turn a cancel request into a drain."""
        interval = min(ttl / 3, 1.0)
        while True:
            await asyncio.sleep(interval)
            try:
                run = await self.ledger.renew_lease(run_id, holder, ttl)
            except StagelineError:
                _log.warning("could not renew the lease of run %s", run_id, exc_info=True)
                continue
            if run is None:
                _log.error("lost the lease of run %s; stopping after this step", run_id)
                control.request_drain("lease lost")
                return
            if run.cancel_requested:
                control.request_drain("cancel")
                return


def _config(run_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": run_id}, "recursion_limit": RECURSION_LIMIT}


def _public_state(values: Any) -> dict[str, Any]:
    data = dict(values) if isinstance(values, Mapping) else dict(getattr(values, "__dict__", {}))
    data.pop(LOOPS_KEY, None)
    return data


def _schema_keys(schema: type[Any]) -> set[str]:
    try:
        return set(typing.get_type_hints(schema))
    except Exception:
        return set(getattr(schema, "__annotations__", {}))


def _stable_ref(ref: str) -> str:
    """A template reference that still resolves from another working directory."""
    from pathlib import Path

    path = Path(ref)
    if path.suffix in (".py", ".yaml", ".yml") and path.exists():
        return str(path.resolve())
    return ref


def _describe_failure(exc: BaseException) -> tuple[str, str]:
    if isinstance(exc, InvalidUpdateError):
        return (
            f"parallel stages wrote one state key that has no reducer: {exc}".splitlines()[0],
            "fan_in",
        )
    if isinstance(exc, NodeTimeoutError):
        return f"NodeTimeoutError: {exc}", "timeout"
    if isinstance(exc, LeaseHeld):
        return str(exc), "internal_error"
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}", getattr(exc, "failure_phase", "internal_error")
