"""``langgraph_sdk``'s threads and runs calls against one served project, as LangGraph's server
answers them: counting, pruning, batches, cancelling many, deleting runs, joining streams, and a
``runs.wait`` that outlives a restart of the server (the SDK follows ``Location`` by itself).

``blog_post`` stops at its gate; ``async_nodes`` takes 0.5 s a node (ten nodes), leaving a trail;
``flaky`` fails at its second node.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient

from server_fixtures import Server, _factory


@pytest.fixture(scope="module")
def trail(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("trail") / "trail.txt"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, trail: Path) -> Iterator[Server]:
    started: list[Server] = []
    yield _factory(tmp_path_factory.mktemp("served"), started)(
        templates=("async_nodes.py", "flaky.py"),
        env={"STAGELINE_TEST_NODE_SLEEP": "0.5", "STAGELINE_TEST_TRAIL": str(trail)},
    )
    for one in started:
        one.kill()


def sdk(server: Server, scope: str = "decide") -> LangGraphClient:
    return get_client(url=server.url, api_key=server.tokens[scope])


def status_of(error: pytest.ExceptionInfo[httpx.HTTPStatusError]) -> int:
    return error.value.response.status_code


def wait_for(path: Path, text: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text():
            return
        time.sleep(0.05)
    raise AssertionError(f"{text!r} never appeared in {path}")


async def test_count_prune_batch_delete_and_cancel_many(server: Server, trail: Path) -> None:
    async with sdk(server) as client, sdk(server, "admin") as admin:
        first = (await client.threads.create(metadata={"batch": "no"}))["thread_id"]
        stopped = await client.runs.wait(first, "blog_post", input={"topic": "owls"})
        assert stopped["__interrupt__"]
        [run] = await client.runs.list(first)
        assert run["status"] == "success"  # it stopped at an interrupt: the thread is interrupted
        assert (await client.runs.get(first, run["run_id"]))["status"] == "success"
        assert (await client.threads.get(first))["status"] == "interrupted"

        batch = await client.runs.create_batch(
            [
                {"assistant_id": "blog_post", "input": {"topic": t}, "metadata": {"n": i}}
                for i, t in enumerate(("bees", "ants"))
            ]
        )
        assert [r["metadata"] for r in batch] == [{"n": 0}, {"n": 1}]
        assert len({r["thread_id"] for r in batch} | {first}) == 3
        for made in batch:
            await client.runs.join(made["thread_id"], made["run_id"])
        assert await client.threads.count() == 3
        assert await client.threads.count(status="interrupted") == 3
        assert await client.threads.count(metadata={"batch": "no"}) == 1
        assert await client.threads.count(values={"topic": "bees"}) == 1
        assert await client.threads.count(status="idle") == 0

        with pytest.raises(httpx.HTTPStatusError) as not_admin:
            await client.runs.delete(first, run["run_id"])
        assert status_of(not_admin) == 403
        await admin.runs.delete(first, run["run_id"])
        assert await client.runs.list(first) == []
        with pytest.raises(httpx.HTTPStatusError) as gone:
            await client.runs.get(first, run["run_id"])
        assert status_of(gone) == 404
        assert (await client.threads.get(first))["status"] == "interrupted"  # the thread stays

        busy = (await client.threads.create())["thread_id"]
        going = await client.runs.create(busy, "async_nodes", input={"seed": 1})
        wait_for(trail, f"start {busy} n2\n")
        with pytest.raises(httpx.HTTPStatusError) as still_going:
            await admin.runs.delete(busy, going["run_id"])
        assert status_of(still_going) == 409
        with pytest.raises(httpx.HTTPStatusError) as mixed:
            await admin.runs.cancel_many(thread_id=busy, status="running")
        assert status_of(mixed) == 422
        await admin.runs.cancel_many(thread_id=busy, run_ids=[going["run_id"]])
        await client.runs.join(busy, going["run_id"])
        assert (await client.runs.get(busy, going["run_id"]))["status"] == "interrupted"
        assert (await client.threads.get(busy))["status"] == "idle"

        other = (await client.threads.create())["thread_id"]
        going = await client.runs.create(other, "async_nodes", input={"seed": 1})
        wait_for(trail, f"start {other} n2\n")
        await admin.runs.cancel_many(status="all")
        await client.runs.join(other, going["run_id"])
        assert (await client.runs.get(other, going["run_id"]))["status"] == "interrupted"

        with pytest.raises(httpx.HTTPStatusError) as keep_latest:
            await admin.threads.prune([first], strategy="keep_latest")
        assert status_of(keep_latest) == 422
        with pytest.raises(httpx.HTTPStatusError) as prune_needs_admin:
            await client.threads.prune([first])
        assert status_of(prune_needs_admin) == 403
        pruned = await admin.threads.prune([first, busy, first, "no-such-thread"])
        assert pruned == {"pruned_count": 2}
        for thread_id in (first, busy):
            with pytest.raises(httpx.HTTPStatusError) as pruned_away:
                await client.threads.get(thread_id)
            assert status_of(pruned_away) == 404
        assert await client.threads.count() == 3


async def test_join_stream_sends_the_modes_the_run_was_started_with(
    server: Server, trail: Path
) -> None:
    async with sdk(server) as client:
        tid = (await client.threads.create())["thread_id"]
        started = await client.runs.create(tid, "async_nodes", input={"seed": 1})
        wait_for(trail, f"start {tid} n1\n")
        plain = [p async for p in client.runs.join_stream(tid, started["run_id"])]
        assert plain[0].event == "metadata" and plain[0].data["run_id"] == started["run_id"]
        assert {p.event for p in plain[1:]} == {"values"} and len(plain) > 2
        assert isinstance(plain[-1].data["value"], int)

        streamed = (await client.threads.create())["thread_id"]
        parts = client.runs.stream(
            streamed, "async_nodes", input={"seed": 1}, stream_mode=["updates"]
        )
        first = await anext(parts)
        assert first.event == "metadata"
        both = [
            p
            async for p in client.runs.join_stream(
                streamed, first.data["run_id"], stream_mode=["values", "updates"]
            )
        ]
        assert {p.event for p in both} == {"updates"}  # its own mode only, no metadata
        assert [p async for p in parts]  # the first stream goes on to its end


async def test_a_thread_stream_follows_its_runs(server: Server) -> None:
    async with sdk(server) as client:
        tid = (await client.threads.create())["thread_id"]
        parts: list[tuple[str, dict]] = []  # type: ignore[type-arg]
        joined = asyncio.Event()

        async def follow() -> None:
            async with contextlib.aclosing(await client.threads.join_stream(tid)) as stream:
                joined.set()
                async for part in stream:
                    parts.append((part.event, part.data))
                    if part.event == "metadata" and part.data.get("status") == "run_done":
                        return

        following = asyncio.create_task(follow())
        await joined.wait()
        await asyncio.sleep(0.5)  # the stream is open before the run starts
        run = await client.runs.create(tid, "blog_post", input={"topic": "owls"})
        await asyncio.wait_for(following, 60)
        events = [e for e, _ in parts]
        assert events[0] == "metadata" and parts[0][1]["run_id"] == run["run_id"]
        assert set(events[1:-1]) == {"values"} and "__interrupt__" in parts[-2][1]
        assert parts[-1][1] == {"status": "run_done", "run_id": run["run_id"]}
        with pytest.raises(httpx.HTTPStatusError) as bad_mode:
            async for _ in await client.threads.join_stream(tid, stream_mode="no_such_mode"):  # type: ignore[arg-type]
                pass
        assert status_of(bad_mode) == 422


async def _until_done(client: LangGraphClient, tid: str, after: str, run_id: str) -> list[Any]:
    """The thread's stream from ``Last-Event-ID`` ``after`` until run ``run_id`` is done."""
    parts = []
    stream = await client.threads.join_stream(tid, last_event_id=after)
    async with contextlib.aclosing(stream):  # type: ignore[type-var]
        async for part in stream:
            parts.append((part.event, part.data, part.id))
            if part.event == "metadata" and part.data == {"status": "run_done", "run_id": run_id}:
                return parts
    raise AssertionError(f"the stream ended before run {run_id} was done: {parts}")


