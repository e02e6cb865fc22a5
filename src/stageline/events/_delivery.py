"""Asynchronous delivery to one sink: a bounded queue, one worker task, retries with backoff.

A run only ever pays for ``offer`` (a filter check and a ``put_nowait``). A sink that fails,
is slow or hangs fills its own queue; what does not fit is dropped and counted, never waited
for. Failures are logged at debug level with the sink's name (which holds no credentials),
never with the endpoint's URL or the exception text of an HTTP client.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from stageline.events._filters import ACCEPT_ALL, EventFilter
from stageline.events._redact import Redactor
from stageline.ledger.records import Event

__all__ = ["AsyncSink", "Delivery", "DeliveryError", "DeliveryPolicy", "DeliveryStats"]

_log = logging.getLogger("stageline.events")
_scrub = Redactor()


@runtime_checkable
class AsyncSink(Protocol):
    """A sink whose delivery does I/O; the bus gives it a queue and a worker of its own.

    ``deliver`` gets a batch of events in ``seq`` order per run and raises to ask for a retry
    (``DeliveryError(retryable=False)`` to give the batch up); ``name`` must hold no secret.
    """

    name: str

    async def deliver(self, events: Sequence[Event], **future_kwargs: Any) -> None: ...

    async def aclose(self, **future_kwargs: Any) -> None: ...


class DeliveryError(Exception):
    """A delivery attempt failed; ``reason`` is safe to log (no URL, no secret)."""

    def __init__(self, reason: str, *, retryable: bool = True, retry_after: float | None = None):
        super().__init__(reason)
        self.reason = reason
        self.retryable = retryable
        self.retry_after = retry_after


@dataclass(frozen=True, kw_only=True)
class DeliveryPolicy:
    """How one sink's events are queued and retried."""

    queue_size: int = 1000
    """Events waiting at most; more are dropped (and counted) rather than waited for."""
    batch: int = 20
    """Events handed to one ``deliver`` call at most."""
    linger: float = 0.0
    """Seconds to wait for more events before delivering a batch (fewer webhook calls)."""
    retries: int = 3
    """Attempts after the first before a batch is given up."""
    backoff: float = 0.5
    """First retry delay in seconds; doubled each retry, with jitter."""
    max_backoff: float = 30.0
    timeout: float = 10.0
    """Seconds one ``deliver`` call may take before it counts as failed."""

    def delay(self, attempt: int, hint: float | None = None) -> float:
        if hint is not None:
            return max(0.0, min(hint, self.max_backoff))
        base = min(self.max_backoff, self.backoff * 2.0**attempt)
        return base * (0.5 + random.random() / 2)


@dataclass(kw_only=True)
class DeliveryStats:
    """Counters for one sink: ``offered == delivered + dropped + queued`` once it is idle."""

    offered: int = 0
    delivered: int = 0
    dropped: int = 0
    """Events never delivered: queue full, given up after retries, or still queued at close."""
    failures: int = 0
    """Failed delivery attempts (each retry that fails counts)."""
    retries: int = 0
    queued: int = 0


