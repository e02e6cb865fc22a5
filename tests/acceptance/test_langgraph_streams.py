"""Every stream mode of a LangGraph API run over ``langgraph_sdk``, as LangGraph's server sends
them: a plain graph of the ``langgraph.json`` project (a streaming chat model, a stream writer,
an ``interrupt()``) and the ``blog_post`` template (its gate), on one served SQLite project;
the order of an interrupt's events, a resume's first ``values``, and ``Last-Event-ID``."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient

from server_fixtures import Server, make_project

CORPUS = Path(__file__).parents[1] / "fixtures" / "langgraph_project"
CHATTER = '''
"""A chat model that streams its tokens, a stream writer, and an interrupt."""

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langgraph.config import get_stream_writer
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.types import interrupt


def talk(state: MessagesState) -> dict:
    get_stream_writer()({"progress": "thinking"})
    model = GenericFakeChatModel(messages=iter([AIMessage(content="hello there friend")]))
    return {"messages": [model.invoke(state["messages"])]}


def check(state: MessagesState) -> dict:
    return {"messages": [{"role": "user", "content": interrupt({"question": "ok?"})}]}


builder = StateGraph(MessagesState)
builder.add_node("talk", talk)
builder.add_node("check", check)
builder.add_edge(START, "talk")
builder.add_edge("talk", "check")
graph = builder.compile()
'''
NOTED = """
from typing import TypedDict

from langgraph.graph import START, StateGraph

from stageline import Template


class Note(TypedDict, total=False):
    text: str


def draft(state, ctx):
    ctx.write({"drafting": state["text"]})
    return {"text": state["text"] + "!"}


inner = StateGraph(Note)
inner.add_node("tidy", lambda state: {"text": state["text"].strip()})
inner.add_edge(START, "tidy")