async def test_a_thread_stream_goes_on_after_last_event_id(server: Server) -> None:
    async with sdk(server) as client:
        tid = (await client.threads.create())["thread_id"]
        await client.runs.wait(tid, "blog_post", input={"topic": "kelp"})  # to its gate
        [first] = await client.runs.list(tid)
        second = await client.runs.create(tid, "blog_post", command={"resume": "approve"})
        await client.runs.join(tid, second["run_id"])
        # Both runs have ended: from before the first's first event, the thread's stream
        # sends the rest of it, then the second run's, each event with its id.
        parts = await _until_done(client, tid, f"{first['run_id']}:0", second["run_id"])
        events = [e for e, _, _ in parts]
        ended = events.index("metadata")
        assert set(events[:ended]) == {"values"} and "__interrupt__" in parts[ended - 1][1]
        assert [i for _, _, i in parts[:ended]] == [
            f"{first['run_id']}:{n}" for n in range(1, ended + 1)
        ]
        assert parts[ended][1] == {"status": "run_done", "run_id": first["run_id"]}
        assert parts[ended + 1][1]["run_id"] == second["run_id"]  # its metadata: it starts
        assert parts[-2][1]["post_path"] and parts[-2][2].startswith(f"{second['run_id']}:")
        # From any event's id, the same events after it.
        again = await _until_done(client, tid, str(parts[1][2]), second["run_id"])
        assert again == parts[2:]
        with pytest.raises(httpx.HTTPStatusError) as bad_id:
            async for _ in await client.threads.join_stream(tid, last_event_id="no-number"):
                pass
        assert status_of(bad_id) == 422


