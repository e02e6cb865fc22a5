"""Schedules: adding them (checked at once), and firing the ones that are due.

Whichever stageline process serves or works (``stageline serve``, ``stageline worker``, the
local worker) calls ``fire_due`` every second or so; the ledger's compare-and-set on a
schedule's next due time lets exactly one of them fire each due time, however many look. A
firing creates a queued run (the caller has it advanced: the job queue, the local worker),
with the schedule as its lineage (``fired_by``), its thread metadata and its API run saying
``cron_id`` too.

Missed due times (nothing ran for a while) fire once, at the first look after, and the schedule
goes on from that look (``Cron.due_after(now)``). A thread's schedule starts that thread at its
first due time; a thread runs once, so later due times of a thread already started are skipped
(noted in the log), and the schedule goes on.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping
from typing import Any

from stageline.errors import InputError, RunNotFound, StagelineError
from stageline.ledger import ApiRun, Assistant, Cron, LedgerStore, check_schedule
from stageline.names import check_run_id
from stageline.runner._graphs import Graphs
from stageline.runner._lifecycle import Lifecycle
from stageline.runner._support import new_run_id

__all__ = ["Schedules"]

_log = logging.getLogger("stageline.schedules")


class Schedules:
    """The runner's schedules: add, change, fire."""

    def __init__(self, ledger: LedgerStore, graphs: Graphs, lifecycle: Lifecycle) -> None:
        self.ledger = ledger
        self.graphs = graphs
        self.lifecycle = lifecycle

    async def add(
        self,
        template: str,
        schedule: str,
        *,
        inputs: Mapping[str, Any] | None = None,
        context: Mapping[str, Any] | None = None,
        metadata: Mapping[str, Any] | None = None,
        thread_id: str | None = None,
        timezone: str | None = None,
        end_time: float | None = None,
        enabled: bool = True,
        created_by: str | None = None,
        extra: Mapping[str, Any] | None = None,
        assistant_id: str | None = None,
        now: float | None = None,
    ) -> Cron:
        """Record a schedule of ``template`` (of the assistant ``assistant_id`` made from it,
        when given: its runs start with that assistant's context as it is when they start);
        its expression, time zone and inputs are checked now (``InputError``), so that a bad
        one never waits to fail at its first due time."""
        check_schedule(schedule, timezone)
        if thread_id is not None:
            check_run_id(thread_id, "thread_id")
        made = self.graphs.load(template)
        self.graphs.check_inputs(made, dict(inputs or {}), new_run=True)
        payload = {**(extra or {}), "input": dict(inputs or {}), "context": dict(context or {})}
        if assistant_id is not None and assistant_id != template:
            payload["graph_id"] = template
        cron = Cron(
            assistant_id=assistant_id or template,
            schedule=schedule,
            thread_id=thread_id,
            timezone=timezone,
            payload=payload,
            metadata=dict(metadata or {}),
            enabled=enabled,
            end_time=end_time,
            created_by=created_by,
        )
        return await self.ledger.put_cron(cron, now=now)

    async def update(
        self, cron_id: str, changes: Mapping[str, Any], *, now: float | None = None
    ) -> Cron | None:
        """Change a schedule: ``schedule``, ``timezone``, ``end_time``, ``enabled``,
        ``metadata``, or what its runs start with (``input``, ``context``; checked as ``add``
        checks them). None when there is no such schedule."""
        cron = await self.ledger.cron(cron_id)
        if cron is None:
            return None
        fields = {k: v for k, v in changes.items() if k not in ("input", "context")}
        if "input" in changes or "context" in changes:
            payload = dict(cron.payload)
            for key in ("input", "context"):
                if key in changes:
                    payload[key] = dict(changes[key] or {})
            made = self.graphs.load(cron.template)
            self.graphs.check_inputs(made, payload.get("input") or {}, new_run=True)
            fields["payload"] = payload
        return await self.ledger.update_cron(cron_id, fields, now=now)

    async def fire_due(self, now: float | None = None) -> list[str]:
        """Fire every schedule due at ``now``: the ids of the queued runs made here (a due time
        another process fired, or one skipped, makes none)."""
        now = time.time() if now is None else now
        made: list[str] = []
        for cron in await self.ledger.due_crons(now):
            try:
                run_id = await self._fire(cron, now)
            except StagelineError as exc:  # one schedule's failure must not stop the others
                _log.warning("schedule %s could not fire: %s", cron.cron_id, exc)
                continue
            except Exception:  # nor a bug: the loops that call this recover runs too
                _log.exception("schedule %s could not fire", cron.cron_id)
                continue
            if run_id is not None:
                made.append(run_id)
        return made

    async def _fire(self, cron: Cron, now: float) -> str | None:
        try:
            following = cron.due_after(now)
        except InputError as exc:  # a time zone gone from this machine: stop, say why
            _log.warning("schedule %s stops: %s", cron.cron_id, exc)
            following = None
        run_id = cron.thread_id or new_run_id()
        if cron.thread_id is not None and await self._started(cron.thread_id):
            if await self.ledger.claim_fire(cron, run_id=run_id, next_run_at=following, now=now):
                _log.info("schedule %s: thread %s has run already", cron.cron_id, run_id)
            return None
        assistant = await self._assistant(cron)
        if assistant is None and cron.template != cron.assistant_id:  # deleting it deletes this
            _log.warning("schedule %s: its assistant %s is gone", cron.cron_id, cron.assistant_id)
            return None
        if not await self.ledger.claim_fire(cron, run_id=run_id, next_run_at=following, now=now):
            return None  # another process fired this due time
        payload = cron.payload
        context = {**(assistant.context if assistant else {}), **(payload.get("context") or {})}
        run = await self.lifecycle.create(
            cron.template, payload.get("input") or {}, run_id=run_id, context=context or None
        )
        lineage: dict[str, Any] = {"cron_id": cron.cron_id}
        if assistant is not None:  # as a run the assistant started over the API says
            lineage |= {
                "graph_id": assistant.graph_id,
                "assistant_id": assistant.assistant_id,
                "assistant_version": assistant.version,
            }
        found = await self.ledger.thread_meta(run_id)
        await self.ledger.set_thread_metadata(
            run_id, {**cron.metadata, **(found.metadata if found else {}), **lineage}
        )
        await self.ledger.add_api_run(
            ApiRun(
                api_run_id=str(uuid.uuid4()),
                run_id=run_id,
                assistant_id=cron.assistant_id,
                metadata={**cron.metadata, **lineage},
            )
        )
        _log.info("schedule %s fired run %s", cron.cron_id, run.run_id)
        return run.run_id

    async def _assistant(self, cron: Cron) -> Assistant | None:
        """The made assistant a schedule starts runs of (None: a template's own)."""
        if cron.template == cron.assistant_id:
            return None
        return await self.ledger.assistant(cron.assistant_id)

    async def _started(self, run_id: str) -> bool:
        try:
            await self.ledger.get_run(run_id)
        except RunNotFound:
            return False
        return True
