"""Editing a stopped run's state in place (what LangGraph's ``update_state`` does on a thread).

The edit is a new checkpoint of the run's own thread, written by LangGraph's public
``abulk_update_state`` as the node(s) that wrote the checkpoint it starts from, so the same
nodes run next. Only a failed run is edited: it stays failed, and ``retry`` continues from the
edited state. A run that waits at a gate or question is decided or answered instead (an edit
there would move it on without a decision), and an edit never lands past a gate or question
the run passed (``runner._guard``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from langgraph.errors import InvalidUpdateError
from langgraph.types import StateUpdate

from stageline.errors import InputError, InvalidTransition, StagelineError
from stageline.ledger import Event, LedgerStore, Run, RunStatus, this_holder
from stageline.runner._graphs import Graphs
from stageline.runner._guard import check_writers, human_nodes, waits_for_person
from stageline.runner._history import History
from stageline.runner._lifecycle import Lifecycle
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
        history: History,
        lifecycle: Lifecycle,
    ) -> None:
        self.settings = settings
        self.ledger = ledger
        self.graphs = graphs
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
        force: bool = False,
    ) -> RunSummary:
        """Change the state of a failed run (from its latest checkpoint, or from
        ``checkpoint_id``), as if ``as_node`` (default: the node(s) that wrote that checkpoint)
        had written ``values``; ``retry`` goes on from it. A run that waits for a person is
        decided or answered, never edited (``WaitsForPerson``); a finished run cannot change:
        fork it. The write never skips a gate or question (see ``runner._guard``)."""
        run = await self.ledger.get_run(run_id)
        await self.check_no_wait(run, "its state cannot be changed")
        if run.status is not RunStatus.FAILED:
            hint = "; fork it instead" if run.status.terminal else ""
            raise InvalidTransition(
                f"run {run_id} is {run.status}; only a failed run's state can be changed{hint}"
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
        check_writers(
            snaps,
            base,
            writers,
            await human_nodes(self.ledger, made, run_id),
            run_id=run_id,
            doing="a state edit",
        )
        data = {
            "keys": sorted(values),
            "checkpoint_id": base.info.checkpoint_id,
            "as_node": writers,
            "actor": actor,
        }
        holder = await self._lease(run)
        try:
            conf = _config(run_id)
            conf["configurable"].update(checkpoint_ns="", checkpoint_id=base.info.checkpoint_id)
            updates = [StateUpdate(values, writers[0]), *(StateUpdate({}, w) for w in writers[1:])]
            written = await graph.abulk_update_state(conf, [updates])
        except BaseException as exc:
            with contextlib.suppress(StagelineError):
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
        await self.ledger.append_events(run_id, [event])
        await self.ledger.release_lease(run_id, holder)
        return await self.lifecycle.status(run_id)

    async def check_no_wait(self, run: Run | str, doing: str) -> None:
        """Refuse ``doing`` (``WaitsForPerson``, naming the wait and the route that decides it)
        when the run waits for a person: a gate or question is passed by a decision only."""
        found = await self.ledger.get_run(run) if isinstance(run, str) else run
        if found.status.waits_for_person:
            raise waits_for_person(found, await self.ledger.waits(found.run_id), doing)

    async def _lease(self, run: Run) -> str:
        """Hold a failed run's lease (nobody retries it meanwhile) and check it is still so."""
        holder = this_holder()
        await self.ledger.acquire_lease(run.run_id, holder, self.settings.lease_ttl)
        current = await self.ledger.get_run(run.run_id)
        if current.status is not run.status:
            await self.ledger.release_lease(run.run_id, holder)
            raise InvalidTransition(f"run {run.run_id} is now {current.status}")
        return holder