template = Template("noted", state=Note)
template.add_graph("clean", inner)
template.add_stage(draft)
template.add_edge("clean", "draft")
"""
"""A stageline template with a subgraph, whose stage writes to the ``custom`` stream."""
HI = {"messages": [{"role": "user", "content": "hi"}]}
ALL = ["values", "updates", "messages-tuple", "custom", "tasks", "checkpoints", "debug"]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = make_project(tmp_path_factory.mktemp("streams"))
    shutil.copytree(CORPUS, server.project, dirs_exist_ok=True)
    (server.project / "graphs" / "chatter.py").write_text(CHATTER)
    config = json.loads((server.project / "langgraph.json").read_text())
    config["graphs"]["chatter"] = "./graphs/chatter.py:graph"
    (server.project / "langgraph.json").write_text(json.dumps(config))
    (server.project / "templates" / "noted.py").write_text(NOTED)
    try:
        yield server.start()
    finally:
        server.kill()


def sdk(server: Server) -> LangGraphClient:
    return get_client(url=server.url, api_key=server.tokens["decide"])


async def parts(client: LangGraphClient, thread_id: str, graph: str, **kw: Any) -> list[Any]:
    return [p async for p in client.runs.stream(thread_id, graph, **kw)]


def of(found: list[Any], event: str) -> list[Any]:
    return [p.data for p in found if p.event == event]


async def test_every_mode_of_a_plain_graph_then_its_resume(served: Server) -> None:
    async with sdk(served) as client:
        tid = (await client.threads.create())["thread_id"]
        found = await parts(client, tid, "chatter", input=HI, stream_mode=ALL)
        assert found[0].event == "metadata" and found[0].data["thread_id"] == tid
        ids = [int(p.id) for p in found[1:]]
        assert ids == sorted(ids) and len(set(ids)) == len(ids)  # numbered, for Last-Event-ID
        assert of(found, "custom") == [{"progress": "thinking"}]
        tokens = of(found, "messages")
        assert len(tokens) > 1  # the model's tokens as it streams them: [chunk, metadata]
        assert "".join(c["content"] for c, _meta in tokens) == "hello there friend"
        assert all(meta["langgraph_node"] == "talk" for _c, meta in tokens)
        updates = of(found, "updates")
        assert updates[0]["talk"]["messages"][0]["content"] == "hello there friend"
        asked = updates[-1]["__interrupt__"]
        assert asked[0]["value"] == {"question": "ok?"} and asked[0]["id"]
        # LangGraph's order at an interrupt: its update, then the whole state with it.
        shown = [p for p in found if p.event in ("updates", "values")]
        assert [p.event for p in shown[-2:]] == ["updates", "values"]
        last = shown[-1].data
        assert [m["content"] for m in last["messages"]] == ["hi", "hello there friend"]
        assert last["__interrupt__"] == asked
        tasks = of(found, "tasks")
        assert {t["name"] for t in tasks} == {"talk", "check"}
        assert any("result" in t for t in tasks) and any("input" in t for t in tasks)
        checkpoints = of(found, "checkpoints")
        assert checkpoints[-1]["next"] == ["check"] and "values" in checkpoints[-1]
        assert {d["type"] for d in of(found, "debug")} >= {"checkpoint", "task", "task_result"}

        resumed = await parts(
            client, tid, "chatter", command={"resume": "yes"}, stream_mode=["values", "updates"]
        )
        assert [p.event for p in resumed[:2]] == ["metadata", "values"]  # where it resumes
        assert len(resumed[1].data["messages"]) == 2
        assert resumed[-2].data == {"check": {"messages": [{"role": "user", "content": "yes"}]}}
        assert [m["content"] for m in resumed[-1].data["messages"]] == [
            "hi",
            *["hello there friend", "yes"],
        ]


async def test_messages_events_and_last_event_id(served: Server) -> None:
    async with sdk(served) as client:
        tid = (await client.threads.create())["thread_id"]
        found = await parts(client, tid, "chatter", input=HI, stream_mode=["messages", "events"])
        kinds = [p.event for p in found]
        assert kinds[0] == "metadata" and "messages/metadata" in kinds
        partial = of(found, "messages/partial")
        assert len(partial) > 1 and partial[-1][0]["content"] == "hello there friend"
        assert partial[0][0]["content"] != partial[-1][0]["content"]  # it grows, token by token
        events = of(found, "events")
        assert {"on_chain_start", "on_chat_model_stream", "on_chain_end"} <= {
            e["event"] for e in events
        }
        assert not [e for e in events if e["event"] == "on_chain_stream" and not e["parent_ids"]]
        assert not of(found, "values")  # only the modes asked for

        other = (await client.threads.create())["thread_id"]
        whole = await parts(client, other, "chatter", input=HI, stream_mode=["values", "custom"])
        run_id = whole[0].data["run_id"]
        assert [p.event for p in whole] == ["metadata", "values", "custom", "values", "values"]
        # A client that lost the stream after event 2 gets the rest, numbered as before.
        after = [p async for p in client.runs.join_stream(other, run_id, last_event_id="2")]
        assert [(p.id, p.event, p.data) for p in after if p.id] == [
            (p.id, p.event, p.data) for p in whole[3:]
        ]


async def test_a_templates_gate_streams_in_every_mode(served: Server) -> None:
    async with sdk(served) as client:
        tid = (await client.threads.create())["thread_id"]
        found = await parts(
            client, tid, "blog_post", input={"topic": "owls"}, stream_mode=[*ALL, "events"]
        )
        shown = [p for p in found if p.event in ("updates", "values")]
        assert [p.event for p in shown[-2:]] == ["updates", "values"]
        waiting = shown[-1].data
        assert waiting["topic"] == "owls" and waiting["__interrupt__"]
        assert shown[-2].data == {"__interrupt__": waiting["__interrupt__"]}
        assert of(found, "tasks") and of(found, "checkpoints") and of(found, "debug")
        assert {"on_chain_start", "on_chain_end"} <= {e["event"] for e in of(found, "events")}
        resumed = await parts(
            client, tid, "blog_post", command={"resume": "approve"}, stream_mode="values"
        )
        assert [p.event for p in resumed[:2]] == ["metadata", "values"]
        assert resumed[1].data["topic"] == "owls" and "__interrupt__" not in resumed[-1].data

        noted = await parts(
            client, None, "noted", input={"text": " hi "}, stream_mode=["custom", "values"]
        )
        assert [(p.event, p.data) for p in noted[1:]] == [
            ("values", {"text": " hi "}),
            ("values", {"text": "hi"}),
            ("custom", {"drafting": "hi"}),
            ("values", {"text": "hi!"}),
        ]
        deep = await parts(
            client,
            None,
            "noted",
            input={"text": " hi "},
            stream_mode="updates",
            stream_subgraphs=True,
        )
        inside = [p for p in deep if p.event.startswith("updates|clean:")]
        assert [p.data for p in inside] == [{"tidy": {"text": "hi"}}]
        assert next(p.data for p in deep if p.event == "updates") == {"clean": {"text": "hi"}}
