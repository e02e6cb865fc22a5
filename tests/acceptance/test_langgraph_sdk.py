"""The official ``langgraph_sdk`` drives a running ``stageline serve``, unchanged, over loopback.

Assistants are the templates, threads are runs, a LangGraph run is one advance (the start, each
resume); ``blog_post`` stops at its ``editor_approval`` gate, ``sdlc`` asks its ``clarify``
question set (offline, by fixed rules).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_client, get_sync_client
from langgraph_sdk.client import LangGraphClient

from server_fixtures import Server, http_post


@pytest.fixture
def server(serve_project: Callable[..., Server]) -> Server:
    return serve_project()


def sdk(server: Server, scope: str = "decide") -> LangGraphClient:
    return get_client(url=server.url, api_key=server.tokens[scope])


def shown(server: Server, run_id: str) -> dict[str, Any]:
    return dict(json.loads(server.cli("show", run_id, "--json").stdout))


def status_of(error: pytest.ExceptionInfo[httpx.HTTPStatusError]) -> int:
    return error.value.response.status_code


async def test_the_assistants_are_the_templates(server: Server) -> None:
    async with sdk(server, "read") as client:
        found = await client.assistants.search()
        names = {a["assistant_id"] for a in found}
        assert {"blog_post", "sdlc"} <= names
        assert all(a["graph_id"] == a["assistant_id"] for a in found)
        assert [a["assistant_id"] for a in await client.assistants.search(graph_id="sdlc")] == [
            "sdlc"
        ]
        one = await client.assistants.get("blog_post")
        assert one["name"] == "blog_post" and one["description"]
        graph = await client.assistants.get_graph("blog_post")
        ids = {n["id"] for n in graph["nodes"]}
        assert {"research", "draft", "editor_approval", "publish"} <= ids
        assert {"source": "aggregate", "target": "editor_approval"} in [
            {"source": e["source"], "target": e["target"]} for e in graph["edges"]
        ]
        schemas = await client.assistants.get_schemas("blog_post")
        assert schemas["graph_id"] == "blog_post"
        assert {"topic", "draft", "reviews"} <= set(schemas["state_schema"]["properties"])
        assert schemas["state_schema"]["properties"]["topic"] == {"type": "string"}
        for key in ("input_schema", "output_schema"):  # a template's are its state's
            assert set(schemas[key]["properties"]) == set(schemas["state_schema"]["properties"])
        with pytest.raises(httpx.HTTPStatusError) as missing:
            await client.assistants.get("no_such_template")
        assert status_of(missing) == 404


async def test_a_gate_waits_is_shown_resumed_by_command_and_joined(server: Server) -> None:
    async with sdk(server) as client:
        thread = await client.threads.create(metadata={"team": "content", "n": 7})
        tid = thread["thread_id"]
        assert thread["status"] == "idle" and thread["metadata"] == {"team": "content", "n": 7}
        stopped = await client.runs.wait(tid, "blog_post", input={"topic": "owls"})
        assert stopped["topic"] == "owls" and stopped["draft"]
        [interrupt] = stopped["__interrupt__"]
        assert interrupt["value"]["gate"] == "editor_approval"

        got = await client.threads.get(tid)
        assert got["status"] == "interrupted"
        assert got["metadata"]["team"] == "content" and got["metadata"]["graph_id"] == "blog_post"
        assert [i["id"] for v in got["interrupts"].values() for i in v] == [interrupt["id"]]
        state = await client.threads.get_state(tid)
        assert state["next"] == ["editor_approval"]
        assert [i["id"] for i in state["interrupts"]] == [interrupt["id"]]
        [task] = state["tasks"]
        assert task["name"] == "editor_approval"
        assert task["interrupts"][0]["value"]["show"]["draft"] == stopped["draft"]
        assert state["values"]["topic"] == "owls"
        [first] = await client.runs.list(tid)
        assert first["status"] == "success" and first["assistant_id"] == "blog_post"

        resumed = await client.runs.create(tid, "blog_post", command={"resume": "approve"})
        assert resumed["status"] == "pending" and resumed["thread_id"] == tid
        done = await client.runs.join(tid, resumed["run_id"])
        assert done["post_path"] and "__interrupt__" not in done
        assert (await client.runs.get(tid, resumed["run_id"]))["status"] == "success"
        assert [r["status"] for r in await client.runs.list(tid)] == ["success", "success"]
        assert (await client.threads.get(tid))["status"] == "idle"
        assert (await client.threads.get_state(tid))["next"] == []

        history = await client.threads.get_history(tid, limit=100)
        steps = [h["metadata"]["step"] for h in history]
        assert steps == sorted(steps, reverse=True) and steps[-1] == -1
        assert any(h["next"] == ["editor_approval"] for h in history)
        assert len(await client.threads.get_history(tid, limit=2)) == 2
        [third] = await client.threads.get_history(tid, metadata={"step": 3})
        assert third["metadata"]["step"] == 3
        assert await client.threads.get_history(tid, metadata={"a'b; --": 1}) == []
        at = next(h for h in history if h["next"] == ["draft"])
        past = await client.threads.get_state(tid, checkpoint_id=at["checkpoint"]["checkpoint_id"])
        assert past["next"] == ["draft"] and "draft" not in past["values"]

        other = await client.threads.create(metadata={"team": "other"})
        found = await client.threads.search(metadata={"team": "content"})
        assert [t["thread_id"] for t in found] == [tid]
        assert tid in [t["thread_id"] for t in await client.threads.search(status="idle")]
        assert other["thread_id"] in [
            t["thread_id"]
            for t in await client.threads.search(metadata={"team": "other"}, status="idle")
        ]
        assert await client.threads.search(metadata={"team": "content"}, status="interrupted") == []

    [decision] = shown(server, tid)["decisions"]
    assert (decision["actor"], decision["response"]["decision"]) == ("decider", "approve")


async def test_stream_updates_then_values(server: Server) -> None:
    async with sdk(server) as client:
        tid = (await client.threads.create())["thread_id"]
        parts = [
            p
            async for p in client.runs.stream(
                tid, "blog_post", input={"topic": "bees"}, stream_mode="updates"
            )
        ]
        assert parts[0].event == "metadata" and parts[0].data["run_id"]
        updates = [p.data for p in parts[1:]]
        assert {p.event for p in parts[1:]} == {"updates"}
        nodes = [next(iter(u)) for u in updates]
        assert nodes[:3] == ["research", "outline", "draft"]
        assert set(nodes[3:5]) == {"critic_a", "critic_b"} and nodes[5] == "aggregate"
        assert updates[2]["draft"]["draft"] and "score" in updates[5]["aggregate"]
        assert nodes[-1] == "__interrupt__"
        assert updates[-1]["__interrupt__"][0]["value"]["gate"] == "editor_approval"
        assert (await client.threads.get(tid))["status"] == "interrupted"

        parts = [
            p
            async for p in client.runs.stream(
                tid, "blog_post", command={"resume": "approve"}, stream_mode=["values", "updates"]
            )
        ]
        events = [p.event for p in parts]
        assert events[0] == "metadata" and {"values", "updates"} <= set(events)
        resumed = [next(iter(p.data)) for p in parts if p.event == "updates"]
        assert resumed == ["editor_approval", "publish"]
        values = [p.data for p in parts if p.event == "values"]
        assert values[-1]["post_path"] and values[-1]["topic"] == "bees"
        assert (await client.threads.get(tid))["status"] == "idle"
        assert [r["status"] for r in await client.runs.list(tid)] == ["success", "success"]

        other = (await client.threads.create())["thread_id"]
        started = await client.runs.create(other, "blog_post", input={"topic": "wasps"})
        joined = [p async for p in client.runs.join_stream(other, started["run_id"])]
        assert joined[0].event == "metadata" and joined[0].data["run_id"] == started["run_id"]
        assert joined[-1].event == "values" and "__interrupt__" in joined[-1].data
        # Asked for updates, a run started in values mode sends none (as LangGraph's join).
        assert [
            p
            async for p in client.runs.join_stream(other, started["run_id"], stream_mode="updates")
        ] == []


async def test_a_question_set_is_answered_by_command(server: Server) -> None:
    async with sdk(server) as client:
        tid = (await client.threads.create())["thread_id"]
        asked = await client.runs.wait(tid, "sdlc", input={"task": "add a login page"})
        [interrupt] = asked["__interrupt__"]
        assert interrupt["value"]["kind"] == "question"
        questions = interrupt["value"]["question_set"]["questions"]
        assert [q["id"] for q in questions] == ["scope", "priority", "done_when"]
        state = await client.threads.get_state(tid)
        assert state["interrupts"][0]["id"] == interrupt["id"]
        assert state["tasks"][0]["name"] == "clarify"
        assert (await client.threads.get(tid))["status"] == "interrupted"

        with pytest.raises(httpx.HTTPStatusError) as bad:
            await client.runs.wait(
                tid, "sdlc", command={"resume": {"scope": "the login form", "priority": "someday"}}
            )
        assert status_of(bad) == 422 and "priority" in bad.value.response.text
        with pytest.raises(httpx.HTTPStatusError) as wrong_kind:
            await client.runs.wait(tid, "sdlc", command={"resume": "approve"})
        assert status_of(wrong_kind) == 422
        assert len(await client.runs.list(tid)) == 1  # refused requests leave no run behind
        assert (await client.threads.get(tid))["status"] == "interrupted"

        answers = {"scope": "the login form, a session cookie and logout", "priority": "high"}
        run = await client.runs.create(tid, "sdlc", command={"resume": {interrupt["id"]: answers}})
        await client.runs.join(tid, run["run_id"])
        after = await client.threads.get_state(tid)
        assert after["values"]["answers"]["priority"] == "high"
        assert (await client.runs.get(tid, run["run_id"]))["status"] == "success"

    [question] = shown(server, tid)["questions"]
    assert question["actor"] == "decider"
    assert question["response"]["answers"]["scope"] == answers["scope"]


async def test_changes_update_state_copy_and_cancel(server: Server) -> None:
    async with sdk(server) as client, sdk(server, "admin") as admin:
        tid = (await client.threads.create())["thread_id"]
        await client.runs.wait(tid, "blog_post", input={"topic": "ants"})
        again = await client.runs.wait(
            tid, "blog_post", command={"resume": {"decision": "changes", "note": "make it shorter"}}
        )
        assert again["feedback"] == "make it shorter" and again["__interrupt__"]

        before = await client.threads.get_state(tid)
        for values in ({"audience": "children"}, {"no_such_key": 1}):  # decided, never edited
            with pytest.raises(httpx.HTTPStatusError) as refused:
                await client.threads.update_state(tid, values)
            assert status_of(refused) == 409
            assert "editor_approval" in refused.value.response.json()["detail"]
        state = await client.threads.get_state(tid)
        assert state["values"] == before["values"] and state["next"] == ["editor_approval"]
        assert state["checkpoint"] == before["checkpoint"]
        assert (await client.threads.get(tid))["status"] == "interrupted"

        with pytest.raises(httpx.HTTPStatusError) as denied:
            await client.threads.copy(tid)
        assert status_of(denied) == 403

        other = (await client.threads.create(metadata={"kind": "to copy"}))["thread_id"]
        await client.runs.wait(other, "blog_post", input={"topic": "moths"})
        copy = await admin.threads.copy(other)
        assert copy["thread_id"] != other and copy["status"] == "interrupted"
        assert copy["values"]["topic"] == "moths" and copy["metadata"]["kind"] == "to copy"
        assert shown(server, copy["thread_id"])["lineage"]["forked_from"]["parent_run_id"] == other

        [run] = [r for r in await client.runs.list(other)]
        with pytest.raises(httpx.HTTPStatusError) as not_admin:
            await client.runs.cancel(other, run["run_id"])
        assert status_of(not_admin) == 403
        await admin.runs.cancel(other, run["run_id"])
        assert (await client.threads.get(other))["status"] == "idle"
        assert shown(server, other)["run"]["status"] == "cancelled"
        # It had stopped at the gate (a success); the cancel ended the thread's run, not it.
        assert (await client.runs.get(other, run["run_id"]))["status"] == "success"
        with pytest.raises(httpx.HTTPStatusError) as twice:
            await admin.runs.cancel(other, run["run_id"])
        assert status_of(twice) == 404  # as LangGraph's: nothing of a finished thread to cancel
        assert (await client.threads.get(copy["thread_id"]))["status"] == "interrupted"


async def test_a_finished_thread_is_not_changed_but_forked_by_stagelines_api(
    server: Server,
) -> None:
    async with sdk(server) as client, sdk(server, "admin") as admin:
        tid = (await client.threads.create())["thread_id"]
        await client.runs.wait(tid, "blog_post", input={"topic": "cats"})
        finished = await client.runs.wait(tid, "blog_post", command={"resume": "approve"})
        history = await client.threads.get_history(tid, limit=100)
        at_draft = next(h for h in history if h["next"] == ["draft"])
        for changed in (
            admin.threads.update_state(tid, {"topic": "dogs"}, checkpoint=at_draft["checkpoint"]),
            admin.threads.update_state(tid, {"topic": "dogs"}),
        ):
            with pytest.raises(httpx.HTTPStatusError) as final:
                await changed
            assert status_of(final) == 409
            assert "a finished run cannot change" in final.value.response.json()["detail"]
        assert len(await client.threads.get_history(tid, limit=100)) == len(history)

        forked = admin.http.post(  # stageline's own fork, named by the 409
            f"/v1/runs/{tid}/fork",
            json={
                "checkpoint_id": at_draft["checkpoint"]["checkpoint_id"],
                "changes": {"topic": "dogs"},
                "wait": True,
            },
        )
        fork = (await forked)["run"]["run_id"]
        assert fork != tid
        state = await client.threads.get_state(fork)
        assert state["values"]["topic"] == "dogs" and state["next"] == ["editor_approval"]
        assert "dogs" in state["values"]["draft"].lower()  # the redraft is on the new topic
        original = await client.threads.get_state(tid)
        assert original["values"] == {k: v for k, v in finished.items()}
        assert original["values"]["topic"] == "cats"
    lineage = shown(server, fork)["lineage"]["forked_from"]
    assert lineage["parent_run_id"] == tid
    assert lineage["parent_checkpoint_id"] == at_draft["checkpoint"]["checkpoint_id"]


async def test_errors_are_what_the_sdk_expects(server: Server) -> None:
    async with sdk(server) as client, sdk(server, "admin") as admin:
        with pytest.raises(httpx.HTTPStatusError) as missing:
            await client.threads.get("no-such-thread")
        assert status_of(missing) == 404 and "not found" in missing.value.response.json()["detail"]
        with pytest.raises(httpx.HTTPStatusError) as missing_state:
            await client.threads.get_state("no-such-thread")
        assert status_of(missing_state) == 404
        with pytest.raises(httpx.HTTPStatusError) as no_assistant:
            await client.runs.wait(None, "no_such_template", input={})
        assert status_of(no_assistant) == 404
        with pytest.raises(httpx.HTTPStatusError) as bad_input:
            await client.runs.wait(None, "blog_post", input={"topik": "x"})
        assert status_of(bad_input) == 422 and "topik" in bad_input.value.response.text
        assert await client.threads.search(limit=100) == []  # nothing was left behind

        tid = (await client.threads.create(thread_id="my-thread-1"))["thread_id"]
        assert tid == "my-thread-1"
        with pytest.raises(httpx.HTTPStatusError) as taken:
            await client.threads.create(thread_id=tid)
        assert status_of(taken) == 409
        same = await client.threads.create(thread_id=tid, if_exists="do_nothing")
        assert same["thread_id"] == tid
        with pytest.raises(httpx.HTTPStatusError) as bad_id:
            await client.threads.create(thread_id="../etc/passwd")
        assert status_of(bad_id) == 422
        with pytest.raises(httpx.HTTPStatusError) as nothing_to_resume:
            await client.runs.wait(tid, "blog_post", command={"resume": "approve"})
        assert status_of(nothing_to_resume) == 409

        await client.runs.wait(tid, "blog_post", input={"topic": "x"})
        with pytest.raises(httpx.HTTPStatusError) as new_input:
            await client.runs.wait(tid, "blog_post", input={"topic": "y"})
        assert status_of(new_input) == 409 and "resume" in new_input.value.response.text
        with pytest.raises(httpx.HTTPStatusError) as other_assistant:
            await client.runs.wait(tid, "sdlc", command={"resume": "approve"})
        assert status_of(other_assistant) == 409
        with pytest.raises(httpx.HTTPStatusError) as both:
            await client.runs.wait(
                tid, "blog_post", input={"topic": "y"}, command={"resume": "approve"}
            )
        assert status_of(both) == 422
        with pytest.raises(httpx.HTTPStatusError) as no_checkpoint:
            await client.threads.get_state(tid, checkpoint_id="no-such-checkpoint")
        assert status_of(no_checkpoint) == 404
        with pytest.raises(httpx.HTTPStatusError) as bad_decision:
            await client.runs.wait(tid, "blog_post", command={"resume": "maybe"})
        assert status_of(bad_decision) == 422
        with pytest.raises(httpx.HTTPStatusError) as no_note:
            await client.runs.wait(tid, "blog_post", command={"resume": {"decision": "changes"}})
        assert status_of(no_note) == 422
        with pytest.raises(httpx.HTTPStatusError) as not_parked:
            await client.runs.wait(tid, "blog_post", command={"resume": "takeover"})
        assert status_of(not_parked) == 409 and "not a park gate" in not_parked.value.response.text

        rejected = await client.runs.create(tid, "blog_post", command={"resume": "reject"})
        await client.runs.join(tid, rejected["run_id"])
        assert (await client.runs.get(tid, rejected["run_id"]))["status"] == "success"
        assert (await client.threads.get(tid))["status"] == "idle"
        assert shown(server, tid)["run"]["status"] == "rejected"
        # As LangGraph's: a run on a finished thread has nothing to do (a resume with nothing
        # waiting is ignored) and succeeds, the thread unchanged; input is refused.
        before = await client.threads.get_state(tid)
        ignored = await client.runs.wait(tid, "blog_post", command={"resume": "approve"})
        assert ignored == before["values"]
        again = await client.runs.create(tid, "blog_post")
        await client.runs.join(tid, again["run_id"])
        assert (await client.runs.get(tid, again["run_id"]))["status"] == "success"
        assert (await client.threads.get_state(tid))["checkpoint"] == before["checkpoint"]
        assert shown(server, tid)["run"]["status"] == "rejected"
        with pytest.raises(httpx.HTTPStatusError) as strict:
            await client.runs.wait(
                tid, "blog_post", command={"resume": "approve"}, strict_resume=True
            )
        assert status_of(strict) == 409 and "no interrupt waits" in strict.value.response.text
        with pytest.raises(httpx.HTTPStatusError) as finished:
            await client.runs.wait(tid, "blog_post", input={"topic": "again"})
        assert status_of(finished) == 409
        assert "a finished run cannot change" in finished.value.response.text
        with pytest.raises(httpx.HTTPStatusError) as missing_run:
            await client.runs.get(tid, "no-such-run")
        assert status_of(missing_run) == 404

        with pytest.raises(httpx.HTTPStatusError) as not_admin:
            await client.threads.delete(tid)
        assert status_of(not_admin) == 403
        await admin.threads.delete(tid)
        with pytest.raises(httpx.HTTPStatusError) as gone:
            await client.threads.get(tid)
        assert status_of(gone) == 404


async def test_tokens_and_scopes(server: Server) -> None:
    async with get_client(url=server.url, api_key="sl_not_a_token") as stranger:
        with pytest.raises(httpx.HTTPStatusError) as unknown:
            await stranger.assistants.search()
        assert status_of(unknown) == 401
    answer = http_post(f"{server.url}/threads/search", json={})
    assert answer.status_code == 401 and "token" in answer.json()["detail"]
    async with sdk(server, "read") as reader:
        assert await reader.threads.search() == []
        with pytest.raises(httpx.HTTPStatusError) as read_only:
            await reader.runs.wait(None, "blog_post", input={"topic": "x"})
        assert status_of(read_only) == 403
        with pytest.raises(httpx.HTTPStatusError) as read_only_create:
            await reader.threads.create()
        assert status_of(read_only_create) == 403
        assert await reader.threads.search() == []


def test_the_synchronous_client(server: Server) -> None:
    with get_sync_client(url=server.url, api_key=server.tokens["decide"]) as client:
        assert "blog_post" in {a["assistant_id"] for a in client.assistants.search()}
        tid = client.threads.create(metadata={"via": "sync"})["thread_id"]
        stopped = client.runs.wait(tid, "blog_post", input={"topic": "sync"})
        assert stopped["__interrupt__"][0]["value"]["gate"] == "editor_approval"
        assert client.threads.get(tid)["status"] == "interrupted"
        run = client.runs.create(tid, "blog_post", command={"resume": "approve"})
        assert client.runs.join(tid, run["run_id"])["post_path"]
        assert client.threads.get(tid)["status"] == "idle"
        assert [t["thread_id"] for t in client.threads.search(metadata={"via": "sync"})] == [tid]


async def test_the_same_on_postgres(
    serve_project: Callable[..., Server], postgres_url: str
) -> None:
    server = serve_project(database_url=postgres_url)
    async with sdk(server) as client:
        tid = (await client.threads.create(metadata={"db": "postgres"}))["thread_id"]
        stopped = await client.runs.wait(tid, "blog_post", input={"topic": "elephants"})
        assert stopped["__interrupt__"][0]["value"]["gate"] == "editor_approval"
        assert (await client.threads.get(tid))["status"] == "interrupted"
        async with sdk(server, "admin") as admin:  # the copy keeps the whole history
            copy = (await admin.threads.copy(tid))["thread_id"]
        assert [h["checkpoint_id"] for h in await client.threads.get_history(copy, limit=50)] == [
            h["checkpoint_id"] for h in await client.threads.get_history(tid, limit=50)
        ]
        parts = [
            p
            async for p in client.runs.stream(
                tid, "blog_post", command={"resume": "approve"}, stream_mode="updates"
            )
        ]
        assert [next(iter(p.data)) for p in parts[1:]] == ["editor_approval", "publish"], parts
        assert (await client.threads.get(tid))["status"] == "idle"
        assert [
            t["thread_id"]
            for t in await client.threads.search(metadata={"db": "postgres"}, status="idle")
        ] == [tid]
        assert [r["status"] for r in await client.runs.list(tid)] == ["success", "success"]


def _wait_for(path: Path, text: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text():
            return
        time.sleep(0.05)
    raise AssertionError(f"{text!r} never appeared in {path}")


async def test_a_busy_run_is_cancelled_and_one_cut_by_a_crash_is_joined_after_restart(
    serve_project: Callable[..., Server],
    tmp_path: Path,
) -> None:
    trail = tmp_path / "trail.txt"
    server = serve_project(
        templates=("async_nodes.py",),
        env={"STAGELINE_TEST_NODE_SLEEP": "0.5", "STAGELINE_TEST_TRAIL": str(trail)},
    )
    async with sdk(server) as client, sdk(server, "admin") as admin:
        busy = (await client.threads.create())["thread_id"]
        run = await client.runs.create(busy, "async_nodes", input={"seed": 2})
        _wait_for(trail, f"start {busy} n2\n")
        assert (await client.threads.get(busy))["status"] == "busy"
        assert (await client.runs.get(busy, run["run_id"]))["status"] == "running"
        with pytest.raises(httpx.HTTPStatusError) as second:
            await client.runs.create(busy, "async_nodes")
        assert status_of(second) == 409
        await admin.runs.cancel(busy, run["run_id"], wait=True)
        assert (await client.runs.get(busy, run["run_id"]))["status"] == "interrupted"
        assert (await client.threads.get(busy))["status"] == "idle"
        assert shown(server, busy)["run"]["status"] == "cancelled"
        assert f"start {busy} n10\n" not in trail.read_text()

        cut = (await client.threads.create())["thread_id"]
        run = await client.runs.create(cut, "async_nodes", input={"seed": 3})
        _wait_for(trail, f"end {cut} n3\n")
        # n3 has completed when its step is committed (its function's return is not enough: a
        # kill between the two re-runs it once, as the node that was running): the thread then
        # stands before n4 or later.
        for _ in range(3000):
            ahead = (await client.threads.get_state(cut))["next"]
            if ahead and ahead[0] not in ("n1", "n2", "n3"):
                break
            await asyncio.sleep(0.02)
    server.kill()
    server.start()
    async with sdk(server) as client:
        done = await client.runs.join(cut, run["run_id"])
        assert isinstance(done["value"], int) and "__error__" not in done
        assert (await client.runs.get(cut, run["run_id"]))["status"] == "success"
        assert (await client.threads.get(cut))["status"] == "idle"
    ends = [
        line.split()[2] for line in trail.read_text().splitlines() if line.startswith(f"end {cut} ")
    ]
    assert sorted(ends) == sorted(f"n{i}" for i in range(1, 11))  # each node completed once