async def test_history_pages_and_the_shapes_langgraph_sends(server: Server) -> None:
    async with sdk(server) as client:
        tid = (await client.threads.create())["thread_id"]
        await client.runs.wait(tid, "blog_post", input={"topic": "owls"})
        thread = await client.threads.get(tid)
        assert thread["error"] is None and thread["state_updated_at"]
        assert thread["config"]["configurable"]["graph_id"] == "blog_post"
        [interrupt] = [i for v in thread["interrupts"].values() for i in v]
        assert set(interrupt) <= {"id", "value", "response_schema"} and interrupt["id"]

        history = await client.threads.get_history(tid, limit=100)
        assert len(history) > 4
        for newer, older in itertools.pairwise(history):
            assert newer["checkpoint_id"] == newer["checkpoint"]["checkpoint_id"]
            assert newer["parent_checkpoint_id"] == older["checkpoint_id"]
            assert newer["parent_checkpoint"]["checkpoint_id"] == older["checkpoint_id"]
        assert history[-1]["parent_checkpoint_id"] is None
        state = await client.threads.get_state(tid)
        assert state["checkpoint_id"] == history[0]["checkpoint_id"]
        assert state["tasks"][0]["path"]

        middle = history[2]
        before = await client.threads.get_history(
            tid, before={"configurable": {"checkpoint_id": middle["checkpoint_id"]}}, limit=100
        )
        assert [h["checkpoint_id"] for h in before] == [h["checkpoint_id"] for h in history[3:]]
        two = await client.threads.get_history(tid, before=middle["checkpoint"], limit=2)
        assert [h["checkpoint_id"] for h in two] == [h["checkpoint_id"] for h in history[3:5]]
        steps = await client.threads.get_history(
            tid, before=middle["checkpoint"], metadata={"source": "loop"}, limit=100
        )
        assert steps and all(h["metadata"]["source"] == "loop" for h in steps)
        assert {h["checkpoint_id"] for h in steps} < {h["checkpoint_id"] for h in history[3:]}

        async with sdk(server, "admin") as admin:
            copy = await admin.threads.copy(tid)
        assert copy["status"] == "interrupted" and copy["values"] == thread["values"]
        copied = await client.threads.get_history(copy["thread_id"], limit=100)
        assert [h["checkpoint_id"] for h in copied] == [h["checkpoint_id"] for h in history]
        assert [h["values"] for h in copied] == [h["values"] for h in history]
        done = await client.runs.wait(copy["thread_id"], "blog_post", command={"resume": "approve"})
        assert done["post_path"] and (await client.threads.get(tid))["status"] == "interrupted"

        failed = (await client.threads.create())["thread_id"]
        ended = await client.runs.wait(failed, "flaky", input={"topic": "x"}, raise_error=False)
        assert "ok.flag" in ended["__error__"]["message"]
        broken = await client.threads.get(failed)
        assert broken["status"] == "error" and "ok.flag" in broken["error"]


@pytest.mark.filterwarnings("ignore:Request failed, attempting reconnect")
async def test_a_wait_cut_by_a_restart_is_joined_by_the_sdk_itself(
    server: Server, trail: Path
) -> None:
    async with sdk(server) as client:
        tid = (await client.threads.create())["thread_id"]
        waiting = asyncio.create_task(client.runs.wait(tid, "async_nodes", input={"seed": 3}))
        await asyncio.to_thread(wait_for, trail, f"end {tid} n3\n")
        for _ in range(3000):  # n3's step is committed: the thread stands before n4 or later
            ahead = (await client.threads.get_state(tid))["next"]
            if ahead and ahead[0] not in ("n1", "n2", "n3"):
                break
            await asyncio.sleep(0.02)
        server.kill()
        await asyncio.to_thread(server.start)
        done = await asyncio.wait_for(waiting, 120)
        assert isinstance(done["value"], int) and "__error__" not in done
        assert (await client.threads.get(tid))["status"] == "idle"
        [run] = await client.runs.list(tid)
        assert run["status"] == "success"
