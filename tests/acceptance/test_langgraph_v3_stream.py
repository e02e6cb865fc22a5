"""``langgraph_sdk``'s v3 thread streams (``client.threads.stream``, server-sent events) against
a real ``stageline serve``: a run started on a new thread streams its values, updates and
lifecycle to its end; an ``interrupt()`` and a stageline gate show as ``input.requested`` and are
answered with ``run.respond`` (the gate's decision audited as any other); the protocol's errors.

The project is ``tests/fixtures/compat_project`` (``plain``: two nodes; ``review``: stops at an
``interrupt()`` carrying an Agent Inbox request) beside the built-in ``blog_post`` (its gate).
"""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_client
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from server_fixtures import HTTP_TIMEOUT, Server, make_project

PROJECT = Path(__file__).parents[1] / "fixtures" / "compat_project"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    made = make_project(tmp_path_factory.mktemp("v3") / "project")
    shutil.copytree(PROJECT, made.project, dirs_exist_ok=True)
    try:
        yield made.start()
    finally:
        made.kill()


def sdk(server: Server, scope: str = "decide") -> Any:
    return get_client(url=server.url, api_key=server.tokens[scope])


async def until(done: Callable[[], bool]) -> None:
    """Wait until ``done()`` (the SDK updates a stream's interrupts as its watcher reads them)."""
    for _ in range(1200):  # a hang guard, not a deadline
        if done():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("never came")


def _http(server: Server, scope: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        base_url=server.url, headers=server.headers(scope), timeout=HTTP_TIMEOUT
    )


async def command(server: Server, tid: str, interrupt_id: str) -> dict[str, Any]:
    """The answer to an ``input.respond`` for ``interrupt_id``, sent as the SDK sends it."""
    async with _http(server, "decide") as http:
        params = {"interrupt_id": interrupt_id, "namespace": [], "response": 1}
        sent = await http.post(
            f"/threads/{tid}/commands", json={"id": 9, "method": "input.respond", "params": params}
        )
    assert sent.status_code == 200, sent.text
    return dict(sent.json())


async def first_event(server: Server, tid: str, channel: str) -> dict[str, Any]:
    """The first event on ``channel`` of the thread's latest run, read from its event stream."""
    async with (
        _http(server, "read") as http,
        http.stream("POST", f"/threads/{tid}/stream/events", json={"channels": [channel]}) as got,
    ):
        assert got.status_code == 200
        async for line in got.aiter_lines():
            if line.startswith("data: "):
                return dict(json.loads(line[6:]))
    raise AssertionError("the stream ended without an event")


async def test_a_run_on_a_new_thread_streams_its_values_updates_and_lifecycle(
    server: Server,
) -> None:
    async with sdk(server) as client, client.threads.stream(assistant_id="plain") as thread:
        started = await thread.run.start(input={"name": "Ann"})
        assert set(started) == {"run_id"}
        seen: list[tuple[str, Any]] = []
        async for event in thread.subscribe(["values", "updates", "lifecycle"]):
            data = event["params"]["data"]
            seen.append(
                (event["method"], data.get("event") if event["method"] == "lifecycle" else data)
            )
            if event["method"] == "lifecycle" and data["event"] == "completed":
                break
        assert await thread.output == {
            "name": "Ann",
            "greeting": "Hello, Ann",
            "shout": "HELLO, ANN",
        }
        tid = thread.thread_id
    assert seen[0] == ("lifecycle", "running") and seen[-1] == ("lifecycle", "completed")
    assert ("updates", {"greeting": "Hello, Ann"}) in seen
    assert ("updates", {"shout": "HELLO, ANN"}) in seen
    assert ("values", {"name": "Ann", "greeting": "Hello, Ann", "shout": "HELLO, ANN"}) in seen
    async with sdk(server, "read") as client:
        assert (await client.threads.get(tid))["status"] == "idle"


