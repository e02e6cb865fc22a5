"""A stream that joins a run another process advances polls the ledger with a watch of its own
(``ApiRuns.follower``); when the stream ends, or its client goes, that watch ends with it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from stageline.server.langgraph._stream import until_closed


async def _events(told: asyncio.Event) -> AsyncIterator[bytes]:
    yield b"first"
    told.set()
    await asyncio.Event().wait()  # the run goes on: no event comes for a long while
    yield b"never"


async def test_the_watch_is_cancelled_when_the_client_goes() -> None:
    watch = asyncio.ensure_future(asyncio.Event().wait())
    told = asyncio.Event()
    seen: list[bytes] = []

    async def client() -> None:
        async for event in until_closed(_events(told), watch):
            seen.append(event)

    reading = asyncio.ensure_future(client())
    await told.wait()
    reading.cancel()  # as Starlette does when the client disconnects
    with pytest.raises(asyncio.CancelledError):
        await reading
    assert seen == [b"first"]
    assert watch.cancelled()


async def test_the_watch_is_cancelled_when_the_generator_is_closed() -> None:
    watch = asyncio.ensure_future(asyncio.Event().wait())
    stream = until_closed(_events(asyncio.Event()), watch)
    assert await anext(stream) == b"first"
    await stream.aclose()
    await asyncio.sleep(0)
    assert watch.cancelled()


async def test_a_run_task_of_this_process_is_left_alone() -> None:
    """No watch (the run's own task here): nothing is cancelled; the events end as they do."""

    async def two() -> AsyncIterator[bytes]:
        yield b"a"
        yield b"b"

    assert [e async for e in until_closed(two(), None)] == [b"a", b"b"]
