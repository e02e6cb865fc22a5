"""ONE script of LangGraph SDK calls, run unchanged against LangGraph's dev server and against
``stageline serve`` (``test_langgraph_compat.py``): each call's outcome is recorded, normalised
(ids and timestamps replaced, only what an app reads kept), under the call's name.

The project is ``tests/fixtures/compat_project``: ``review`` drafts a reply and stops at an
``interrupt()`` carrying an Agent Inbox ``HumanInterrupt``, then ends; ``plain`` is two nodes.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable
from typing import Any

import httpx
from langgraph_sdk.client import SyncLangGraphClient

Outcome = Any
UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
STAMP = re.compile(r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}")


def norm(value: Any) -> Any:
    """``value`` with every id (a UUID) and timestamp replaced by a placeholder."""
    if isinstance(value, dict):
        return {k: norm(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [norm(v) for v in value]
    if isinstance(value, str):
        if UUID.match(value):
            return "<id>"
        if STAMP.match(value):
            return "<time>"
    return value


def pick(found: dict[str, Any], *keys: str) -> dict[str, Any]:
    """The keys an app reads (missing ones as ``"<missing>"``), normalised."""
    return {k: norm(found.get(k, "<missing>")) for k in keys}


def interrupt_values(interrupts: list[dict[str, Any]]) -> list[Any]:
    return [norm(i.get("value")) for i in interrupts]


class Recorder:
    """Runs each call, records its outcome (or its error's status) under its name."""

    def __init__(self) -> None:
        self.outcomes: dict[str, Outcome] = {}

    def call(self, name: str, do: Callable[[], Any], shape: Callable[[Any], Outcome]) -> Any:
        assert name not in self.outcomes, f"two calls named {name}"
        try:
            found = do()
        except httpx.HTTPStatusError as error:
            self.outcomes[name] = {"error": error.response.status_code}
            return None
        except Exception as error:  # recorded, compared: the other server may not raise
            self.outcomes[name] = {"raised": type(error).__name__}
            return None
        self.outcomes[name] = shape(found)
        return found


def thread_shape(found: dict[str, Any]) -> Outcome:
    interrupts = found.get("interrupts") or {}
    return {
        **pick(found, "status", "values"),
        "team": found.get("metadata", {}).get("team"),
        "interrupts": sorted(
            (str(v) for vs in interrupts.values() for v in interrupt_values(vs)),
        ),
    }


def state_shape(found: dict[str, Any]) -> Outcome:
    return {
        **pick(found, "values", "next"),
        "tasks": [t["name"] for t in found["tasks"]],
        "interrupts": interrupt_values(found.get("interrupts", [])),
    }


def run_shape(found: dict[str, Any]) -> Outcome:
    return pick(found, "status", "multitask_strategy") | {
        "has_ids": bool(found.get("run_id")) and bool(found.get("thread_id"))
    }


def until_running(client: SyncLangGraphClient, tid: str, rid: str) -> None:
    deadline = time.monotonic() + 60
    while client.runs.get(tid, rid)["status"] == "pending" and time.monotonic() < deadline:
        time.sleep(0.1)


def calls(rec: Recorder, client: SyncLangGraphClient) -> None:
    """SDK calls on the project's graphs, in order (``_compat_more``: the rest)."""
    _assistants(rec, client)
    tid = _review_thread(rec, client)
    _plain_runs(rec, client)
    _cancel(rec, client)
    _thread_admin(rec, client, tid)
    _store(rec, client)
    _crons(rec, client)


def _assistants(rec: Recorder, client: SyncLangGraphClient) -> None:
    a = client.assistants
    found = rec.call(
        "assistants.search(graph_id)",
        lambda: a.search(graph_id="review"),
        lambda f: [pick(x, "graph_id", "name") for x in f],
    )
    aid = found[0]["assistant_id"] if found else "review"
    rec.call(
        "assistants.search()",
        lambda: a.search(limit=100),
        lambda f: sorted(x["graph_id"] for x in f),
    )
    rec.call(
        "assistants.get",
        lambda: a.get(aid),
        lambda f: (
            pick(f, "graph_id", "name", "version", "context")
            | {"created_by": f["metadata"].get("created_by")}
        ),
    )
    rec.call(
        "assistants.get_graph",
        lambda: a.get_graph(aid),
        lambda f: {
            "nodes": sorted(n["id"] for n in f["nodes"]),
            "edges": sorted((e["source"], e["target"]) for e in f["edges"]),
        },
    )
    rec.call(
        "assistants.get_schemas",
        lambda: a.get_schemas(aid),
        lambda f: {
            "graph_id": f["graph_id"],
            **{
                key: sorted((f.get(key) or {}).get("properties", {}))
                for key in ("input_schema", "output_schema", "state_schema")
            },
        },
    )
    rec.call("assistants.get_subgraphs", lambda: a.get_subgraphs(aid), norm)
    rec.call("assistants.count(graph_id)", lambda: a.count(graph_id="plain"), norm)
    rec.call("assistants.get(unknown)", lambda: a.get(str(uuid.uuid4())), norm)


def _review_thread(rec: Recorder, client: SyncLangGraphClient) -> str:
    t, r = client.threads, client.runs
    made = rec.call(
        "threads.create",
        lambda: t.create(metadata={"team": "compat"}),
        lambda f: pick(f, "status", "values", "metadata", "interrupts"),
    )
    tid = made["thread_id"]
    rec.call("threads.get(new)", lambda: t.get(tid), thread_shape)
    rec.call("threads.get_state(new)", lambda: t.get_state(tid), lambda f: pick(f, "values"))
    rec.call(
        "runs.wait(review: to the interrupt)",
        lambda: r.wait(tid, "review", input={"email": "hi"}),
        lambda f: {
            "values": {k: v for k, v in f.items() if k != "__interrupt__"},
            "interrupts": interrupt_values(f.get("__interrupt__", [])),
        },
    )
    rec.call("threads.get(interrupted)", lambda: t.get(tid), thread_shape)
    rec.call("threads.get_state(interrupted)", lambda: t.get_state(tid), state_shape)
    rec.call(
        "threads.get_history(interrupted)",
        lambda: t.get_history(tid, limit=10),
        lambda f: [(h["next"], h["metadata"].get("step")) for h in f],
    )
    rec.call(
        "threads.search(metadata, status)",
        lambda: t.search(metadata={"team": "compat"}, status="interrupted"),
        lambda f: [x["status"] for x in f],
    )
    rec.call("threads.count(metadata)", lambda: t.count(metadata={"team": "compat"}), norm)
    rec.call(
        "threads.update(metadata)",
        lambda: t.update(tid, metadata={"reviewer": "ada"}),
        lambda f: {k: f["metadata"].get(k) for k in ("team", "reviewer")},
    )
    rec.call(
        "runs.list(interrupted)",
        lambda: r.list(tid),
        lambda f: [x["status"] for x in f],
    )
    resumed = rec.call(
        "runs.create(resume: accept)",
        lambda: r.create(tid, "review", command={"resume": [{"type": "accept", "args": None}]}),
        lambda f: pick(f, "status") | {"thread": f["thread_id"] == tid},
    )
    if resumed:
        rid = resumed["run_id"]
        rec.call("runs.join", lambda: r.join(tid, rid), norm)
        rec.call("runs.get(done)", lambda: r.get(tid, rid), run_shape)
        rec.call("runs.cancel(done)", lambda: r.cancel(tid, rid), norm)
    rec.call("threads.get(done)", lambda: t.get(tid), thread_shape)
    history = rec.call(
        "threads.get_history(done)",
        lambda: t.get_history(tid, limit=10),
        lambda f: [(h["next"], h["metadata"].get("step")) for h in f],
    )
    at = [h for h in history or [] if h["next"] == ["draft"]]
    if at:
        checkpoint = at[0]["checkpoint"]["checkpoint_id"]
        rec.call(
            "threads.get_state(checkpoint_id)",
            lambda: t.get_state(tid, checkpoint_id=checkpoint),
            lambda f: pick(f, "values", "next"),
        )
    rec.call(
        "threads.create(if_exists=raise, taken id)",
        lambda: t.create(thread_id=tid, if_exists="raise"),
        norm,
    )
    rec.call(
        "threads.create(if_exists=do_nothing, taken id)",
        lambda: t.create(thread_id=tid, if_exists="do_nothing"),
        lambda f: pick(f, "status") | {"same": f["thread_id"] == tid},
    )
    rec.call("threads.get_state(done)", lambda: t.get_state(tid), state_shape)
    rec.call("runs.list(done)", lambda: r.list(tid), lambda f: [x["status"] for x in f])
    return str(tid)


def _plain_runs(rec: Recorder, client: SyncLangGraphClient) -> None:
    t, r = client.threads, client.runs
    rec.call(
        "runs.wait(stateless)",
        lambda: r.wait(None, "plain", input={"name": "ada"}),
        norm,
    )
    rec.call(
        "runs.stream(stateless, values+updates)",
        lambda: [
            (p.event, p.data)
            for p in r.stream(
                None, "plain", input={"name": "bo"}, stream_mode=["values", "updates"]
            )
            if p.event != "metadata"
        ],
        norm,
    )
    tid = t.create()["thread_id"]
    made = rec.call(
        "runs.create(plain)",
        lambda: r.create(tid, "plain", input={"name": "cy"}),
        lambda f: pick(f, "status", "assistant_id") | {"thread": f["thread_id"] == tid},
    )
    if made:
        rid = made["run_id"]
        rec.call("runs.join(plain)", lambda: r.join(tid, rid), norm)
        rec.call("runs.get(plain)", lambda: r.get(tid, rid), run_shape)
        rec.call("runs.delete(done)", lambda: r.delete(tid, rid), norm)
        rec.call("runs.get(deleted)", lambda: r.get(tid, rid), norm)
    rec.call("runs.get(unknown)", lambda: r.get(tid, str(uuid.uuid4())), norm)
    rec.call(
        "runs.wait(unknown assistant)",
        lambda: r.wait(None, str(uuid.uuid4()), input={"name": "x"}),
        norm,
    )
    rec.call(
        "runs.wait(stateless, unknown input key)",
        lambda: r.wait(None, "plain", input={"name": "ed", "nope": 1}),
        norm,
    )
    rec.call("threads.get(plain done)", lambda: t.get(tid), thread_shape)
    rec.call(
        "runs.stream(on thread, updates)",
        lambda: [
            (p.event, p.data)
            for p in r.stream(tid, "plain", input={"name": "di"}, stream_mode="updates")
            if p.event != "metadata"
        ],
        norm,
    )


def _cancel(rec: Recorder, client: SyncLangGraphClient) -> None:
    t, r = client.threads, client.runs
    tid = t.create()["thread_id"]
    made = rec.call(
        "runs.create(slow)",
        lambda: r.create(tid, "slow", input={"waited": False}),
        lambda f: pick(f, "status"),
    )
    if not made:
        return
    rid = made["run_id"]
    until_running(client, tid, rid)
    rec.call("runs.get(running)", lambda: r.get(tid, rid), lambda f: pick(f, "status"))
    rec.call("threads.get(busy)", lambda: t.get(tid), lambda f: pick(f, "status"))
    # stageline's cancel lets the node in flight end (README: "cancel wins over finishing"):
    # its wait lasts the node's few seconds, where LangGraph's cancels the node at once.
    rec.call("runs.cancel(running, wait)", lambda: r.cancel(tid, rid, wait=True), norm)
    rec.call("runs.get(cancelled)", lambda: r.get(tid, rid), lambda f: pick(f, "status"))
    rec.call("threads.get(cancelled)", lambda: t.get(tid), lambda f: pick(f, "status"))


def _thread_admin(rec: Recorder, client: SyncLangGraphClient, tid: str) -> None:
    t = client.threads
    rec.call(
        "threads.update_state(finished thread)",
        lambda: t.update_state(tid, {"reply": "edited"}),
        lambda f: sorted(f),
    )
    copy = rec.call(
        "threads.copy",
        lambda: t.copy(tid),
        lambda f: pick(f, "status") | {"new": f["thread_id"] != tid},
    )
    if copy:
        cid = copy["thread_id"]
        rec.call("threads.get_state(copy)", lambda: t.get_state(cid), state_shape)
        rec.call("threads.delete(copy)", lambda: t.delete(cid), norm)
        rec.call("threads.get(deleted)", lambda: t.get(cid), norm)
    rec.call("threads.get(unknown)", lambda: t.get(str(uuid.uuid4())), norm)
    rec.call(
        "runs.wait(input to a finished thread)",
        lambda: client.runs.wait(tid, "review", input={"email": "again"}),
        lambda f: sorted(f),
    )


def _store(rec: Recorder, client: SyncLangGraphClient) -> None:
    s = client.store
    item = ("compat", "notes")
    rec.call("store.put_item", lambda: s.put_item(item, "a", {"n": 1}), norm)
    rec.call(
        "store.get_item",
        lambda: s.get_item(item, "a"),
        lambda f: pick(f, "namespace", "key", "value"),
    )
    rec.call("store.get_item(missing)", lambda: s.get_item(item, "nope"), norm)
    rec.call(
        "store.search_items(filter)",
        lambda: s.search_items(("compat",), filter={"n": 1}),
        lambda f: [pick(x, "namespace", "key", "value") for x in f["items"]],
    )
    rec.call(
        "store.list_namespaces",
        lambda: s.list_namespaces(prefix=["compat"]),
        norm,
    )
    rec.call("store.delete_item", lambda: s.delete_item(item, "a"), norm)
    rec.call("store.get_item(deleted)", lambda: s.get_item(item, "a"), norm)


def _crons(rec: Recorder, client: SyncLangGraphClient) -> None:
    c = client.crons
    made = rec.call(
        "crons.create",
        lambda: c.create("plain", schedule="0 9 * * *", input={"name": "cron"}),
        lambda f: (
            pick(f, "schedule")
            | {"input": f["payload"].get("input"), "next": bool(f.get("next_run_date"))}
        ),
    )
    rec.call(
        "crons.search(assistant)",
        lambda: c.search(assistant_id=made["assistant_id"] if made else "plain"),
        lambda f: [x["schedule"] for x in f],
    )
    rec.call("crons.count", lambda: c.count(), norm)
    if made:
        rec.call("crons.delete", lambda: c.delete(made["cron_id"]), norm)
    rec.call("crons.count(after delete)", lambda: c.count(), norm)
    tid = client.threads.create()["thread_id"]
    on_thread = rec.call(
        "crons.create_for_thread(new thread)",
        lambda: c.create_for_thread(tid, "plain", schedule="0 9 * * *", input={"name": "t"}),
        lambda f: pick(f, "schedule") | {"thread": f.get("thread_id") == tid},
    )
    if on_thread:
        rec.call("crons.delete(for thread)", lambda: c.delete(on_thread["cron_id"]), norm)