async def test_an_interrupt_is_requested_answered_and_the_run_ends(server: Server) -> None:
    async with sdk(server) as client:
        async with client.threads.stream(assistant_id="review") as thread:
            await thread.run.start(input={"email": "hello"})
            seen: list[str] = []
            async for event in thread.subscribe(["input", "lifecycle"]):
                seen.append(event["method"])
                if (
                    event["method"] == "lifecycle"
                    and event["params"]["data"]["event"] == "interrupted"
                ):
                    break
            await until(lambda: thread.interrupted)  # its own stream: the SDK's watcher
            [waiting] = thread.interrupts
            # The SDK ends every subscription once its watcher sees the interrupt, on a stream of
            # its own, so this one may stop before its copy of ``input.requested``; where both
            # come, the request comes first. The event itself, read from the thread's stream:
            assert seen[0] == "lifecycle" and seen[1:] in (
                [],
                ["input.requested"],
                ["input.requested", "lifecycle"],
            )
            requested = await first_event(server, thread.thread_id, "input")
            assert requested["method"] == "input.requested"
            assert requested["params"]["data"]["interrupt_id"] == waiting["interrupt_id"]
            [request] = requested["params"]["data"]["payload"]
            assert request["action_request"]["action"] == "send_email"
            state = await client.threads.get_state(thread.thread_id)
            assert [i["id"] for i in state["interrupts"]] == [waiting["interrupt_id"]]
            unknown = await command(server, thread.thread_id, "nope")
            assert unknown["error"] == "no_such_interrupt"
            assert await thread.run.respond([{"type": "ignore", "args": None}]) == {}
            assert await thread.output == {"email": "hello", "reply": ""}
            assert not thread.interrupted
        assert (await client.threads.get(thread.thread_id))["status"] == "idle"
        # Reattached to the finished thread: its end state; nothing waits any more.
        async with client.threads.stream(thread.thread_id, assistant_id="review") as again:
            assert await again.output == {"email": "hello", "reply": ""}
            late = await command(server, thread.thread_id, waiting["interrupt_id"])
            assert late["error"] == "no_such_run"


async def test_a_gate_is_decided_through_the_stream_and_audited(server: Server) -> None:
    async with sdk(server) as client, client.threads.stream(assistant_id="blog_post") as thread:
        await thread.run.start(input={"topic": "owls"})
        await until(lambda: thread.interrupted)
        [gate] = thread.interrupts
        assert gate["namespace"] == []
        await thread.run.respond("approve")
        final = await thread.output
        assert final["topic"] == "owls"
        tid = thread.thread_id
    shown = json.loads(server.cli("show", tid, "--json").stdout)
    assert shown["run"]["status"] == "succeeded"
    [decision] = shown["decisions"]
    assert (decision["actor"], decision["response"]["decision"]) == ("decider", "approve")


async def test_commands_and_streams_answer_errors_as_the_protocol_says(server: Server) -> None:
    async with _http(server, "decide") as http:
        async with sdk(server) as client:
            tid = (await client.threads.create())["thread_id"]

        async def send(body: Any) -> httpx.Response:
            return await http.post(f"/threads/{tid}/commands", json=body)

        bad = await send({"method": "run.start"})
        assert bad.status_code == 400 and bad.json()["error"] == "invalid_argument"
        for body, code in [
            ({"id": 1, "method": "bogus"}, "unknown_command"),
            ({"id": 2, "method": "run.start", "params": {}}, "invalid_argument"),
            (
                {"id": 3, "method": "run.start", "params": {"assistant_id": "nosuch"}},
                "unknown_error",
            ),
            ({"id": 4, "method": "input.respond", "params": {}}, "invalid_argument"),
            ({"id": 5, "method": "input.respond", "params": {"interrupt_id": "x"}}, "no_such_run"),
            ({"id": 6, "method": "subscription.subscribe", "params": {}}, "not_supported"),
            (
                {
                    "id": 7,
                    "method": "run.start",
                    "params": {
                        "assistant_id": "plain",
                        "config": {"configurable": {"checkpoint_id": "x"}},
                    },
                },
                "not_supported",
            ),
            (
                {"id": 8, "method": "input.respond", "params": {"interrupt_id": "x", "goto": "a"}},
                "not_supported",
            ),
        ]:
            answer = await send(body)
            assert answer.status_code == 200, answer.text
            assert answer.json()["type"] == "error" and answer.json()["error"] == code
            assert answer.json()["id"] == body["id"]
        wrong = await http.post(f"/threads/{tid}/stream/events", json={"channels": ["bogus"]})
        assert wrong.status_code == 400 and "bogus" in wrong.json()["detail"]
        missing = "00000000-0000-4000-8000-000000000000"
        gone = await http.post(f"/threads/{missing}/stream/events", json={"channels": ["values"]})
        assert gone.status_code == 404
        anonymous = await http.post(
            f"/threads/{tid}/commands",
            json={"id": 1, "method": "run.start"},
            headers={"Authorization": ""},
        )
        assert anonymous.status_code == 401
    async with sdk(server, "read") as reader, reader.threads.stream(assistant_id="plain") as thread:
        with pytest.raises(httpx.HTTPStatusError) as refused:
            await thread.run.start(input={"name": "x"})
        assert refused.value.response.status_code == 403


