"""Delivering from the ledger: each ``[[sinks]]`` sink reads what it has not acknowledged.

A ``Deliverer`` runs in every process that runs things (a foreground ``run``, a worker, the
server) and delivers what is due to each outbox sink: per run, in ``seq`` order, in batches,
under a claim in the ledger so that two processes never send one batch at once, moving the
sink's cursor once the endpoint said yes. A failure is retried with backoff (kept in the
ledger, so the next process honours it too); a process that exits waits for its sinks at most
a short bound, and whatever is left is delivered by the next one. Nothing is delivered twice to
a sink that acknowledged it, and nothing is skipped, except a batch an endpoint refuses for good
(HTTP 4xx) or one past ``retries`` where a table sets it: those are logged and counted.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from stageline.events._config import build_sinks
from stageline.events._delivery import AsyncSink, DeliveryPolicy, DeliveryStats, _why
from stageline.events._filters import ACCEPT_ALL
from stageline.events._redact import Redactor
from stageline.events._sink import SinkSpec
from stageline.ledger import Claim, LedgerStore, holder_is_dead, this_holder
from stageline.ledger.records import Event

__all__ = ["EXIT_TIMEOUT", "Deliverer"]

_log = logging.getLogger("stageline.events")

EXIT_TIMEOUT = 1.5
"""Seconds a process that exits gives its sinks by default; the rest waits in the ledger."""
POLL = 1.0
"""Seconds between two looks for events written by other processes."""
WATERMARK_EVERY = 30.0


@dataclass(kw_only=True)
class _Outlet:
    """One outbox sink, as one deliverer sees it."""

    spec: SinkSpec
    sink_id: str
    stats: DeliveryStats = field(default_factory=DeliveryStats)
    started_at: float | None = None
    watermark: float = 0.0
    marked_at: float = 0.0

    @property
    def sink(self) -> AsyncSink:
        return self.spec.sink  # type: ignore[return-value]

    @property
    def policy(self) -> DeliveryPolicy:
        return self.spec.policy or DeliveryPolicy()


class Deliverer:
    """Delivers the ledger's events to outbox sinks; ``start`` it, ``stop`` it, or call
    ``deliver_due`` from a loop of your own. The bus hands it committed events (``emit``)
    only to wake it up: what it delivers it reads from the ledger."""

    def __init__(
        self,
        ledger: LedgerStore,
        sinks: Iterable[SinkSpec],
        *,
        holder: str | None = None,
        poll: float = POLL,
        redactor: Redactor | None = None,
        unavailable: Mapping[str, str] | None = None,
    ) -> None:
        self.ledger = ledger
        self.holder = holder or this_holder()
        self.poll = poll
        self.redactor = redactor or Redactor()
        self.unavailable = dict(unavailable or {})
        """Sinks left out of this process (by id): why, e.g. a secret that is not set."""
        self._outlets: list[_Outlet] = []
        for spec in sinks:
            if not isinstance(spec.sink, AsyncSink):
                raise TypeError(
                    f"{type(spec.sink).__name__} cannot be delivered from the "
                    "outbox: it has no deliver()"
                )
            self.redactor.add(*spec.secrets, *getattr(spec.sink, "secrets", ()))
            base = spec.sink_id or str(getattr(spec.sink, "name", type(spec.sink).__name__))
            sink_id, number = base, 2
            while sink_id in {o.sink_id for o in self._outlets}:  # two tables alike
                sink_id, number = f"{base}#{number}", number + 1
            self._outlets.append(_Outlet(spec=spec, sink_id=sink_id))
        self._wakes = {o.sink_id: asyncio.Event() for o in self._outlets}
        self._tasks: list[asyncio.Task[None]] = []
        self._closing = False
        self._stopping = asyncio.Event()
        self._held: set[tuple[str, str]] = set()
        """(sink id, run id) claims this deliverer holds right now."""

    @classmethod
    def configured(
        cls,
        entries: Iterable[Mapping[str, Any]],
        ledger: LedgerStore,
        *,
        env: Mapping[str, str] | None = None,
        links: Any = None,
        public_url: str | None = None,
        **options: Any,
    ) -> Deliverer:
        """A deliverer for the outbox sinks of ``[[sinks]]`` entries (``Settings.sinks``). A
        sink whose secret is not set is left out, logged and listed in ``unavailable``: its
        events wait in the ledger for a process that has it. Sinks may use ``ledger`` (to
        name a run's template), ``links`` (decision links) and ``public_url`` (run pages)."""
        missing: list[tuple[str, str]] = []
        extras: dict[str, Any] = {"ledger": ledger}
        if links is not None:
            extras["links"] = links
        if public_url:
            extras["public_url"] = public_url
        specs = build_sinks(entries, env=env, which="outbox", missing=missing, extras=extras)
        for sink_id, why in missing:
            _log.warning(
                "sink %s does not deliver from this process: %s; its events wait in the ledger",
                sink_id,
                why,
            )
        return cls(ledger, specs, unavailable=dict(missing), **options)

    @property
    def sink_ids(self) -> list[str]:
        return [o.sink_id for o in self._outlets]

    def stats(self) -> dict[str, DeliveryStats]:
        """Each sink's counters in this process, by sink id."""
        return {o.sink_id: o.stats for o in self._outlets}

    @property
    def failures(self) -> int:
        return sum(o.stats.failures for o in self._outlets)

    # -- waking ---------------------------------------------------------------------------------

    def emit(self, event: Event, **future_kwargs: Any) -> None:
        """Called by the bus for each committed event: there is something to deliver."""
        for wake in self._wakes.values():
            wake.set()

    # -- delivering -------------------------------------------------------------------------------

    async def deliver_due(self) -> int:
        """One look at every sink: deliver one batch of each run that has one due; how many
        events were acknowledged (0 when nothing was due)."""
        if not self._outlets:
            return 0
        done = await asyncio.gather(*(self._pass(o) for o in self._outlets))
        return sum(done)

    async def register(self) -> None:
        """Record each sink in the ledger (the first time: it gets the events written from now
        on). ``start`` does this first; a run begun after it loses no event to a new sink."""
        for outlet in self._outlets:
            if outlet.started_at is None:
                start = await self.ledger.sink_start(outlet.sink_id)
                outlet.started_at, outlet.watermark = start.started_at, start.watermark

    async def _pass(self, outlet: _Outlet) -> int:
        if outlet.started_at is None:
            await self.register()
        now = time.time()
        if now - outlet.marked_at >= WATERMARK_EVERY:
            outlet.marked_at = now
            outlet.watermark = await self.ledger.advance_watermark(
                outlet.sink_id, since=outlet.watermark
            )
        delivered = 0
        for run_id in await self.ledger.due_runs(outlet.sink_id, since=outlet.watermark):
            delivered += await self._run(outlet, run_id)
        return delivered

    async def _run(self, outlet: _Outlet, run_id: str) -> int:
        """Claim, deliver and acknowledge the run's next batch for one sink."""
        key = (outlet.sink_id, run_id)
        claim = await self._claim(outlet, run_id, None)
        if isinstance(claim, str) and holder_is_dead(claim):  # its process is gone: take over
            claim = await self._claim(outlet, run_id, claim)
        if not isinstance(claim, Claim) or not claim.events:
            return 0
        self._held.add(key)  # kept if cancelled mid-delivery: ``stop`` lets go of it
        delivered = await self._send(outlet, claim)
        self._held.discard(key)
        return delivered

    async def _claim(self, outlet: _Outlet, run_id: str, steal: str | None) -> Claim | str | None:
        assert outlet.started_at is not None
        return await self.ledger.claim_events(
            outlet.sink_id,
            run_id,
            holder=self.holder,
            started_at=outlet.started_at,
            until=time.time() + 2 * outlet.policy.timeout + 10.0,
            limit=outlet.policy.batch,
            steal=steal,
        )

    async def _send(self, outlet: _Outlet, claim: Claim) -> int:
        policy, sink_id, run_id = outlet.policy, outlet.sink_id, claim.run_id
        last = claim.events[-1].seq
        wanted = [
            self.redactor.event(e)
            for e in claim.events
            if (outlet.spec.filter or ACCEPT_ALL).accepts(e)
        ]
        if wanted:
            try:
                await asyncio.wait_for(outlet.sink.deliver(wanted), policy.timeout)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                return await self._failed(outlet, claim, exc, len(wanted))
        # The endpoint has them: from here the claim is the acknowledgement's to end, even
        # if this task is cancelled meanwhile (``stop`` must not release it for a resend).
        self._held.discard((sink_id, run_id))
        if await asyncio.shield(
            self.ledger.ack_events(sink_id, run_id, holder=self.holder, seq=last)
        ):
            outlet.stats.delivered += len(wanted)
        else:
            _log.debug("sink %s: lost the claim on run %s before acknowledging", sink_id, run_id)
        return len(wanted) or 1

    async def _failed(self, outlet: _Outlet, claim: Claim, exc: Exception, n: int) -> int:
        policy, sink_id, run_id = outlet.policy, outlet.sink_id, claim.run_id
        outlet.stats.failures += 1
        attempt = claim.attempts + 1
        limit = outlet.spec.give_up_after
        if not getattr(exc, "retryable", True) or (limit is not None and attempt > limit):
            _log.warning(
                "sink %s: gave up %d event(s) of run %s after %d attempt(s) (%s)",
                sink_id,
                n,
                run_id,
                attempt,
                _why(exc, policy.timeout),
            )
            if await self.ledger.ack_events(
                sink_id, run_id, holder=self.holder, seq=claim.events[-1].seq
            ):
                outlet.stats.dropped += n
            return 0
        delay = policy.delay(min(claim.attempts, 30), getattr(exc, "retry_after", None))
        _log.debug(
            "sink %s: delivery of %d event(s) of run %s failed (%s); try %d, again in %.1fs",
            sink_id,
            n,
            run_id,
            _why(exc, policy.timeout),
            attempt,
            delay,
        )
        outlet.stats.retries += 1
        await self.ledger.release_events(
            sink_id,
            run_id,
            holder=self.holder,
            failed_upto=claim.events[-1].seq,
            retry_at=time.time() + delay,
        )
        return 0

    # -- running in the background -------------------------------------------------------------

    async def start(self) -> None:
        """Register the sinks, then deliver in the background on the running loop until
        ``stop``: one task per sink, so a slow endpoint holds up no other sink."""
        if self._tasks or not self._outlets:
            return
        self._closing = False
        self._stopping.clear()
        await self.register()
        loop = asyncio.get_running_loop()
        for outlet in self._outlets:
            self._tasks.append(
                loop.create_task(
                    self._loop(outlet),
                    name=f"stageline-deliver:{outlet.sink_id}",
                    context=contextvars.Context(),
                )
            )

    async def _loop(self, outlet: _Outlet) -> None:
        wake = self._wakes[outlet.sink_id]
        while True:
            wake.clear()
            try:
                delivered = await self._pass(outlet)
            except Exception:  # the database is away, or a sink is broken: look again later
                _log.debug("sink %s: a delivery pass failed", outlet.sink_id, exc_info=True)
                delivered = 0
            if delivered:
                continue  # more may be due at once
            if self._closing:
                return  # stopping, and nothing more was due
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), self.poll)
            if outlet.policy.linger > 0 and wake.is_set() and not self._closing:
                with contextlib.suppress(TimeoutError):  # a burst of events: fewer batches
                    await asyncio.wait_for(self._stopping.wait(), outlet.policy.linger)

    async def stop(self, timeout: float = EXIT_TIMEOUT) -> None:
        """Deliver what is due within ``timeout`` seconds in all, then stop and close the
        sinks. Whatever is not delivered by then stays in the ledger for the next process."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(timeout, 0.0)

        def left(least: float = 0.0) -> float:
            return max(deadline - loop.time(), least)

        tasks, self._tasks = self._tasks, []
        self._closing = True  # each sink's loop delivers what is due, then returns
        self._stopping.set()
        for wake in self._wakes.values():
            wake.set()
        if tasks:
            _, late = await asyncio.wait(tasks, timeout=left())
            for task in late:  # a slow endpoint: the rest waits in the ledger
                task.cancel()
            if late:
                await asyncio.wait(late, timeout=0.25)
        elif self._outlets:  # never started (``deliver_due`` was called instead)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    asyncio.gather(*(self._drain(o) for o in self._outlets)), left()
                )
        await self._let_go(left(0.25))  # claims of deliveries cut short
        if not self._outlets:
            return
        closing = [asyncio.ensure_future(o.sink.aclose()) for o in self._outlets]
        done, pending = await asyncio.wait(closing, timeout=left(0.25))
        for task in pending:
            task.cancel()
        for outlet, task in zip(self._outlets, closing, strict=True):
            if task in done and not task.cancelled() and task.exception() is not None:
                _log.debug(
                    "sink %s: close failed (%s)",
                    outlet.sink_id,
                    _why(task.exception() or Exception(), 0.25),
                )

    async def _drain(self, outlet: _Outlet) -> None:
        while True:
            try:
                if not await self._pass(outlet):
                    return
            except Exception:
                _log.debug("sink %s: a pass failed while stopping", outlet.sink_id, exc_info=True)
                return

    async def _let_go(self, timeout: float) -> None:
        """Release the claims a cancelled delivery held, so the next process need not wait
        for them to expire (the endpoint never answered: nothing was acknowledged)."""
        held, self._held = list(self._held), set()
        if not held:
            return
        releases = [
            asyncio.ensure_future(self.ledger.release_events(s, r, holder=self.holder))
            for s, r in held
        ]
        done, pending = await asyncio.wait(releases, timeout=timeout)
        for task in pending:
            task.cancel()
        if pending or any(t.exception() for t in done if not t.cancelled()):
            _log.debug("deliverer: could not release every claim; they expire on their own")
