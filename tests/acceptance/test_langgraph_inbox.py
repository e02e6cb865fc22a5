"""Agent Inbox, unchanged, on stageline's gates and question sets: through ``langgraph_sdk``
against one served project, what the inbox reads (``HumanInterrupt`` fields on each interrupt
value, old keys kept), each response it sends (``command={"resume": [response]}``) and its
"resolve" (``threads.update_state(thread, None, as_node="__end__")``), each recorded as an
audited decision (``GET /v1/runs/{id}``).

``blog_post`` waits at its ``editor_approval`` gate (changes go back to ``draft``; a reject
ends the run); ``sdlc`` asks its ``clarify`` set (``scope`` needs an answer, ``priority`` and
``done_when`` have defaults).
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient

from server_fixtures import Server

RESOLVED = "resolved from Agent Inbox"


def sdk(server: Server, scope: str = "decide") -> LangGraphClient:
    return get_client(url=server.url, api_key=server.tokens[scope])


def recorded(server: Server, run_id: str) -> dict[str, Any]:
    with server.client("read") as http:
        found = http.get(f"/v1/runs/{run_id}")
    assert found.status_code == 200, found.text
    return dict(found.json())


def refused(error: pytest.ExceptionInfo[httpx.HTTPStatusError]) -> tuple[int, str]:
    return error.value.response.status_code, str(error.value.response.json()["detail"])


async def test_a_gate_is_a_human_interrupt_decided_by_each_inbox_response(server: Server) -> None:
    async with sdk(server) as client:
        tid = (await client.threads.create())["thread_id"]
        stopped = await client.runs.wait(tid, "blog_post", input={"topic": "owls"})
        [interrupt] = stopped["__interrupt__"]
        value = interrupt["value"]
        assert value["gate"] == "editor_approval" and value["kind"] == "gate"  # kept
        assert value["action_request"] == {"action": "editor_approval", "args": value["show"]}
        assert value["action_request"]["args"]["draft"] == stopped["draft"]
        assert value["config"] == {
            "allow_accept": True,
            "allow_edit": False,
            "allow_respond": True,
            "allow_ignore": True,
        }
        assert "editor_approval" in value["description"] and "draft" in value["description"]
        state = await client.threads.get_state(tid)
        assert state["interrupts"][0]["value"] == value
        assert state["tasks"][0]["interrupts"][0]["value"] == value
        [listed] = [
            t
            for t in await client.threads.search(
                metadata={"graph_id": "blog_post"}, status="interrupted", limit=100
            )
            if t["thread_id"] == tid
        ]
        assert [i["value"] for v in listed["interrupts"].values() for i in v] == [value]

        edit = {"type": "edit", "args": {"action": "editor_approval", "args": {"draft": "x"}}}
        with pytest.raises(httpx.HTTPStatusError) as no_edits:
            await client.runs.wait(tid, "blog_post", command={"resume": [edit]})
        code, detail = refused(no_edits)
        assert code == 409 and "takes no edits" in detail
        with pytest.raises(httpx.HTTPStatusError) as empty:
            await client.runs.wait(
                tid, "blog_post", command={"resume": [{"type": "response", "args": " "}]}
            )
        assert refused(empty)[0] == 422
        with pytest.raises(httpx.HTTPStatusError) as unknown:
            await client.runs.wait(tid, "blog_post", command={"resume": [{"type": "maybe"}]})
        assert refused(unknown)[0] == 422
        assert len(await client.runs.list(tid)) == 1  # refused responses leave no run behind

        changed = await client.runs.wait(
            tid,
            "blog_post",
            command={"resume": [{"type": "response", "args": "make it shorter"}]},
        )
        assert changed["feedback"] == "make it shorter"
        again = changed["__interrupt__"][0]["value"]
        assert again["config"]["allow_respond"] and "2 rounds left" in again["description"]
        accepted = await client.runs.wait(
            tid,
            "blog_post",
            command={"resume": [{"type": "accept", "args": again["action_request"]}]},
        )
        assert accepted["post_path"] and "__interrupt__" not in accepted
        assert (await client.threads.get(tid))["status"] == "idle"

        ignored = (await client.threads.create())["thread_id"]
        await client.runs.wait(ignored, "blog_post", input={"topic": "bats"})
        done = await client.runs.wait(
            ignored, "blog_post", command={"resume": [{"type": "ignore", "args": None}]}
        )
        assert "__interrupt__" not in done

        resolved = (await client.threads.create())["thread_id"]
        await client.runs.wait(resolved, "blog_post", input={"topic": "moles"})
        await client.threads.update_state(resolved, None, as_node="__end__")
        assert (await client.threads.get(resolved))["status"] == "idle"
        with pytest.raises(httpx.HTTPStatusError) as twice:
            await client.threads.update_state(resolved, None, as_node="__end__")
        assert refused(twice)[0] == 409

    decisions = [(d["decision"], d["actor"], d["note"]) for d in recorded(server, tid)["decisions"]]
    assert decisions == [("changes", "decider", "make it shorter"), ("approve", "decider", None)]
    found = recorded(server, ignored)
    assert found["run"]["status"] == "rejected"
    assert [(d["decision"], d["actor"]) for d in found["decisions"]] == [("reject", "decider")]
    found = recorded(server, resolved)
    assert found["run"]["status"] == "rejected"
    assert [(d["decision"], d["actor"], d["note"]) for d in found["decisions"]] == [
        ("reject", "decider", RESOLVED)
    ]


async def test_a_question_set_is_a_human_interrupt_answered_by_inbox_responses(
    server: Server,
) -> None:
    async with sdk(server) as client, sdk(server, "admin") as admin:
        tid = (await client.threads.create())["thread_id"]
        asked = await client.runs.wait(tid, "sdlc", input={"task": "add a login page"})
        value = asked["__interrupt__"][0]["value"]
        assert value["kind"] == "question" and value["question_set"]["questions"]  # kept
        assert value["action_request"] == {
            "action": "clarify",
            "args": {"scope": "", "priority": "normal", "done_when": ""},
        }
        assert value["config"] == {
            "allow_accept": False,  # scope has no default
            "allow_edit": True,
            "allow_respond": True,  # the text answers scope, the only open question
            "allow_ignore": False,
        }
        assert "`scope`" in value["description"] and "high" in value["description"]
        for response, status, words in (
            ({"type": "ignore", "args": None}, 409, "cannot be ignored"),
            ({"type": "accept", "args": value["action_request"]}, 409, "'scope' has no default"),
            ({"type": "response", "args": 3}, 422, "text of the answer"),
            ({"type": "edit", "args": {"action": "clarify", "args": {"priority": "x"}}}, 422, ""),
        ):
            with pytest.raises(httpx.HTTPStatusError) as bad:
                await client.runs.wait(tid, "sdlc", command={"resume": [response]})
            code, detail = refused(bad)
            assert code == status and words in detail, detail
        assert len(await client.runs.list(tid)) == 1

        scope = "the login form, a session cookie and logout"
        await client.runs.wait(
            tid, "sdlc", command={"resume": [{"type": "response", "args": scope}]}
        )
        state = await client.threads.get_state(tid)
        assert state["values"]["answers"] == {"scope": scope, "priority": "normal", "done_when": ""}

        edited = (await client.threads.create())["thread_id"]
        await client.runs.wait(edited, "sdlc", input={"task": "add a logout button"})
        args = {"scope": "the logout button and its session end", "priority": "high"}
        edit = {"type": "edit", "args": {"action": "clarify", "args": {**args, "done_when": ""}}}
        await client.runs.wait(edited, "sdlc", command={"resume": [edit]})
        assert (await client.threads.get_state(edited))["values"]["answers"]["priority"] == "high"

        resolved = (await client.threads.create())["thread_id"]
        await client.runs.wait(resolved, "sdlc", input={"task": "rename a field"})
        with pytest.raises(httpx.HTTPStatusError) as not_admin:
            await client.threads.update_state(resolved, None, as_node="__end__")
        code, detail = refused(not_admin)
        assert code == 403 and "needs admin" in detail
        assert (await client.threads.get(resolved))["status"] == "interrupted"
        await admin.threads.update_state(resolved, None, as_node="__end__")
        assert (await client.threads.get(resolved))["status"] == "idle"

    [question] = recorded(server, tid)["questions"]
    assert question["actor"] == "decider"
    assert question["answers"] == {"scope": scope, "priority": "normal", "done_when": ""}
    [question] = recorded(server, edited)["questions"]
    assert question["actor"] == "decider" and question["answers"]["scope"] == args["scope"]
    found = recorded(server, resolved)
    assert found["run"]["status"] == "cancelled"
    [closed] = found["questions"]
    assert closed["status"] == "closed" and closed["answers"] is None
    assert closed["reason"] == f"the run was cancelled by admin: {RESOLVED}"
