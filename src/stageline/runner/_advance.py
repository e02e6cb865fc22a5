"""Advancing a run: take its lease, drive its graph until it ends, waits or stops, record how.

``Advancer`` is the one place a run's graph is driven. Every other part of the runner (start,
resume, retry, decisions, answers, forks, edits) claims the run through it and hands it the
payload to advance with: the inputs, ``None`` (from the checkpoint), or a ``Command``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, cast

from langgraph.errors import GraphDrained, InvalidUpdateError
from langgraph.runtime import RunControl

from stageline.config import Settings
from stageline.errors import CheckpointCorrupt, StagelineError, StorageError
from stageline.ledger import (
    Event,
    LedgerStore,
    NodeRecord,
    Run,
    RunClaim,
    RunStatus,
    Wait,
    this_holder,
)
from stageline.llm import ChatModel, chat_model
from stageline.runner._budget import run_budget
from stageline.runner._graph_context import run_context
from stageline.runner._graphs import Graphs
from stageline.runner._interrupts import interrupt_policy
from stageline.runner._journal import LedgerJournal
from stageline.runner._live import current_live, graph_parts
from stageline.runner._outcome import finish_run
from stageline.runner._support import RunSummary, _config, _public_state
from stageline.runner._task_tries import TaskTries
from stageline.runner._tasks import TaskRecords
from stageline.runner._waits import Settled, settle_one_by_one, settle_waits
from stageline.runner._worktrees import describe_worktree
from stageline.stages import RunContext
from stageline.templates import Template

__all__ = ["Advancer", "step_of"]

_log = logging.getLogger("stageline.runner")


class Advancer:
    """Claims runs and drives their graphs, for one runner; knows the advances in flight."""

    def __init__(
        self,
        settings: Settings,
        ledger: LedgerStore,
        graphs: Graphs,
        *,
        model: ChatModel | None = None,
    ) -> None:
        self.settings = settings
        self.ledger = ledger
        self.graphs = graphs
        self._model = model
        self._controls: set[RunControl] = set()
        """The controls of the advances in flight, for ``drain``."""
        self._drain_reason: str | None = None

    @property
    def model(self) -> ChatModel:
        """The chat model stages call (the configured one, made on first use)."""
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

    # -- claiming ---------------------------------------------------------------------------

    async def claim(
        self, run: Run, template: Template, kind: str, *, attempt: int | None = None
    ) -> str:
        """Take the run's lease and mark it running (one transaction); returns the lease
        holder's name."""
        claim = self.claim_of(run, template, kind, attempt=attempt)
        # `expect`: the run may have moved on since it was read. Refused (the lease held, or the
        # status moved), nothing is taken or changed.
        await self.ledger.claim(run.run_id, claim)
        return claim.holder

    def claim_of(
        self, run: Run, template: Template, kind: str, *, attempt: int | None = None
    ) -> RunClaim:
        """What taking the run's lease to advance it does (see ``claim``)."""
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

    # -- advancing --------------------------------------------------------------------------

    async def advance(
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
                    template, run, payload, context, control, interrupts
                )
            except CheckpointCorrupt as exc:  # named at the step the ledger has the run at
                unreadable = True
                raise exc.of(run_id, step_of(run, _records(earlier, journal))) from exc
            finally:
                self.ledger.watch_cancel(run_id, None)
                self.ledger.expect_no_checkpoint(run_id, False)
                self._controls.discard(control)
                keeper.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await keeper
            settled = await settle_waits(
                self.ledger,
                self.graphs.saver(template),
                template,
                run,
                outcome,
                interrupts,
                fresh=fresh,
                graph=self.graphs.graph(template),  # where the graph's own interrupts were asked
                policy=interrupt_policy(self.settings),
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
            state = await self.graphs.state(template, run_id)
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
        run: Run,
        payload: Any,
        context: RunContext,
        control: RunControl,
        interrupts: list[Any],
    ) -> tuple[BaseException | str | None, dict[str, Any] | None]:
        """Run the graph. Returns the outcome (None when it ended, 'waiting', a drain reason, or
        the error) and the latest state seen in the stream (None if it must be read back); the
        interrupts it stopped at go into ``interrupts``."""
        run_id = run.run_id
        graph = self.graphs.graph(template)
        state: dict[str, Any] | None = None
        waiting = False
        plain = template.plain_nodes
        # Nodes stageline did not wrap are recorded from LangGraph's tasks stream (``_tasks``);
        # a template of stageline's stages alone streams values only, as it always did.
        tasks = TaskRecords(cast(LedgerJournal, context.journal), template.name, plain)
        try:
            async for namespace, mode, chunk in self._stream(
                graph,
                payload,
                run_id,
                # The run's own context (a LangGraph client's) goes over the services.
                template.context_for({**context.services, **run_context(run.inputs)}, context),
                control,
                tasks.tries if plain else None,
            ):
                if mode == "tasks":
                    tasks.observe(namespace, chunk)
                    continue
                if namespace:  # a subgraph's own state: the run's is the root graph's
                    continue
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
        finally:
            tasks.close()
        return ("waiting" if waiting else None), None if state is None else _public_state(state)

    @staticmethod
    async def _stream(
        graph: Any,
        payload: Any,
        run_id: str,
        context: Any,
        control: RunControl,
        tries: TaskTries | None,
    ) -> AsyncIterator[tuple[tuple[str, ...], str, Any]]:
        """The graph's stream as ``(namespace, mode, chunk)``: the values of each step, and
        with plain nodes in the graph, every task's start and result in every subgraph (and
        each try of a task, to ``tries``); what a live stream follows goes to it as well."""
        live = current_live()
        options = {"context": context, "durability": "sync", "control": control}
        if tries is None:
            parts = graph_parts(graph, payload, _config(run_id), ["values"], False, live, **options)
        else:
            config = {**_config(run_id), "callbacks": [tries]}
            parts = graph_parts(graph, payload, config, ["values", "tasks"], True, live, **options)
        async for part in parts:
            yield part

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


def step_of(run: Run, records: list[NodeRecord]) -> str | None:
    """The step a run stands at, for messages: its failed node, else its latest node."""
    return run.failed_node or (records[-1].node if records else None)
