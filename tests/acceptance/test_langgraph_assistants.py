"""Assistants over ``langgraph_sdk``: configured variants of a template, kept in the ledger with
their versions, and crons of them, on a served ``langgraph.json`` project (one server per
database)."""

from __future__ import annotations

import asyncio
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_client

from server_fixtures import Server, make_project

CORPUS = Path(__file__).parents[1] / "fixtures" / "langgraph_project"
WITH_GRAPH = """
from typing import TypedDict

from langgraph.graph import START, StateGraph

from stageline import Template


class Post(TypedDict, total=False):
    topic: str
    draft: str


inner = StateGraph(Post)
inner.add_node("write", lambda state: {"draft": "words"})
inner.add_edge(START, "write")

template = Template("graph_post", state=Post)
template.add_graph("writers", inner)
template.add_stage("title", lambda state, ctx: {})
template.add_edge("writers", "title")
"""
"""A stageline template with a subgraph stage."""


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    url = request.getfixturevalue("postgres_module_url") if request.param == "postgres" else None
    server = make_project(tmp_path_factory.mktemp(f"assist-{request.param}"), database_url=url)
    shutil.copytree(CORPUS, server.project, dirs_exist_ok=True)
    (server.project / "templates" / "graph_post.py").write_text(WITH_GRAPH)
    try:
        yield server.start()
    finally:
        server.kill()


def status(error: pytest.ExceptionInfo[httpx.HTTPStatusError]) -> int:
    return error.value.response.status_code


async def test_an_assistant_configures_its_template_runs_and_keeps_versions(
    served: Server,
) -> None:
    async with get_client(url=served.url, api_key=served.tokens["admin"]) as admin:
        made = await admin.assistants.create(
            "greeter",
            context={"greeting": "Ahoy", "audience": "crew"},
            metadata={"team": "docs"},
            name="Pirate greeter",
            description="greets like a pirate",
        )
        aid = made["assistant_id"]
        assert uuid.UUID(aid) and made["graph_id"] == "greeter" and made["version"] == 1
        assert made["config"] == {"configurable": {"greeting": "Ahoy", "audience": "crew"}}
        assert await admin.assistants.get(aid) == made
        again = await admin.assistants.create("greeter", assistant_id=aid, if_exists="do_nothing")
        assert again == made
        with pytest.raises(httpx.HTTPStatusError) as taken:
            await admin.assistants.create("greeter", assistant_id=aid)
        assert status(taken) == 409

        # A run of the assistant is a run of its template with the assistant's context.
        thread = (await admin.threads.create())["thread_id"]
        assert await admin.runs.wait(thread, aid, input={}) == {
            "message": "Ahoy, crew!",
            "audience": "crew",
        }
        meta = (await admin.threads.get(thread))["metadata"]
        assert (meta["assistant_id"], meta["graph_id"], meta["assistant_version"]) == (
            aid,
            "greeter",
            1,
        )
        # The run's own context goes over the assistant's.
        told = await admin.runs.wait(None, aid, input={}, context={"audience": "Ada"})
        assert told == {"message": "Ahoy, Ada!", "audience": "Ada"}

        second = await admin.assistants.update(
            aid, config={"configurable": {"greeting": "Yo"}}, metadata={"n": 2}
        )
        assert second["version"] == 2 and second["context"] == {"greeting": "Yo"}
        assert second["metadata"] == {"team": "docs", "n": 2}  # merged, as LangGraph does
        assert second["name"] == "Pirate greeter"
        yo = await admin.runs.wait(None, aid, input={"name": "Bo"})
        assert yo["message"] == "Yo, Bo!"
        third = await admin.assistants.update(aid, context={"greeting": "Hi"})
        assert third["config"] == {"configurable": {"greeting": "Hi"}} and third["version"] == 3
        versions = await admin.assistants.get_versions(aid)
        assert [(v["version"], v["context"]) for v in versions] == [
            (3, {"greeting": "Hi"}),
            (2, {"greeting": "Yo"}),
            (1, {"greeting": "Ahoy", "audience": "crew"}),
        ]
        back = await admin.assistants.set_latest(aid, 1)
        assert (back["version"], back["context"]["greeting"]) == (1, "Ahoy")
        assert (await admin.runs.wait(None, aid, input={}))["message"] == "Ahoy, crew!"

        # Search, count, sort and pages, over the built-in assistants and the made ones.
        other = await admin.assistants.create("greeter", name="Plain", metadata={"team": "ops"})
        mine = await admin.assistants.search(graph_id="greeter", metadata={"team": "docs"})
        assert [a["assistant_id"] for a in mine] == [aid]
        assert await admin.assistants.count(graph_id="greeter") == 3  # the built-in one too
        assert await admin.assistants.count(name="pirate") == 1
        newest = await admin.assistants.search(graph_id="greeter", limit=2)
        assert [a["assistant_id"] for a in newest] == [other["assistant_id"], aid]
        paged = await admin.assistants.search(
            graph_id="greeter",
            limit=1,
            offset=1,
            sort_by="name",
            sort_order="asc",
            response_format="object",
        )
        assert [a["name"] for a in paged["assistants"]] == ["Pirate greeter"] and paged[
            "next"
        ] == "2"
        picked = await admin.assistants.search(name="plain", select=["assistant_id", "name"])
        assert picked == [{"assistant_id": other["assistant_id"], "name": "Plain"}]

        # Graph, schemas and subgraphs are the template's.
        assert {n["id"] for n in (await admin.assistants.get_graph(aid))["nodes"]} >= {"greet"}
        schemas = await admin.assistants.get_schemas(aid)
        assert set(schemas["context_schema"]["properties"]) == {"greeting", "audience"}
        assert await admin.assistants.get_subgraphs(aid) == {}
        subgraphs = await admin.assistants.get_subgraphs("ask_name")
        assert list(subgraphs) == ["asker"] and subgraphs["asker"]["state_schema"]["properties"]
        staged = await admin.assistants.get_subgraphs("graph_post")
        assert set(staged["writers"]["state_schema"]["properties"]) == {"topic", "draft"}

        await admin.assistants.delete(other["assistant_id"])
        with pytest.raises(httpx.HTTPStatusError) as gone:
            await admin.assistants.get(other["assistant_id"])
        assert status(gone) == 404
        # With delete_threads, the threads its runs started go too; other threads stay.
        kept = (await admin.threads.create())["thread_id"]
        await admin.runs.wait(kept, "greeter", input={})
        await admin.assistants.delete(aid, delete_threads=True)
        for call in (admin.assistants.get(aid), admin.threads.get(thread)):
            with pytest.raises(httpx.HTTPStatusError) as gone:
                await call
            assert status(gone) == 404
        assert await admin.threads.search(metadata={"assistant_id": aid}) == []
        assert (await admin.threads.get(kept))["metadata"]["assistant_id"] == "greeter"


