"""The runner: the one path by which every interface starts, resumes, retries and cancels runs."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import logging
import time
import typing
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.errors import GraphDrained, InvalidUpdateError
from langgraph.runtime import RunControl

from stageline.checkpoints import checkpoint_serde, ensure_checkpointable
from stageline.config import Settings, load_settings
from stageline.errors import (
    CheckpointCorrupt,
    InputError,
    InvalidTransition,
    StagelineError,
    StorageError,
    TemplateChanged,
)
from stageline.events import Deliverer, EventBus, Sink
from stageline.events._links import DecisionLinks
from stageline.ledger import (
    Backend,
    Event,
    NodeRecord,
    Run,
    RunClaim,
    RunStatus,
    Wait,
    open_backend,
    this_holder,
)
from stageline.llm import ChatModel, chat_model
from stageline.names import check_run_id
from stageline.plaindata import check_plain_inputs
from stageline.runner._budget import run_budget, with_budget
from stageline.runner._edit import EditMixin
from stageline.runner._history import HistoryMixin
from stageline.runner._human import HumanMixin
from stageline.runner._input_types import typed_inputs
from stageline.runner._journal import LedgerJournal
from stageline.runner._outcome import finish_run
from stageline.runner._retention import RetentionMixin
from stageline.runner._services import ServicesMixin
from stageline.runner._state_defaults import remember_graph
from stageline.runner._support import (
    RECURSION_LIMIT,
    RunSummary,
    _config,
    _public_state,
    _schema_keys,
    _stable_ref,
    new_run_id,
)
from stageline.runner._trust import check_checkpoint
from stageline.runner._waits import (
    DEADLINES_INPUT,
    Settled,
    graph_inputs,
    settle_one_by_one,
    settle_waits,
    with_deadlines,
)
from stageline.runner._worktrees import describe_worktree
from stageline.stages import RESERVED_KEYS, Budget, RunContext
from stageline.templates import Template, load_template, runs_on, use_project

__all__ = ["RECURSION_LIMIT", "RunSummary", "Runner", "new_run_id"]

_log = logging.getLogger("stageline.runner")

GRAPH_CACHE_SIZE = 32
"""Compiled graphs a runner keeps (one per template and version in use)."""


class Runner(HumanMixin, RetentionMixin, HistoryMixin, EditMixin, ServicesMixin):
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
        self._graphs: collections.OrderedDict[tuple[str, str, str], tuple[Template, Any]] = (
            collections.OrderedDict()
        )
        """Compiled graphs by template identity and digest, least recently used first."""
        self._templates: dict[str, Template] = {}
        """Templates given as objects, by name, so resume and retry find them in this process."""
        self._controls: set[RunControl] = set()
        """The controls of the advances in flight, for ``drain``."""
        self._drain_reason: str | None = None
        self.deliverer: Deliverer | None = None
        """Delivers to the ``[[sinks]]`` outbox sinks (``Runner.open(deliver=True)``)."""
        use_project(settings)  # the root on the import path; stage names found in the project

    @classmethod
    @contextlib.asynccontextmanager
    async def open(
        cls,
        settings: Settings | None = None,
        *,
        sinks: tuple[Sink, ...] = (),
        model: ChatModel | None = None,
        extra_types: tuple[type[Any], ...] = (),
        deliver: bool = True,
    ) -> AsyncIterator[Runner]:
        """A runner over the configured database, closed on exit. With ``deliver`` (read
        commands pass False) it also delivers the ledger's events to the outbox sinks of
        ``[[sinks]]`` while it is open, and for at most ``sink_exit_timeout`` s at exit."""
        settings = settings or load_settings()
        # Inline [[sinks]] (the terminal) here; the others are delivered from the ledger, and
        # built only where ``deliver`` is asked for (a read command needs no sink's secret).
        bus = EventBus.configured(settings.sinks, sinks, which="inline")
        backend = await open_backend(settings.database_url, checkpoint_serde(extra_types))
        deliverer = None
        try:
            if deliver:
                links = (
                    DecisionLinks(settings.public_url, backend.ledger)
                    if settings.public_url
                    else None
                )  # gate links in webhook payloads
                deliverer = Deliverer.configured(settings.sinks, backend.ledger, links=links)
                if deliverer.sink_ids:
                    bus.add(deliverer)  # committed events wake it up
                    await deliverer.start()
            runner = cls(settings, backend, bus=bus, model=model)
            runner.deliverer = deliverer
            try:
                yield runner
            finally:
                await runner.close_services()
        finally:
            try:
                if deliverer is not None:  # what is due, within a short bound; the rest waits
                    await backend.ledger.flush()
                    await deliverer.stop(settings.sink_exit_timeout)
            finally:
                try:
                    await backend.aclose()
                finally:  # after the ledger's last flush published; bounded, whatever sinks do
                    await bus.aclose(timeout=5.0)

    @property
    def model(self) -> ChatModel:
        if self._model is None:
            self._model = chat_model(self.settings.model)
        return self._model

    def drain(self, reason: str = "shutdown") -> int:
        """Stop every advance in flight after its current step (each run ends ``queued``), and
        any advance begun from now on at its first; returns how many were in flight."""
        self._drain_reason = reason
        for control in self._controls:
            control.request_drain(reason)
        return len(self._controls)

    # -- templates --------------------------------------------------------------------------

    def load(self, ref: str | Template) -> Template:
        if isinstance(ref, Template):
            self._templates[ref.name] = ref
            return ref
        if ref in self._templates:
            return self._templates[ref]
        return load_template(ref, self.settings.template_dirs)

    def graph(self, template: str | Template) -> Any:
        """The template's compiled LangGraph graph over this runner's checkpoints, for reading
        a run's state and history with LangGraph's public API (advance runs with the runner)."""
        return self._graph(self.load(template))

    def _graph(self, template: Template) -> Any:
        """The template's compiled graph, cached by its identity and digest (bounded: a
        long-lived worker or server must not keep one per run)."""
        key = (template.name, template.source, template.full_version)
        hit = self._graphs.get(key)
        if hit is not None and hit[0] is template:
            self._graphs.move_to_end(key)
            return hit[1]
        graph = template.build().compile(checkpointer=self._saver(template))
        remember_graph(
            self.settings.home, template.full_version, graph, _schema_keys(template.state)
        )
        self._graphs[key] = (template, graph)  # another object of that name: the newest wins
        self._graphs.move_to_end(key)
        while len(self._graphs) > GRAPH_CACHE_SIZE:
            self._graphs.popitem(last=False)
        return graph

    def _saver(self, template: Template) -> BaseCheckpointSaver[Any]:
        """The checkpoint saver, its allowlist widened by the types the template registers."""
        saver = self.backend.saver
        if not template.checkpoint_types:
            return saver
        return saver.with_allowlist(
            [(t.__module__, t.__qualname__) for t in template.checkpoint_types]
        )

    def _check_inputs(
        self, template: Template, inputs: Mapping[str, Any], *, new_run: bool = False
    ) -> dict[str, Any]:
        """The inputs, checked against the template's state (names, types, checkpointability)
        and converted to the declared types (see ``_input_types``). A ``new_run`` must have the
        template's required inputs (a fork or a state edit changes some keys only)."""
        check_plain_inputs(inputs)  # what JSON cannot hold never reaches the ledger
        hints = _schema_keys(template.state)
        unknown = [k for k in inputs if hints and k not in hints]
        if unknown:
            raise InputError(
                f"unknown input {unknown[0]!r} for template {template.name!r}; "
                f"its state keys are: {', '.join(sorted(hints))}"
            )
        if reserved := [k for k in inputs if k in (*RESERVED_KEYS, DEADLINES_INPUT)]:
            raise InputError(f"{reserved[0]!r} is reserved for stageline")
        if new_run:
            template.check_required(inputs)
        template.check_inputs(inputs)  # the template's own checks (paths, git, harness)
        inputs = typed_inputs(template.state, inputs, template.name)
        serde = self._saver(template).serde
        for key, value in inputs.items():
            why = ensure_checkpointable(serde, value)  # type: ignore[arg-type]
            if why:
                raise InputError(
                    f"input {key!r} cannot be checkpointed: {why}; "
                    "pass live objects (clients, handles) as services instead"
                )
        return inputs

    # -- lifecycle --------------------------------------------------------------------------

    async def create(
        self,
        template: str | Template,
        inputs: Mapping[str, Any],
        *,
        run_id: str | None = None,
        deadlines: Mapping[str, Any] | None = None,
        budget: Budget | Mapping[str, Any] | None = None,
    ) -> Run:
        """Record a queued run after checking its inputs; nothing runs yet."""
        run_id = check_run_id(run_id) if run_id is not None else None
        made = self.load(template)
        inputs = self._check_inputs(made, inputs, new_run=True)
        ref = template if isinstance(template, str) else made.name
        run = Run(
            run_id=run_id or new_run_id(),
            template=_stable_ref(ref),
            template_version=made.full_version,
            status=RunStatus.QUEUED,
            inputs=with_budget(with_deadlines(made, inputs, deadlines), budget),
        )
        return await self.ledger.create_run(
            run,
            events=[
                Event(
                    run_id=run.run_id,
                    kind="run.queued",
                    data={"template": made.name, "version": made.full_version},
                )
            ],
        )

    async def start(
        self,
        template: str | Template,
        inputs: Mapping[str, Any],
        *,
        services: Mapping[str, Any] | None = None,
        run_id: str | None = None,
        deadlines: Mapping[str, Any] | None = None,
        budget: Budget | Mapping[str, Any] | None = None,
    ) -> RunSummary:
        """Create a run and advance it until it ends or waits.

        ``deadlines`` overrides the template's deadlines for this run: gate or question node
        name -> seconds (or ``"2h"``, ``"1d"``...). ``budget`` sets this run's token and cost
        limits (a ``Budget`` or ``{"tokens": 5000, "cost": 0.5, "nodes": {...}}``) over the
        template's.
        """
        run_id = check_run_id(run_id) if run_id is not None else None
        made = self.load(template)
        inputs = self._check_inputs(made, inputs, new_run=True)
        services = await self._services(services)
        ref = template if isinstance(template, str) else made.name
        holder = this_holder()
        run_id = run_id or new_run_id()
        # Created running and leased in one transaction: a fresh run costs one commit to begin.
        run = await self.ledger.create_run(
            Run(
                run_id=run_id,
                template=_stable_ref(ref),
                template_version=made.full_version,
                status=RunStatus.RUNNING,
                inputs=with_budget(with_deadlines(made, inputs, deadlines), budget),
                lease_holder=holder,
                lease_expires_at=time.time() + self.settings.lease_ttl,
            ),
            events=[
                Event(
                    run_id=run_id,
                    kind="run.started",
                    data={"attempt": 1, "template": made.name, "version": made.full_version},
                )
            ],
        )
        return await self._advance(
            run, made, dict(inputs), services, holder=holder, fresh=True, unsaved=True
        )

    async def resume(
        self,
        run_id: str,
        *,
        services: Mapping[str, Any] | None = None,
        force: bool = False,
        expect: Collection[RunStatus] | None = None,
    ) -> RunSummary:
        """Continue a run from its last checkpoint (after a crash, or a queued run). With
        ``expect``, only a run in one of those statuses (``InvalidTransition`` otherwise)."""
        if expect is not None and not any(s.waits_for_person for s in expect):
            # Nothing to check against the waits first: read and claim in one transaction.
            services = await self._services(services)
            found: list[tuple[Run, Template, RunClaim]] = []

            def claim_of(run: Run) -> RunClaim:
                made = self._resumable(run, force, expect)
                found.append((run, made, self._claim_of(run, made, "run.resumed")))
                return found[-1][2]

            claimed = await self.ledger.claim(run_id, claim_of)
            run, made, claim = found[-1]
        else:
            run = await self.ledger.get_run(run_id)
            made = self._resumable(run, force, expect)
            if run.status is RunStatus.WAITING:  # its checkpoint: the one people were asked on
                await check_checkpoint(
                    self._saver(made),
                    run_id,
                    await self.ledger.waits(run_id),
                    _step(run, await self.ledger.node_records(run_id)),
                )
            services = await self._services(services)
            claim = self._claim_of(run, made, "run.resumed")
            claimed = await self.ledger.claim(run_id, claim)
        # No checkpoint yet: queued, or its process died before the first step was saved.
        return await self._advance(
            run,
            made,
            None if claimed.saved else graph_inputs(run.inputs),
            services,
            holder=claim.holder,
            unsaved=not claimed.saved,
            earlier=claimed.records,
        )

    def _resumable(
        self, run: Run, force: bool, expect: Collection[RunStatus] | None = None
    ) -> Template:
        """The run's template, if ``resume`` may take the run (``InvalidTransition`` or
        ``TemplateChanged`` if not)."""
        if expect is not None and run.status not in expect:
            raise InvalidTransition(
                f"run {run.run_id} is {run.status}, not {' or '.join(map(str, expect))}"
            )
        if run.status is RunStatus.FAILED:
            raise InvalidTransition(f"run {run.run_id} failed; use `stageline retry {run.run_id}`")
        if run.status.terminal:
            raise InvalidTransition(f"run {run.run_id} is {run.status}; there is nothing to resume")
        return self._checked_template(run, force)

    async def retry(
        self, run_id: str, *, services: Mapping[str, Any] | None = None, force: bool = False
    ) -> RunSummary:
        """Re-run a failed run's failed node from the checkpoint, as attempt + 1."""
        run = await self.ledger.get_run(run_id)
        if run.status is not RunStatus.FAILED:
            resumable = run.status in (RunStatus.STOPPED, RunStatus.QUEUED)
            raise InvalidTransition(
                f"run {run_id} is {run.status}; only a failed run can be retried"
                + (f" (continue it with `stageline resume {run_id}`)" if resumable else "")
            )
        made = self._checked_template(run, force)
        services = await self._services(services)
        payload = None if await self._has_checkpoint(made, run_id) else graph_inputs(run.inputs)
        holder = await self._claim(run, made, "run.retried", attempt=run.attempt + 1)
        return await self._advance(
            dataclasses.replace(run, attempt=run.attempt + 1),
            made,
            payload,
            services,
            holder=holder,
        )

    async def cancel(self, run_id: str) -> Run:
        """Cancel a run: at once if no live process advances it, else between its next steps."""
        run = await self.ledger.get_run(run_id)
        if run.status.terminal:
            raise InvalidTransition(f"run {run_id} already {run.status}")
        lease_live = run.lease_holder is not None and (run.lease_expires_at or 0) > time.time()
        if run.status is RunStatus.RUNNING and lease_live:
            return await self.ledger.request_cancel(run_id)
        cancelled = await self.ledger.transition(
            run_id,
            RunStatus.CANCELLED,
            finished_at=time.time(),
            expect=[
                RunStatus.QUEUED,
                RunStatus.RUNNING,
                RunStatus.WAITING,
                RunStatus.FAILED,
                RunStatus.PARKED,
                RunStatus.STOPPED,
            ],
            events=[Event(run_id=run_id, kind="run.cancelled", level="warning")],
        )
        if run.status.waits_for_person:
            await self.ledger.close_waits(run_id, "the run was cancelled")
        return cancelled

    async def status(self, run_id: str) -> RunSummary:
        """The run as recorded, with its latest checkpointed state."""
        run = await self.ledger.get_run(run_id)
        state: dict[str, Any] = {}
        records = await self.ledger.node_records(run_id)
        unreadable: str | None = None
        waits = await self.ledger.waits(run_id)
        try:
            made = self.load(run.template)
            state = await self._state(made, run_id)
            if run.status is RunStatus.WAITING:  # what a decision would be applied to
                await check_checkpoint(self._saver(made), run_id, waits, _step(run, records))
        except CheckpointCorrupt as exc:  # the ledger is still worth showing
            unreadable = str(exc.of(run_id, _step(run, records)))
        except StagelineError:
            pass
        return RunSummary(
            run=run,
            records=records,
            state=state,
            waits=waits,
            checkpoint_error=unreadable,
            lineage=await self.ledger.lineage(run_id),
            forks=await self.ledger.forks(run_id),
        )

    def _checked_template(self, run: Run, force: bool) -> Template:
        made = self.load(run.template)
        if not runs_on(made, run.template, run.template_version) and not force:
            raise TemplateChanged(run.run_id, run.template_version, made.full_version)
        return made

    async def _has_checkpoint(self, made: Template, run_id: str) -> bool:
        try:
            snapshot = await self._graph(made).aget_state(_config(run_id))
        except InvalidUpdateError:  # pending writes that clash: there is a checkpoint
            return True
        except CheckpointCorrupt as exc:
            run = await self.ledger.get_run(run_id)
            raise exc.of(run_id, _step(run, await self.ledger.node_records(run_id))) from exc
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

    async def _claim(
        self, run: Run, template: Template, kind: str, *, attempt: int | None = None
    ) -> str:
        """Take the run's lease and mark it running (one transaction); returns the lease
        holder's name."""
        claim = self._claim_of(run, template, kind, attempt=attempt)
        # `expect`: the run may have moved on since it was read. Refused (the lease held, or the
        # status moved), nothing is taken or changed.
        await self.ledger.claim(run.run_id, claim)
        return claim.holder

    def _claim_of(
        self, run: Run, template: Template, kind: str, *, attempt: int | None = None
    ) -> RunClaim:
        """What taking the run's lease to advance it does (see ``_claim``)."""
        attempt = attempt or run.attempt
        # A cancel flag stays: one accepted while a process that died advanced the run wins.
        fields: dict[str, Any] = {
            "attempt": attempt,
            "error": None,
            "failure_phase": None,
            "failed_node": None,
        }
        if template.full_version != run.template_version:
            fields["template_version"] = template.full_version
        return RunClaim(
            # One holder per advance: a second advance in this process is refused too.
            holder=this_holder(),
            ttl=self.settings.lease_ttl,
            expect=(run.status,),
            fields=fields,
            events=(
                Event(
                    run_id=run.run_id,
                    kind=kind,
                    data={
                        "attempt": attempt,
                        "template": template.name,
                        "version": template.full_version,
                    },
                ),
            ),
        )

    async def _advance(
        self,
        run: Run,
        template: Template,
        payload: Any,
        services: Mapping[str, Any],
        *,
        holder: str,
        fresh: bool = False,
        unsaved: bool = False,
        earlier: Sequence[NodeRecord] | None = None,
    ) -> RunSummary:
        """Drive a run whose lease ``holder`` holds until it ends, waits or stops. A ``fresh``
        run was made for this advance (no waits, no records yet); an ``unsaved`` one has no
        checkpoint (nor, then, node records: the first checkpoint precedes every node);
        ``earlier``: its node records, when the claim read them."""
        run_id = run.run_id
        ttl = self.settings.lease_ttl
        finished: Run | None = None
        unreadable = cut_short = False
        try:
            control = RunControl()
            self._controls.add(control)
            if self._drain_reason is not None:
                control.request_drain(self._drain_reason)
            if fresh or unsaved:
                earlier = ()
            elif earlier is None:
                earlier = await self.ledger.node_records(run_id)
            journal = LedgerJournal(
                self.ledger,
                run_id,
                run.attempt,
                budget=run_budget(template, run.inputs),
                previous=earlier,
            )
            context = RunContext(
                run_id=run_id,
                attempt=run.attempt,
                template=template.name,
                services=services,
                journal=journal,
                run_dir=self.settings.run_dir(run_id),
                model=self.model,
            )
            keeper = asyncio.create_task(self._keep_lease(run_id, holder, ttl, control))
            # Each step's checkpoint commit also reads the cancel flag: a cancel stops the run
            # before its next step (LangGraph checks the drain between steps).
            self.ledger.watch_cancel(run_id, lambda: control.request_drain("cancel"))
            self.ledger.expect_no_checkpoint(run_id, unsaved)
            interrupts: list[Any] = []
            try:
                # Stopped short of the end (an error, a wait, a drain), no checkpoint follows to
                # carry the tasks' staged writes: the ending's transaction commits them.
                outcome, state = await self._drive(
                    template, run_id, payload, context, control, interrupts
                )
            except CheckpointCorrupt as exc:  # named at the step the ledger has the run at
                unreadable = True
                raise exc.of(run_id, _step(run, _records(earlier, journal))) from exc
            finally:
                self.ledger.watch_cancel(run_id, None)
                self.ledger.expect_no_checkpoint(run_id, False)
                self._controls.discard(control)
                keeper.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await keeper
            settled = await settle_waits(
                self.ledger,
                self._saver(template),
                template,
                run,
                outcome,
                interrupts,
                fresh=fresh,
            )
            finished = await finish_run(self.ledger, run_id, outcome, journal, self._where(settled))
            if finished is None:  # a round moved on meanwhile: settle each, then look again
                await self.ledger.flush()
                settled = await settle_one_by_one(self.ledger, template, run_id, outcome, settled)
                finished = await finish_run(
                    self.ledger, run_id, outcome, journal, self._where(settled)
                )
        except (asyncio.CancelledError, KeyboardInterrupt):
            cut_short = True
            raise
        finally:
            if finished is None:
                with contextlib.suppress(StagelineError):
                    await self.ledger.flush()  # what LangGraph counts saved, before anything
                    if unreadable:  # a storage fault, not the run's: it stays as it was found
                        await self.ledger.transition(
                            run_id, run.status, expect=[RunStatus.RUNNING], release=True
                        )
                    elif cut_short:
                        await self._cut_short(run_id, holder)
                    else:
                        await self.ledger.release_lease(run_id, holder)
        assert finished is not None  # the second try has no changes that can be refused
        if state is None:
            state = await self._state(template, run_id)
        waits: list[Wait] = []
        if finished.status.waits_for_person:
            waits = (  # a fresh run waited on nothing before: what it asked is what waits
                sorted(settled.changes.asked, key=lambda w: (w.requested_at, w.wait_id))
                if fresh
                else await self.ledger.pending_waits(run_id=run_id)
            )
        return RunSummary(
            run=finished, records=_records(earlier, journal), state=state, waits=waits
        )

    async def _cut_short(self, run_id: str, holder: str) -> None:
        """The advance was cancelled mid-step (Ctrl-C or SIGTERM in the foreground, a caller's
        cancel): the run is ``stopped`` until a person resumes it; while this runner drains (a
        shutdown that could not wait for the step), ``queued`` for the next process."""
        draining = self._drain_reason
        status = RunStatus.QUEUED if draining else RunStatus.STOPPED
        said = "stopped mid-step: its process was stopped; `resume` continues it"
        try:
            await self.ledger.transition(
                run_id,
                status,
                expect=[RunStatus.RUNNING],
                release=True,
                lease=(holder, self.settings.lease_ttl),  # only a run this advance still holds
                events=[
                    Event(run_id=run_id, kind="run.drained", message=draining)
                    if draining
                    else Event(run_id=run_id, kind="run.stopped", level="warning", message=said)
                ],
            )
        except StagelineError:  # it moved on meanwhile: only let go of the lease
            await self.ledger.release_lease(run_id, holder)

    def _where(self, settled: Settled) -> Settled:
        """``settled``, saying where the taken-over work is (when a takeover ends the run)."""
        if settled.taken_over is None:
            return settled
        run_dir = self.settings.run_dir(settled.taken_over.run_id)
        return dataclasses.replace(settled, where=describe_worktree(run_dir))

    async def _drive(
        self,
        template: Template,
        run_id: str,
        payload: Any,
        context: RunContext,
        control: RunControl,
        interrupts: list[Any],
    ) -> tuple[BaseException | str | None, dict[str, Any] | None]:
        """Run the graph. Returns the outcome (None when it ended, 'waiting', a drain reason, or
        the error) and the latest state seen in the stream (None if it must be read back); the
        interrupts it stopped at go into ``interrupts``."""
        graph = self._graph(template)
        state: dict[str, Any] | None = None
        waiting = False
        try:
            async for chunk in graph.astream(
                payload,
                _config(run_id),
                context=context,
                durability="sync",
                stream_mode="values",
                control=control,
            ):
                if "__interrupt__" in chunk:
                    waiting = True
                    interrupts.extend(chunk["__interrupt__"])
                    chunk = {k: v for k, v in chunk.items() if k != "__interrupt__"}
                state = chunk
        except GraphDrained as drained:
            return drained.reason, None
        except InvalidUpdateError as exc:
            return exc, None
        except CheckpointCorrupt as exc:  # a storage fault, not the run's: it stays as it was
            raise exc.of(run_id, None) from exc
        except StorageError:  # the database, not the run: it stays resumable
            raise
        except Exception as exc:
            return exc, None if state is None else _public_state(state)
        return ("waiting" if waiting else None), None if state is None else _public_state(state)

    async def _keep_lease(self, run_id: str, holder: str, ttl: float, control: RunControl) -> None:
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


def _records(earlier: Sequence[NodeRecord], journal: LedgerJournal) -> list[NodeRecord]:
    """The run's node records once the advance has ended, without reading them back: those of
    earlier advances, updated by what this one recorded as its upsert did (a record keeps its
    start; its outcome is the latest)."""
    found = {(r.task_id, r.attempt, r.try_no): r for r in earlier}
    for record in journal.records.values():
        key = (record.task_id, record.attempt, record.try_no)
        old = found.get(key)
        found[key] = (
            record
            if old is None
            else dataclasses.replace(
                old,
                status=record.status,
                finished_at=record.finished_at,
                metrics=record.metrics,
                error=record.error,
                failure_phase=record.failure_phase,
            )
        )
    return sorted(found.values(), key=lambda r: (r.started_at, r.node))


def _step(run: Run, records: list[NodeRecord]) -> str | None:
    """The step a run stands at, for messages: its failed node, else its latest node."""
    return run.failed_node or (records[-1].node if records else None)
