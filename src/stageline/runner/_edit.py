"""Editing a stopped run's state in place (what LangGraph's ``update_state`` does on a thread).

The edit is a new checkpoint of the run's own thread, written by LangGraph's public
``abulk_update_state`` as the node(s) that wrote the checkpoint it starts from, so the same
nodes run next. A run that waits at a gate or question is advanced at once, so that it asks
again on the edited state (a decision made on the old state would be stale); a failed run stays
failed, and ``retry`` continues from the edited state.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from langgraph.errors import InvalidUpdateError
from langgraph.types import StateUpdate

from stageline.errors import InputError, InvalidTransition, StagelineError
from stageline.ledger import Event, LedgerStore, Run, RunStatus, this_holder
from stageline.runner._advance import Advancer
from stageline.runner._graphs import Graphs
from stageline.runner._history import History
from stageline.runner._lifecycle import Lifecycle
from stageline.runner._services import Services
from stageline.runner._support import RunSummary, _config

if TYPE_CHECKING:
    from stageline.config import Settings

__all__ = ["Edits"]


class Edits:
    """Edits of a stopped run's state, as a new checkpoint of its own thread."""

    def __init__(
        self,
        settings: Settings,
        ledger: LedgerStore,
        graphs: Graphs,
        services: Services,
        advancer: Advancer,
        history: History,
        lifecycle: Lifecycle,
    ) -> None:
        self.settings = settings
        self.ledger = ledger
        self.graphs = graphs
        self.services = services
        self.advancer = advancer
        self.history = history
        self.lifecycle = lifecycle

    async def update_state(
        self,
        run_id: str,
        values: Mapping[str, Any],
        *,
        checkpoint_id: str | None = None,
        as_node: str | None = None,
        actor: str | None = None,
        services: Mapping[str, Any] | None = None,
        advance: bool = True,
        force: bool = False,
    ) -> RunSummary:
        """Change the state of a waiting or failed run (from its latest checkpoint, or from
        ``checkpoint_id``), as if ``as_node`` (default: the node(s) that wrote that checkpoint)
        had written ``values``. A waiting run goes on at once and asks again (``advance=False``:
        it is left queued, for a worker); a failed one waits for ``retry``. A finished run
        cannot change: fork it."""
        run = await self.ledger.get_run(run_id)
        if run.status not in (RunStatus.WAITING, RunStatus.FAILED):
            hint = "; fork it instead" if run.status.terminal else ""
            raise InvalidTransition(
                f"run {run_id} is {run.status}; only a waiting or failed "
                f"run's state can be changed{hint}"
            )
        made = self.graphs.checked(run, force)
        values = self.graphs.check_inputs(made, dict(values))
        graph = self.graphs.graph(made)
        snaps = await self.history.snaps(made, run_id)
        base = (
            next((s for s in snaps if s.info.checkpoint_id == checkpoint_id), None)
            if (checkpoint_id)
            else (snaps[-1] if snaps else None)
        )
        if base is None:
            raise InputError(
                f"run {run_id} has no checkpoint {checkpoint_id!r}"
                if checkpoint_id
                else f"run {run_id} has no checkpoint yet; nothing to change"
            )
        if as_node is not None and as_node not in graph.nodes:
            raise InputError(
                f"as_node {as_node!r} is no node of template {made.name!r}; its "
                f"nodes are: {', '.join(sorted(n for n in graph.nodes))}"
            )
        writers = [as_node] if as_node else [n for n in base.info.nodes if n in graph.nodes]
        if not writers:
            raise InputError(
                f"say which node writes these values (as_node): checkpoint "
                f"{base.info.checkpoint_id} of run {run_id} has no node of its own"
            )
        services = await self.services.resolve(services)
        data = {
            "keys": sorted(values),
            "checkpoint_id": base.info.checkpoint_id,
            "as_node": writers,
            "actor": actor,
        }
        waiting = run.status is RunStatus.WAITING
        holder = (
            await self.advancer.claim(run, made, "run.resumed")
            if waiting
            else await self._lease(run)
        )
        try:
            conf = _config(run_id)
            conf["configurable"].update(checkpoint_ns="", checkpoint_id=base.info.checkpoint_id)
            updates = [StateUpdate(values, writers[0]), *(StateUpdate({}, w) for w in writers[1:])]
            written = await graph.abulk_update_state(conf, [updates])
        except BaseException as exc:
            with contextlib.suppress(StagelineError):
                if waiting:
                    await self.ledger.transition(
                        run_id, RunStatus.WAITING, release=True, expect=[RunStatus.RUNNING]
                    )
                else:
                    await self.ledger.release_lease(run_id, holder)
            if isinstance(exc, InvalidUpdateError):
                raise InputError(f"cannot change the state of run {run_id}: {exc}") from exc
            raise
        data["new_checkpoint_id"] = written["configurable"]["checkpoint_id"]
        event = Event(
            run_id=run_id,
            kind="run.state_updated",
            data=data,
            message=f"state changed: {', '.join(sorted(values)) or 'nothing'}",
        )
        if waiting:  # asks again on the new state; the event goes with its first step
            await self.ledger.close_waits(run_id, "the state was changed; it asks again")
            if not advance:
                await self.ledger.transition(
                    run_id,
                    RunStatus.QUEUED,
                    release=True,
                    expect=[RunStatus.RUNNING],
                    events=[event],
                )
                return await self.lifecycle.status(run_id)
            self.ledger.stage_event(event)
            return await self.advancer.advance(run, made, None, services, holder=holder)
        await self.ledger.append_events(run_id, [event])
        await self.ledger.release_lease(run_id, holder)
        return await self.lifecycle.status(run_id)

    async def _lease(self, run: Run) -> str:
        """Hold a failed run's lease (nobody retries it meanwhile) and check it is still so."""
        holder = this_holder()
        await self.ledger.acquire_lease(run.run_id, holder, self.settings.lease_ttl)
        current = await self.ledger.get_run(run.run_id)
        if current.status is not run.status:
            await self.ledger.release_lease(run.run_id, holder)
            raise InvalidTransition(f"run {run.run_id} is now {current.status}")
        return holder