async def test_built_in_assistants_are_fixed_and_assistants_need_their_scopes(
    served: Server,
) -> None:
    async with get_client(url=served.url, api_key=served.tokens["admin"]) as admin:
        builtin = await admin.assistants.get("greeter")
        assert builtin["metadata"]["created_by"] == "system" and builtin["version"] == 1
        assert [v["version"] for v in await admin.assistants.get_versions("greeter")] == [1]
        for call in (
            admin.assistants.update("greeter", name="x"),
            admin.assistants.delete("greeter"),
            admin.assistants.set_latest("greeter", 1),
        ):
            with pytest.raises(httpx.HTTPStatusError) as fixed:
                await call
            assert status(fixed) == 409
            assert "built-in assistant of template 'greeter'" in fixed.value.response.text
        refused = {
            "unknown template": admin.assistants.create("no_such_graph"),
            "not a UUID": admin.assistants.create("greeter", assistant_id="mine"),
            "context the graph lacks": admin.assistants.create("greeter", context={"tone": 1}),
            "no context at all": admin.assistants.create("agent", context={"greeting": "x"}),
            "both": admin.assistants.create(
                "greeter", config={"configurable": {"a": 1}}, context={"greeting": "x"}
            ),
        }
        for why, call in refused.items():
            with pytest.raises(httpx.HTTPStatusError) as bad:
                await call
            assert status(bad) in (404, 422), why
    async with get_client(url=served.url, api_key=served.tokens["read"]) as reader:
        assert await reader.assistants.count() >= 9
        with pytest.raises(httpx.HTTPStatusError) as denied:
            await reader.assistants.create("greeter")
        assert status(denied) == 403
    async with get_client(url=served.url, api_key=served.tokens["decide"]) as decider:
        with pytest.raises(httpx.HTTPStatusError) as denied:
            await decider.assistants.create("greeter")
        assert status(denied) == 403


async def test_a_cron_of_a_made_assistant_starts_runs_with_its_context(served: Server) -> None:
    async with get_client(url=served.url, api_key=served.tokens["admin"]) as admin:
        aid = (await admin.assistants.create("greeter", context={"greeting": "Ahoy"}))[
            "assistant_id"
        ]
        often = await admin.crons.create(aid, schedule="* * * * * *", input={"name": "Cy"})
        assert often["assistant_id"] == aid and often["payload"]["input"] == {"name": "Cy"}
        fired: list[dict[str, Any]] = []
        for _ in range(300):  # a hang guard, not a timing: the server looks every two seconds
            fired = await admin.threads.search(metadata={"cron_id": often["cron_id"]})
            if fired:
                break
            await asyncio.sleep(0.1)
        assert fired, "the schedule never fired"
        await admin.crons.update(often["cron_id"], enabled=False)
        tid = fired[-1]["thread_id"]
        [run] = await admin.runs.list(tid)
        assert run["assistant_id"] == aid
        joined = await admin.runs.join(tid, run["run_id"])
        assert joined == {"name": "Cy", "message": "Ahoy, Cy!", "audience": "world"}
        meta = (await admin.threads.get(tid))["metadata"]
        assert (meta["assistant_id"], meta["graph_id"], meta["cron_id"]) == (
            aid,
            "greeter",
            often["cron_id"],
        )

        empty = (await admin.threads.create())["thread_id"]
        mine = await admin.crons.create_for_thread(empty, aid, schedule="0 9 * * *")
        assert (mine["assistant_id"], mine["thread_id"]) == (aid, empty)
        assert {c["cron_id"] for c in await admin.crons.search(assistant_id=aid)} == {
            often["cron_id"],
            mine["cron_id"],
        }
        await admin.assistants.delete(aid)  # as LangGraph's: its crons go with it
        assert await admin.crons.search(assistant_id=aid) == []