class Delivery:
    """One sink's queue and worker; the worker starts on the first event, on the running loop."""

    def __init__(
        self,
        sink: AsyncSink,
        *,
        filter: EventFilter = ACCEPT_ALL,
        policy: DeliveryPolicy | None = None,
    ) -> None:
        self.sink = sink
        self.name = str(getattr(sink, "name", type(sink).__name__))
        self.filter = filter
        self.policy = policy or DeliveryPolicy()
        self.stats = DeliveryStats()
        self._queue: asyncio.Queue[Event] = asyncio.Queue(self.policy.queue_size)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    # -- the run's side: never blocks, never raises -------------------------------------------

    def offer(self, event: Event) -> None:
        if not self.filter.accepts(event):
            return
        self.stats.offered += 1
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if self._closed or (self._loop is None and running is None):
            self._drop(1, "the bus is closed" if self._closed else "no event loop is running")
            return
        if self._loop is None:
            self._start(running)  # type: ignore[arg-type]
        if running is self._loop:
            self._put(event)
        elif self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._put, event)  # published from another thread
        else:
            self._drop(1, "its event loop is closed")

    def _start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        # A clean context: the worker must not inherit the publishing node's context variables.
        self._task = loop.create_task(
            self._work(), name=f"stageline-sink:{self.name}", context=contextvars.Context()
        )

    def _put(self, event: Event) -> None:
        if self._closed:
            self._drop(1, "the bus is closed")
            return
        try:
            self._queue.put_nowait(event)
        except asyncio.QueueFull:
            self._drop(1, "its queue is full")
            return
        self.stats.queued = self._queue.qsize()

    def _drop(self, n: int, why: str) -> None:
        self.stats.dropped += n
        if self.stats.dropped == n or self.stats.dropped % 100 < n:  # the first, then every 100th
            _log.debug(
                "sink %s: dropped %d event(s): %s (%d so far)",
                self.name,
                n,
                why,
                self.stats.dropped,
            )

    # -- the worker's side ---------------------------------------------------------------------

    async def _work(self) -> None:
        queue, policy = self._queue, self.policy
        while True:
            batch = [await queue.get()]
            try:
                if policy.linger > 0 and policy.batch > 1 and queue.qsize() < policy.batch - 1:
                    await asyncio.sleep(policy.linger)
                while len(batch) < policy.batch and not queue.empty():
                    batch.append(queue.get_nowait())
                self.stats.queued = queue.qsize()
                await self._send(batch)
            except Exception:  # a bug in a sink must not stop its worker
                self.stats.dropped += len(batch)
                _log.debug("sink %s: worker error", self.name, exc_info=True)
            except asyncio.CancelledError:
                self.stats.dropped += len(batch)
                raise
            finally:
                for _ in batch:
                    queue.task_done()

    async def _send(self, batch: list[Event]) -> None:
        policy = self.policy
        for attempt in range(policy.retries + 1):
            try:
                await asyncio.wait_for(self.sink.deliver(batch), policy.timeout)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.stats.failures += 1
                retryable = getattr(exc, "retryable", True)
                last = attempt >= policy.retries or not retryable
                _log.debug(
                    "sink %s: delivery of %d event(s) failed (%s); try %d of %d%s",
                    self.name,
                    len(batch),
                    _why(exc, policy.timeout),
                    attempt + 1,
                    policy.retries + 1,
                    ", giving up" if last else "",
                )
                if last:
                    break
                self.stats.retries += 1
                await asyncio.sleep(policy.delay(attempt, getattr(exc, "retry_after", None)))
            else:
                self.stats.delivered += len(batch)
                return
        self.stats.dropped += len(batch)

    async def flush(self, timeout: float) -> bool:
        """Wait until every queued event was delivered or given up; False on timeout."""
        if self._task is None or self._task.done():
            return True
        try:
            await asyncio.wait_for(self._queue.join(), timeout)
        except TimeoutError:
            return False
        return True

    async def aclose(self, timeout: float) -> None:
        """Deliver what is queued within ``timeout``, drop the rest, then close the sink."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(timeout, 0.0)
        self._closed = True
        task = self._task
        if task is not None and not task.done():
            if timeout > 0:
                await self.flush(timeout)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        left = self._queue.qsize()
        while not self._queue.empty():
            self._queue.get_nowait()
            self._queue.task_done()
        if left:
            self._drop(left, "still queued when the bus closed")
        self.stats.queued = 0
        try:
            await asyncio.wait_for(self.sink.aclose(), max(deadline - loop.time(), 0.25))
        except Exception as exc:
            _log.debug("sink %s: close failed (%s)", self.name, _why(exc, timeout))


def _why(exc: BaseException, timeout: float) -> str:
    """A loggable reason: never an HTTP client's own message, which may carry the URL."""
    if isinstance(exc, DeliveryError):
        return exc.reason
    if isinstance(exc, TimeoutError):
        return f"no answer within {timeout:g}s"
    module = type(exc).__module__
    if module.startswith(("httpx", "httpcore", "urllib", "requests", "aiohttp")):
        return type(exc).__name__
    return f"{type(exc).__name__}: {_scrub.text(str(exc))[:200]}"
