"""The runner: the one path by which every interface starts, resumes, retries and cancels runs.

``Runner`` is a facade over named collaborators, each owning its own state and its part of a
run's life, and each given what it needs when the runner is made:

- ``graphs`` (``Graphs``): templates by name, checked against runs, compiled once;
- ``services`` (``Services``): the configured services, opened once;
- ``advancer`` (``Advancer``): claims a run and drives its graph (the one place that does);
- ``lifecycle`` (``Lifecycle``): create, start, resume, retry, cancel, status;
- ``decisions`` (``Decisions``) and ``sweeper`` (``Sweeper``): people's decisions and answers,
  and what deadlines decide;
- ``checkpoint_history`` (``History``) and ``edits`` (``Edits``): checkpoints, forks, state edits;
- ``retention`` (``Retention``): deleting runs;
- ``schedules`` (``Schedules``) and ``forge_ci`` (``ForgeCi``): schedules that fire, and CI
  waits the forge completes (webhooks, polling).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Collection, Iterable, Mapping
from typing import Any, Unpack

from langgraph.store.base import BaseStore
from langgraph.store.memory import InMemoryStore

from stageline.checkpoints import checkpoint_serde
from stageline.config import Settings, load_settings
from stageline.events import Deliverer, EventBus, Sink
from stageline.events._links import DecisionLinks
from stageline.ledger import Backend, Run, RunStatus, Wait, open_backend, open_store
from stageline.llm import ChatModel
from stageline.runner._advance import Advancer
from stageline.runner._deadlines import Sweeper
from stageline.runner._edit import Edits
from stageline.runner._forge import ForgeAccess
from stageline.runner._forge_ci import ForgeCi
from stageline.runner._graphs import GRAPH_CACHE_SIZE, Graphs
from stageline.runner._history import History
from stageline.runner._human import DecisionOptions, Decisions
from stageline.runner._lifecycle import Lifecycle
from stageline.runner._retention import PRUNED_BY_DEFAULT, PruneReport, Retention
from stageline.runner._schedules import Schedules
from stageline.runner._services import Services
from stageline.runner._snapshots import CheckpointInfo
from stageline.runner._support import RECURSION_LIMIT, RunSummary, new_run_id
from stageline.stages import Budget
from stageline.templates import Template, use_project

__all__ = ["GRAPH_CACHE_SIZE", "RECURSION_LIMIT", "RunSummary", "Runner", "new_run_id"]


class Runner:
    """Starts and advances runs; holds the backend (ledger + checkpoints) for one process."""

    def __init__(
        self,
        settings: Settings,
        backend: Backend,
        *,
        bus: EventBus | None = None,
        model: ChatModel | None = None,
        store: BaseStore | None = None,
        forge: ForgeAccess | None = None,
    ) -> None:
        self.settings = settings
        self.backend = backend
        self.store: BaseStore = store if store is not None else InMemoryStore()
        """LangGraph's store that graphs are compiled with (``runtime.store``, ``ctx.store``):
        on the project's database when opened by ``Runner.open``, else in memory."""
        self.ledger = backend.ledger
        self.bus = bus or EventBus()
        self.ledger.publisher = self.bus.publish
        self.deliverer: Deliverer | None = None
        """Delivers to the ``[[sinks]]`` outbox sinks (``Runner.open(deliver=True)``)."""
        use_project(settings)  # the root on the import path; stage names found in the project
        self.graphs = Graphs(settings, backend.saver, self.store)
        self.services = Services(settings, forge=forge)
        """The configured services; ``forge`` (GitHub) the one given, else its own."""
        self.advancer = Advancer(settings, self.ledger, self.graphs, model=model)
        self.lifecycle = Lifecycle(settings, self.ledger, self.graphs, self.services, self.advancer)
        self.decisions = Decisions(self.ledger, self.graphs, self.services, self.advancer)
        self.sweeper = Sweeper(self.ledger, self.decisions)
        self.checkpoint_history = History(
            settings, self.ledger, self.graphs, self.services, self.advancer
        )
        self.edits = Edits(
            settings, self.ledger, self.graphs, self.checkpoint_history, self.lifecycle
        )
        self.retention = Retention(settings, backend)
        self.schedules = Schedules(self.ledger, self.graphs, self.lifecycle)
        """Schedules: ``add`` one, ``fire_due`` the due ones (see ``_schedules``)."""
        self.forge_ci = ForgeCi(self.ledger, self.decisions, self.services.forge)
        """CI waits: ``on_webhook`` and ``poll_due`` complete them (see ``_forge_ci``)."""

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
        forge: ForgeAccess | None = None,
    ) -> AsyncIterator[Runner]:
        """A runner over the configured database, closed on exit. With ``deliver`` (read
        commands pass False) it also delivers the ledger's events to the outbox sinks of
        ``[[sinks]]`` while it is open, and for at most ``sink_exit_timeout`` s at exit.
        ``forge``: the process's GitHub access to use (its maker closes it); else the runner
        makes its own from ``[github]``."""
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
                deliverer = Deliverer.configured(
                    settings.sinks, backend.ledger, links=links, public_url=settings.public_url
                )
                if deliverer.sink_ids:
                    bus.add(deliverer)  # committed events wake it up
                    await deliverer.start()
            async with open_store(settings.database_url) as store:
                runner = cls(settings, backend, bus=bus, model=model, store=store, forge=forge)
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
        """The chat model stages call (the configured one, made on first use)."""
        return self.advancer.model

    def drain(self, reason: str = "shutdown") -> int:
        """Stop every advance in flight after its current step (each run ends ``queued``), and
        any advance begun from now on at its first; returns how many were in flight."""
        return self.advancer.drain(reason)

    async def close_services(self) -> None:
        """Close the configured services, if they were opened (``Runner.open`` does this),
        once the advances started by completed CI waits have stopped."""
        try:
            await self.forge_ci.aclose()
        finally:
            await self.services.close()

    # -- templates --------------------------------------------------------------------------

    def load(self, ref: str | Template) -> Template:
        """The template ``ref`` names (a name, a file, or the object itself)."""
        return self.graphs.load(ref)

    def graph(self, template: str | Template) -> Any:
        """The template's compiled LangGraph graph over this runner's checkpoints, for reading
        a run's state and history with LangGraph's public API (advance runs with the runner)."""
        return self.graphs.graph(self.graphs.load(template))

    # -- lifecycle --------------------------------------------------------------------------

    async def create(
        self,
        template: str | Template,
        inputs: Mapping[str, Any],
        *,
        run_id: str | None = None,
        deadlines: Mapping[str, Any] | None = None,
        budget: Budget | Mapping[str, Any] | None = None,
        context: Mapping[str, Any] | None = None,
    ) -> Run:
        """Record a queued run after checking its inputs; nothing runs yet."""
        return await self.lifecycle.create(
            template, inputs, run_id=run_id, deadlines=deadlines, budget=budget, context=context
        )

    async def start(
        self,
        template: str | Template | None = None,
        inputs: Mapping[str, Any] | None = None,
        *,
        graph: Any = None,
        services: Mapping[str, Any] | None = None,
        run_id: str | None = None,
        deadlines: Mapping[str, Any] | None = None,
        budget: Budget | Mapping[str, Any] | None = None,
        context: Mapping[str, Any] | None = None,
    ) -> RunSummary:
        """Create a run and advance it until it ends or waits.

        ``deadlines`` overrides the template's deadlines for this run: gate or question node
        name -> seconds (or ``"2h"``, ``"1d"``...). ``budget`` sets this run's token and cost
        limits (a ``Budget`` or ``{"tokens": 5000, "cost": 0.5, "nodes": {...}}``) over the
        template's. ``graph``: run a LangGraph graph instead (a ``StateGraph``, a compiled
        graph or a factory of one), unchanged, each of its nodes recorded. ``context``: what a
        graph with a ``context_schema`` reads through its runtime (over the services of the
        same names), kept with the run for every later advance.
        """
        return await self.lifecycle.start(
            template,
            inputs,
            graph=graph,
            services=services,
            run_id=run_id,
            deadlines=deadlines,
            budget=budget,
            context=context,
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
        return await self.lifecycle.resume(run_id, services=services, force=force, expect=expect)

    async def retry(
        self, run_id: str, *, services: Mapping[str, Any] | None = None, force: bool = False
    ) -> RunSummary:
        """Re-run a failed run's failed node from the checkpoint, as attempt + 1."""
        return await self.lifecycle.retry(run_id, services=services, force=force)

    async def cancel(
        self, run_id: str, *, actor: str | None = None, note: str | None = None
    ) -> Run:
        """Cancel a run: at once if no live process advances it, else between its next steps
        (``actor`` and ``note``, who and why, recorded with it)."""
        return await self.lifecycle.cancel(run_id, actor=actor, note=note)

    async def status(self, run_id: str) -> RunSummary:
        """The run as recorded, with its latest checkpointed state."""
        return await self.lifecycle.status(run_id)

    # -- people -----------------------------------------------------------------------------

    async def approve(
        self, run_id: str, *, note: str | None = None, **options: Unpack[DecisionOptions]
    ) -> RunSummary:
        """Approve the gate the run waits at; the run goes on past it.

        The decision binds to one visit of the gate: ``wait_id`` (the visit the caller showed),
        else the visit that was waiting at ``seen_at`` (when the caller looked; a CLI command's
        start). If that visit was decided meanwhile, ``AlreadyDecided`` names the decision that
        won, even when the run has come back to the gate since."""
        return await self.decisions.decide(run_id, "approve", note=note, **options)

    async def reject(
        self, run_id: str, *, note: str | None = None, **options: Unpack[DecisionOptions]
    ) -> RunSummary:
        """Reject: the run ends ``rejected``, or follows the gate's reject route (bound to a
        visit as ``approve`` is)."""
        return await self.decisions.decide(run_id, "reject", note=note, **options)

    async def take_over(
        self, run_id: str, *, note: str | None = None, **options: Unpack[DecisionOptions]
    ) -> RunSummary:
        """Take over a parked run: it ends ``taken_over``, its branch and worktree left for the
        person (the ``run.taken_over`` event says where). Only a park gate takes this."""
        return await self.decisions.decide(run_id, "takeover", note=note, **options)

    async def request_changes(
        self, run_id: str, *, note: str, **options: Unpack[DecisionOptions]
    ) -> RunSummary:
        """Send the run back to the gate's ``changes_to`` node with ``note`` as its feedback
        (bound to a visit as ``approve`` is)."""
        return await self.decisions.decide(run_id, "changes", note=note, **options)

    async def answer(
        self,
        run_id: str,
        answers: Mapping[str, Any],
        *,
        question_id: str | None = None,
        actor: str | None = None,
        defaults: bool = False,
        services: Mapping[str, Any] | None = None,
        force: bool = False,
        wait: Wait | None = None,
        seen_at: float | None = None,
    ) -> RunSummary:
        """Answer the question set the run waits on (checked first: nothing is recorded for an
        answer that does not fit); ``defaults`` fills unanswered questions with their defaults.
        ``seen_at`` binds the answer to the set that was waiting then (see ``approve``)."""
        return await self.decisions.answer(
            run_id,
            answers,
            question_id=question_id,
            actor=actor,
            defaults=defaults,
            services=services,
            force=force,
            wait=wait,
            seen_at=seen_at,
        )

    async def respond(
        self,
        run_id: str,
        value: Any,
        *,
        wait_id: str | None = None,
        actor: str | None = None,
        services: Mapping[str, Any] | None = None,
        force: bool = False,
        wait: Wait | None = None,
        seen_at: float | None = None,
    ) -> RunSummary:
        """Answer an interrupt the graph made itself (``interrupt(value)`` anywhere) with
        ``value``, the value its ``interrupt()`` returns: recorded first (first answer wins),
        then the run resumes (inside the subgraph that asked)."""
        return await self.decisions.respond(
            run_id,
            value,
            wait_id=wait_id,
            actor=actor,
            services=services,
            force=force,
            wait=wait,
            seen_at=seen_at,
        )

    async def pending(self, run_id: str | None = None) -> list[Wait]:
        """Pending gates and question sets of runs waiting for a person (waiting or parked; of
        one run), oldest first."""
        return await self.decisions.pending(run_id)

    async def pending_with_templates(self, run_id: str | None = None) -> list[tuple[Wait, str]]:
        """``pending``, each with its run's template (one query, for ``stageline pending``)."""
        return await self.decisions.pending_with_templates(run_id)

    async def sweep(self, *, now: float | None = None) -> list[dict[str, Any]]:
        """Apply every deadline step that is due: remind, escalate, then the safe default."""
        return await self.sweeper.sweep(now=now)

    async def resolve_effect(
        self, run_id: str, node: str, key: str, *, done: bool, result: Any = None
    ) -> None:
        """Settle an effect in doubt: it happened (``done``, with ``result``), or run it again."""
        await self.decisions.resolve_effect(run_id, node, key, done=done, result=result)

    # -- history, forks, edits --------------------------------------------------------------

    async def history(self, run_id: str) -> list[CheckpointInfo]:
        """Every checkpoint of the run, oldest first (an unknown run raises ``RunNotFound``)."""
        return await self.checkpoint_history.history(run_id)

    async def fork(
        self,
        run_id: str,
        *,
        at_step: int | None = None,
        checkpoint_id: str | None = None,
        changes: Mapping[str, Any] | None = None,
        fork_id: str | None = None,
        services: Mapping[str, Any] | None = None,
        advance: bool = True,
        force: bool = False,
    ) -> RunSummary:
        """A new run from one of run ``run_id``'s checkpoints, with ``changes`` to its state
        (``at_step=N`` runs step N again; ``checkpoint_id`` starts after that checkpoint;
        neither: from the latest). ``advance=False`` leaves it queued, for a worker."""
        return await self.checkpoint_history.fork(
            run_id,
            at_step=at_step,
            checkpoint_id=checkpoint_id,
            changes=changes,
            fork_id=fork_id,
            services=services,
            advance=advance,
            force=force,
        )

    async def copy(self, run_id: str, *, copy_id: str | None = None) -> RunSummary:
        """A new run with all of run ``run_id``'s checkpoints, advanced to where it stands."""
        return await self.checkpoint_history.copy(run_id, copy_id=copy_id)

    async def update_state(
        self,
        run_id: str,
        values: Mapping[str, Any],
        *,
        checkpoint_id: str | None = None,
        as_node: str | None = None,
        actor: str | None = None,
        force: bool = False,
    ) -> RunSummary:
        """Change the state of a failed run, as if ``as_node`` had written ``values``
        (``retry`` goes on from it); a run that waits for a person is decided or answered,
        never edited (see ``Edits.update_state``)."""
        return await self.edits.update_state(
            run_id,
            values,
            checkpoint_id=checkpoint_id,
            as_node=as_node,
            actor=actor,
            force=force,
        )

    async def check_no_wait(self, run: Run | str, doing: str) -> None:
        """Refuse ``doing`` (``WaitsForPerson``) when the run waits for a person: a gate or
        question is passed by a recorded decision only."""
        await self.edits.check_no_wait(run, doing)

    # -- retention --------------------------------------------------------------------------

    async def delete(self, run_id: str, *, keep_work: bool = False) -> None:
        """Delete one run: its worktree and branch (unless ``keep_work``), its checkpoints,
        then its ledger rows. The caller has made sure no process advances it."""
        await self.retention.delete(run_id, keep_work=keep_work)

    async def prune(
        self,
        *,
        older_than: float,
        statuses: Iterable[RunStatus | str] = PRUNED_BY_DEFAULT,
        now: float | None = None,
        vacuum: bool = False,
    ) -> PruneReport:
        """Delete the runs of ``statuses`` not updated for ``older_than`` seconds, keeping
        their outcomes (``vacuum``: then give the space back)."""
        return await self.retention.prune(
            older_than=older_than, statuses=statuses, now=now, vacuum=vacuum
        )
