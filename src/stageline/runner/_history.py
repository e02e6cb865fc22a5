"""A run's checkpoint history, forks from any of its steps, and edits of a stopped run's state.

Everything goes through LangGraph's public graph API: ``aget_state_history`` reads the
checkpoints; a fork writes the chosen checkpoint's state into the new run's own thread with
``abulk_update_state`` *as the node(s) that wrote it*, so LangGraph's own edges decide what runs
next (the same nodes as in the original from that checkpoint). The original run's thread and
ledger rows are only read.

Steps are LangGraph's: the checkpoint of step N holds the state after the nodes of step N ran
(step -1 is the input). Forking "at step N" runs the nodes of step N again, from the checkpoint
of step N - 1.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from langgraph.errors import InvalidUpdateError
from langgraph.types import StateUpdate

from stageline.errors import InputError, InvalidTransition, StagelineError, UsageError
from stageline.ledger import Event, LedgerStore, Lineage, Run, RunStatus, this_holder
from stageline.names import check_run_id
from stageline.runner._advance import Advancer
from stageline.runner._graphs import Graphs
from stageline.runner._guard import check_writers, human_nodes
from stageline.runner._services import Services
from stageline.runner._snapshots import CheckpointInfo, Snap
from stageline.runner._support import RunSummary, _config, _public_state, new_run_id
from stageline.templates import Template

if TYPE_CHECKING:
    from stageline.config import Settings

__all__ = ["CheckpointInfo", "History"]


def _epoch(stamp: str | None) -> float:
    if not stamp:
        return 0.0
    with contextlib.suppress(ValueError):
        return datetime.fromisoformat(stamp).timestamp()
    return 0.0


class History:
    """A run's checkpoints, and forks from any of them."""

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

    # -- reading ----------------------------------------------------------------------------

    async def history(self, run_id: str) -> list[CheckpointInfo]:
        """Every checkpoint of the run, oldest first (an unknown run raises ``RunNotFound``)."""
        run = await self.ledger.get_run(run_id)
        return [s.info for s in await self.snaps(self.graphs.load(run.template), run_id)]

    async def snaps(self, made: Template, run_id: str) -> list[Snap]:
        graph = self.graphs.graph(made)
        found = [s async for s in graph.aget_state_history(_config(run_id))]
        found.reverse()  # LangGraph lists newest first
        by_id = {s.config["configurable"]["checkpoint_id"]: s for s in found}
        snaps: list[Snap] = []
        infos: dict[str, CheckpointInfo] = {}
        edits: dict[str, list[str]] | None = None
        for snap in found:
            cid = snap.config["configurable"]["checkpoint_id"]
            pid = (snap.parent_config or {}).get("configurable", {}).get("checkpoint_id")
            parent = by_id.get(pid) if pid else None
            meta = dict(snap.metadata or {})
            source = str(meta.get("source", ""))
            if source == "loop" and parent is not None:
                nodes: list[str] = list(parent.next)
            elif source == "update" and parent is None:  # a fork's first: as its base's nodes
                nodes = await self._fork_writers(run_id)
                source = "fork" if nodes else source
            elif source == "update":  # a state edit: its writer is in the ledger's event
                if edits is None:
                    edits = await self._edits(run_id)
                nodes = edits.get(cid, [])
            else:  # the input
                nodes = []
            values = _public_state(snap.values)
            before = infos[pid].values if pid in infos else {}
            changed = {k: v for k, v in values.items() if k not in before or before[k] != v}
            info = CheckpointInfo(
                run_id=run_id,
                checkpoint_id=cid,
                parent_id=pid,
                step=int(meta.get("step", -1)),
                nodes=nodes,
                next=list(snap.next),
                source=source,
                created_at=_epoch(snap.created_at),
                values=values,
                changed=changed,
                interrupts=[{"id": i.id, "value": i.value} for i in snap.interrupts],
            )
            infos[cid] = info
            snaps.append(Snap(info=info, raw=dict(snap.values)))
        return snaps

    async def _edits(self, run_id: str) -> dict[str, list[str]]:
        """Checkpoint id -> the node(s) a state edit was written as (``update_state``)."""
        found = await self.ledger.events(run_id)
        return {
            str(e.data["new_checkpoint_id"]): list(e.data.get("as_node") or [])
            for e in found
            if e.kind == "run.state_updated" and "new_checkpoint_id" in e.data
        }

    async def _fork_writers(self, run_id: str) -> list[str]:
        """The nodes that wrote the checkpoint run ``run_id`` was forked from."""
        found = await self.ledger.lineage(run_id)
        if found is None:
            return []
        try:
            parent = await self.ledger.get_run(found.parent_run_id)
            snaps = await self.snaps(self.graphs.load(parent.template), parent.run_id)
        except StagelineError:  # the parent is gone (retention) or its template is
            return []
        return next(
            (s.info.nodes for s in snaps if s.info.checkpoint_id == found.parent_checkpoint_id), []
        )

    # -- forking ----------------------------------------------------------------------------

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
        """A new run from one of run ``run_id``'s checkpoints, with ``changes`` to its state.

        ``at_step=N`` runs the nodes of step N again (from the checkpoint of step N - 1);
        ``checkpoint_id`` starts from that checkpoint (runs what comes after it); neither: from
        the latest. The fork gets its own thread, records, decisions and outcomes, and its
        lineage in the ledger; the original is only read. ``advance=False`` leaves it queued
        (for a worker); else it is advanced like ``start``.
        """
        source = await self.ledger.get_run(run_id)
        made = self.graphs.checked(source, force)
        changes = self.graphs.check_inputs(made, dict(changes or {}))
        base, writers = await self._fork_base(made, source, at_step, checkpoint_id, bool(changes))
        given = await self.services.resolve(services)
        step = base.info.step + 1
        run = await self._child(
            source,
            made,
            fork_id,
            inputs={**source.inputs, **changes},
            message=f"forked from run {run_id} at step {step}",
            step=step,
            checkpoint_id=base.info.checkpoint_id,
            data={"changes": sorted(changes)},
        )
        new_id = run.run_id
        try:
            payload = await self._seed(made, new_id, base, writers, changes, source)
        except BaseException as exc:  # nothing half-made: no run without its checkpoint
            with contextlib.suppress(Exception):
                await self.graphs.graph(made).checkpointer.adelete_thread(new_id)
            with contextlib.suppress(StagelineError):
                await self.ledger.delete_run(new_id)
            if isinstance(exc, InvalidUpdateError):
                raise InputError(f"cannot fork run {run_id} there: {exc}") from exc
            raise
        if not advance:
            queued = await self.ledger.transition(
                new_id,
                RunStatus.QUEUED,
                release=True,
                expect=[RunStatus.RUNNING],
                events=[
                    Event(
                        run_id=new_id,
                        kind="run.queued",
                        data={"template": made.name, "version": made.full_version},
                    )
                ],
            )
            return RunSummary(
                run=queued,
                records=[],
                state=_public_state(base.raw),
                lineage=await self.ledger.lineage(new_id),
            )
        return await self._advance_child(run, made, payload, given)

    async def copy(
        self,
        run_id: str,
        *,
        copy_id: str | None = None,
        services: Mapping[str, Any] | None = None,
    ) -> RunSummary:
        """A new run with every checkpoint of run ``run_id`` (its whole history, as LangGraph's
        ``threads.copy``), advanced from the latest: it stops where the original stands (at
        the same gate or question, asked again and waiting for its own decision; or ended).
        Its lineage is recorded as a fork's; the original is only read."""
        source = await self.ledger.get_run(run_id)
        made = self.graphs.checked(source, False)
        snaps = await self.snaps(made, run_id)  # (a read: any write that waited is flushed)
        if not snaps:
            raise InvalidTransition(f"run {run_id} has no checkpoint yet; nothing to copy")
        latest = snaps[-1]
        given = await self.services.resolve(services)
        run = await self._child(
            source,
            made,
            copy_id,
            inputs=dict(source.inputs),
            message=f"copied from run {run_id} with its history",
            step=latest.info.step + 1,
            checkpoint_id=latest.info.checkpoint_id,
            data={"changes": [], "copy": True},
        )
        new_id = run.run_id
        try:
            await self.ledger.copy_checkpoints(run_id, new_id)
        except BaseException:  # nothing half-made: no run without its checkpoints
            with contextlib.suppress(StagelineError):
                await self.ledger.delete_run(new_id)
            raise
        return await self._advance_child(run, made, None, given)

    async def _advance_child(
        self, run: Run, made: Template, payload: Any, given: Mapping[str, Any]
    ) -> RunSummary:
        """Advance a new fork or copy like ``start``; its summary shows its lineage."""
        holder = run.lease_holder or this_holder()
        done = await self.advancer.advance(run, made, payload, given, holder=holder, fresh=True)
        return RunSummary(
            run=done.run,
            records=done.records,
            state=done.state,
            waits=done.waits,
            lineage=await self.ledger.lineage(run.run_id),
        )

    async def _child(
        self,
        source: Run,
        made: Template,
        child_id: str | None,
        *,
        inputs: Mapping[str, Any],
        message: str,
        step: int,
        checkpoint_id: str,
        data: Mapping[str, Any],
    ) -> Run:
        """A fork or copy of ``source`` (id ``child_id``, or a new one): running under this
        process's lease, its lineage recorded from ``checkpoint_id`` (step ``step``) with a
        ``run.forked`` event."""
        new_id = check_run_id(child_id or new_run_id())
        return await self.ledger.create_run(
            Run(
                run_id=new_id,
                template=source.template,
                template_version=made.full_version,
                status=RunStatus.RUNNING,
                inputs=dict(inputs),
                lease_holder=this_holder(),
                lease_expires_at=time.time() + self.settings.lease_ttl,
            ),
            events=[
                Event(
                    run_id=new_id,
                    kind="run.forked",
                    message=message,
                    data={
                        "attempt": 1,
                        "template": made.name,
                        "from": source.run_id,
                        "step": step,
                        "checkpoint_id": checkpoint_id,
                        **data,
                    },
                )
            ],
            lineage=Lineage(
                run_id=new_id,
                parent_run_id=source.run_id,
                parent_step=step,
                parent_checkpoint_id=checkpoint_id,
            ),
        )

    async def _fork_base(
        self,
        made: Template,
        source: Run,
        at_step: int | None,
        checkpoint_id: str | None,
        changed: bool = False,
    ) -> tuple[Snap, list[str]]:
        """The checkpoint a fork starts from, and the nodes that wrote it; with ``changed``
        state, one before every gate or question passed on the way to it (``runner._guard``)."""
        if at_step is not None and checkpoint_id is not None:
            raise UsageError("fork at a step or at a checkpoint id, not both")
        snaps = await self.snaps(made, source.run_id)
        if not snaps:
            raise InvalidTransition(f"run {source.run_id} has no checkpoint yet; nothing to fork")
        by_id = {s.info.checkpoint_id: s for s in snaps}
        if checkpoint_id is not None:
            found = by_id.get(checkpoint_id)
            if found is None:
                raise InputError(
                    f"run {source.run_id} has no checkpoint {checkpoint_id!r}; "
                    f"see `stageline history {source.run_id}`"
                )
        else:
            chain: list[Snap] = []  # the head's own line: past edits leave side branches
            cursor: Snap | None = snaps[-1]
            while cursor is not None:
                chain.append(cursor)
                cursor = by_id.get(cursor.info.parent_id or "")
            if at_step is None:
                found = chain[0]
            else:
                ran = sorted({s.info.step + 1 for s in chain if s.info.next})
                found = next((s for s in chain if s.info.step == at_step - 1 and s.info.next), None)
                if found is None:
                    raise InputError(
                        f"run {source.run_id} has no step {at_step} to fork at; its steps are "
                        f"{', '.join(map(str, ran)) or 'none'} (see `stageline history "
                        f"{source.run_id}`)"
                    )
        writers = [n for n in found.info.nodes if n in self.graphs.graph(made).nodes]
        if found.info.source != "input" and not writers:
            raise InputError(
                f"cannot tell which node wrote checkpoint {found.info.checkpoint_id} of run "
                f"{source.run_id}; fork at another step"
            )
        if changed and found.info.source != "input":
            check_writers(
                snaps,
                found,
                writers,
                await human_nodes(self.ledger, made, source.run_id),
                run_id=source.run_id,
                doing="a fork with changed state",
            )
        return found, writers

    async def _seed(
        self,
        made: Template,
        new_id: str,
        base: Snap,
        writers: list[str],
        changes: Mapping[str, Any],
        source: Run,
    ) -> Any:
        """Write the fork's first checkpoint; returns the payload to advance it with."""
        if base.info.source == "input":  # from the very start: the inputs, changed
            from stageline.runner._waits import graph_inputs

            return {**graph_inputs(source.inputs), **changes}
        values = {**base.raw, **changes}
        updates = [StateUpdate(values, writers[0])]
        updates += [StateUpdate({}, w) for w in writers[1:]]
        graph = self.graphs.graph(made)
        await graph.abulk_update_state(_config(new_id), [updates])
        return None
