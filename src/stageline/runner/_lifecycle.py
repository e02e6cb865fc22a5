"""A run's lifecycle outside people's decisions: create, start, resume, retry, cancel, status."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Collection, Mapping
from typing import Any

from langgraph.errors import InvalidUpdateError

from stageline.config import Settings
from stageline.errors import CheckpointCorrupt, InvalidTransition, StagelineError, UsageError
from stageline.ledger import Event, LedgerStore, Run, RunClaim, RunStatus, this_holder
from stageline.names import check_run_id
from stageline.runner._advance import Advancer, step_of
from stageline.runner._budget import with_budget
from stageline.runner._graph_context import with_context
from stageline.runner._graphs import Graphs
from stageline.runner._services import Services
from stageline.runner._support import RunSummary, _config, _stable_ref, new_run_id
from stageline.runner._trust import check_checkpoint
from stageline.runner._waits import graph_inputs, with_deadlines
from stageline.stages import Budget
from stageline.templates import Template

__all__ = ["Lifecycle"]


class Lifecycle:
    """Starts, resumes, retries and cancels runs, and reads one back, through the advancer."""

    def __init__(
        self,
        settings: Settings,
        ledger: LedgerStore,
        graphs: Graphs,
        services: Services,
        advancer: Advancer,
    ) -> None:
        self.settings = settings
        self.ledger = ledger
        self.graphs = graphs
        self.services = services
        self.advancer = advancer

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
        run_id = check_run_id(run_id) if run_id is not None else None
        made = self.graphs.load(template)
        inputs = self.graphs.check_inputs(made, inputs, new_run=True)
        ref = template if isinstance(template, str) else made.name
        run = Run(
            run_id=run_id or new_run_id(),
            template=_stable_ref(ref),
            template_version=made.full_version,
            status=RunStatus.QUEUED,
            inputs=with_budget(
                with_deadlines(made, with_context(made, inputs, context), deadlines), budget
            ),
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
        """Create a run and advance it until it ends or waits (see ``Runner.start``); of the
        ``template`` named or given, or of a LangGraph ``graph`` object."""
        run_id = check_run_id(run_id) if run_id is not None else None
        if (template is None) == (graph is None):
            raise UsageError("start a run of a template or of a graph (one of them)")
        made = self.graphs.load(self.graphs.of_graph(graph) if template is None else template)
        inputs = self.graphs.check_inputs(made, inputs or {}, new_run=True)
        recorded = with_budget(
            with_deadlines(made, with_context(made, inputs, context), deadlines), budget
        )
        services = await self.services.resolve(services)
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
                inputs=recorded,
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
        return await self.advancer.advance(
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
            services = await self.services.resolve(services)
            found: list[tuple[Run, Template, RunClaim]] = []

            def claim_of(run: Run) -> RunClaim:
                made = self._resumable(run, force, expect)
                found.append((run, made, self.advancer.claim_of(run, made, "run.resumed")))
                return found[-1][2]

            claimed = await self.ledger.claim(run_id, claim_of)
            run, made, claim = found[-1]
        else:
            run = await self.ledger.get_run(run_id)
            made = self._resumable(run, force, expect)
            if run.status is RunStatus.WAITING:  # its checkpoint: the one people were asked on
                await check_checkpoint(
                    self.graphs.saver(made),
                    run_id,
                    await self.ledger.waits(run_id),
                    step_of(run, await self.ledger.node_records(run_id)),
                )
            services = await self.services.resolve(services)
            claim = self.advancer.claim_of(run, made, "run.resumed")
            claimed = await self.ledger.claim(run_id, claim)
        # No checkpoint yet: queued, or its process died before the first step was saved.
        return await self.advancer.advance(
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
        return self.graphs.checked(run, force)

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
        made = self.graphs.checked(run, force)
        services = await self.services.resolve(services)
        payload = None if await self._has_checkpoint(made, run_id) else graph_inputs(run.inputs)
        holder = await self.advancer.claim(run, made, "run.retried", attempt=run.attempt + 1)
        return await self.advancer.advance(
            dataclasses.replace(run, attempt=run.attempt + 1),
            made,
            payload,
            services,
            holder=holder,
        )

    async def cancel(
        self, run_id: str, *, actor: str | None = None, note: str | None = None
    ) -> Run:
        """Cancel a run: at once if no live process advances it, else between its next steps.
        ``actor`` and ``note`` (who, and why) go into the ``run.cancelled`` event and the
        reason each wait it closes gives."""
        run = await self.ledger.get_run(run_id)
        if run.status.terminal:
            raise InvalidTransition(f"run {run_id} already {run.status}")
        who = {k: v for k, v in (("actor", actor), ("note", note)) if v}
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
            events=[Event(run_id=run_id, kind="run.cancelled", level="warning", data=who)],
        )
        if run.status.waits_for_person:
            by = f" by {actor}" if actor else ""
            await self.ledger.close_waits(
                run_id, f"the run was cancelled{by}" + (f": {note}" if note else "")
            )
        return cancelled

    async def status(self, run_id: str) -> RunSummary:
        """The run as recorded, with its latest checkpointed state."""
        run = await self.ledger.get_run(run_id)
        state: dict[str, Any] = {}
        records = await self.ledger.node_records(run_id)
        unreadable: str | None = None
        waits = await self.ledger.waits(run_id)
        try:
            made = self.graphs.load(run.template)
            state = await self.graphs.state(made, run_id)
            if run.status is RunStatus.WAITING:  # what a decision would be applied to
                await check_checkpoint(
                    self.graphs.saver(made), run_id, waits, step_of(run, records)
                )
        except CheckpointCorrupt as exc:  # the ledger is still worth showing
            unreadable = str(exc.of(run_id, step_of(run, records)))
        except StagelineError:
            pass
        return RunSummary(
            run=run,
            records=records,
            state=state,
            waits=waits,
            checkpoint_error=unreadable,
            lineage=await self.ledger.lineage(run_id),
            cron_id=await self.ledger.fired_by(run_id),
            forks=await self.ledger.forks(run_id),
        )

    async def _has_checkpoint(self, made: Template, run_id: str) -> bool:
        try:
            snapshot = await self.graphs.graph(made).aget_state(_config(run_id))
        except InvalidUpdateError:  # pending writes that clash: there is a checkpoint
            return True
        except CheckpointCorrupt as exc:
            run = await self.ledger.get_run(run_id)
            raise exc.of(run_id, step_of(run, await self.ledger.node_records(run_id))) from exc
        return bool(snapshot.values) or bool(snapshot.next)