async def test_the_websocket_transport_streams_the_same(server: Server) -> None:
    """The SDK sends commands over HTTP and opens its event streams as WebSockets; its
    handshake carries only the stream's own headers, so the token goes there."""
    token = {"x-api-key": server.tokens["decide"]}
    client = sdk(server)
    async with client:
        async with client.threads.stream(
            assistant_id="review", transport="websocket", headers=token
        ) as thread:
            await thread.run.start(input={"email": "ws"})
            await until(lambda: thread.interrupted)
            assert [i["namespace"] for i in thread.interrupts] == [[]]
            await thread.run.respond([{"type": "accept", "args": None}])
            assert await thread.output == {"email": "ws", "reply": "Thanks for: ws"}
        async with client.threads.stream(
            assistant_id="plain", transport="websocket", headers=token
        ) as thread:
            await thread.run.start(input={"name": "ws"})
            seen = []
            async for event in thread.subscribe(["values", "lifecycle"]):
                seen.append(event["method"])
                if (
                    event["method"] == "lifecycle"
                    and event["params"]["data"]["event"] == "completed"
                ):
                    break
            assert seen[0] == "lifecycle" and "values" in seen
        async with client.threads.stream(assistant_id="plain", transport="websocket") as bare:
            await bare.run.start(
                input={"name": "x"}
            )  # commands go over HTTP, with the client's key
            with pytest.raises(Exception) as refused:
                await bare.output
    assert "4401" in repr(refused.value)


async def test_a_websocket_takes_commands_and_subscriptions_itself(server: Server) -> None:
    async with sdk(server) as client:
        tid = (await client.threads.create())["thread_id"]
    url = server.url.replace("http://", "ws://") + f"/threads/{tid}/stream/events"
    read_only = {"x-api-key": server.tokens["read"]}
    async with connect(url, additional_headers={"x-api-key": server.tokens["decide"]}) as socket:
        await socket.send(
            json.dumps(
                {
                    "id": 1,
                    "method": "subscription.subscribe",
                    "params": {"channels": ["lifecycle", "values"]},
                }
            )
        )
        subscribed = json.loads(await socket.recv())
        assert subscribed["type"] == "success" and subscribed["result"]["subscription_id"]
        await socket.send(
            json.dumps(
                {
                    "id": 2,
                    "method": "run.start",
                    "params": {"assistant_id": "plain", "input": {"name": "Bo"}},
                }
            )
        )
        frames = []
        while not any(
            f.get("params", {}).get("data", {}).get("event") == "completed" for f in frames
        ):
            frames.append(json.loads(await socket.recv()))
        [started] = [f for f in frames if f.get("id") == 2]
        assert started["type"] == "success" and "run_id" in started["result"]
        events = [f for f in frames if f.get("type") == "event"]
        assert {e["method"] for e in events} == {"lifecycle", "values"}
        await socket.send(
            json.dumps(
                {
                    "id": 3,
                    "method": "subscription.unsubscribe",
                    "params": {"subscription_id": "nope"},
                }
            )
        )
        assert json.loads(await socket.recv())["error"] == "no_such_subscription"
        await socket.send("not json")
        assert json.loads(await socket.recv())["error"] == "invalid_argument"
    async with connect(url, additional_headers=read_only) as socket:
        await socket.send(
            json.dumps({"id": 1, "method": "run.start", "params": {"assistant_id": "plain"}})
        )
        assert json.loads(await socket.recv())["error"] == "permission_denied"
    missing = url.replace(tid, "00000000-0000-4000-8000-000000000000")
    async with connect(missing, additional_headers=read_only) as socket:
        with pytest.raises(ConnectionClosed) as closed:
            await socket.recv()
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 4404
