"""The rest of the compatibility script (``_compat_script.py`` has the first part, and the
helpers): made assistants and their crons, joining streams, batches, pruning, cancelling without
waiting, a graph with input and output schemas of its own (``io``), and LangGraph's v3 thread
stream. With both parts, every public method of ``langgraph_sdk``'s clients (assistants,
threads, runs, crons, store) is called at least once.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

from _compat_script import Outcome, Recorder, calls, norm, pick, until_running
from langgraph_sdk.client import SyncLangGraphClient
from langgraph_sdk.schema import StreamPart


def script(client: SyncLangGraphClient) -> dict[str, Outcome]:
    """Every SDK call of the script, in order: name -> normalised outcome."""
    rec = Recorder()
    calls(rec, client)
    more(rec, client)
    return rec.outcomes


def more(rec: Recorder, client: SyncLangGraphClient) -> None:
    _io_graph(rec, client)
    _made_assistant(rec, client)
    _joined_streams(rec, client)
    _batch_and_prune(rec, client)
    _cancel_without_waiting(rec, client)
    _v3_stream(rec, client)


def _io_graph(rec: Recorder, client: SyncLangGraphClient) -> None:
    a = client.assistants
    found = a.search(graph_id="io")
    aid = found[0]["assistant_id"] if found else "io"
    rec.call(
        "assistants.get_schemas(own input and output schemas)",
        lambda: a.get_schemas(aid),
        lambda f: {
            key: sorted((f.get(key) or {}).get("properties", {}))
            for key in ("input_schema", "output_schema", "state_schema")
        },
    )


def _made_assistant(rec: Recorder, client: SyncLangGraphClient) -> None:
    a = client.assistants
    made = rec.call(
        "assistants.create",
        lambda: a.create("plain", name="greeter", metadata={"team": "compat"}),
        lambda f: pick(f, "graph_id", "name", "version") | {"team": f["metadata"].get("team")},
    )
    if not made:
        return
    aid = made["assistant_id"]
    rec.call(
        "assistants.update",
        lambda: a.update(aid, name="greeter 2"),
        lambda f: pick(f, "graph_id", "name", "version"),
    )
    rec.call(
        "assistants.get_versions",
        lambda: a.get_versions(aid),
        lambda f: [(v["version"], v["name"]) for v in f],
    )
    rec.call(
        "assistants.set_latest",
        lambda: a.set_latest(aid, 1),
        lambda f: pick(f, "name", "version"),
    )
    rec.call(
        "runs.wait(made assistant)",
        lambda: client.runs.wait(None, aid, input={"name": "made"}),
        norm,
    )
    cron = rec.call(
        "crons.create(made assistant)",
        lambda: client.crons.create(aid, schedule="0 9 * * *", input={"name": "c"}),
        lambda f: pick(f, "schedule") | {"assistant": f["assistant_id"] == aid},
    )
    if cron:
        rec.call(
            "crons.update",
            lambda: client.crons.update(cron["cron_id"], schedule="0 10 * * *"),
            lambda f: pick(f, "schedule", "enabled") | {"input": f["payload"].get("input")},
        )
    rec.call("assistants.delete", lambda: a.delete(aid), norm)
    rec.call("assistants.get(deleted)", lambda: a.get(aid), norm)
    rec.call(
        "crons.search(deleted assistant)",
        lambda: client.crons.search(assistant_id=aid),
        lambda f: len(f),
    )


def _ended_with(parts: Iterator[StreamPart]) -> Outcome:
    """What a client following a run learns, whichever events it joined in time for: the
    values it ended with and, on a thread's stream, that it ended."""
    last: Any = None
    ended: Any = None
    with contextlib.closing(parts):  # type: ignore[type-var]
        for part in parts:
            if part.event == "values":
                last = part.data
            if part.event == "metadata" and part.data.get("status") == "run_done":
                ended = part.data
                break
    return {"values": norm(last), "run_done": norm(ended)}


def _slow_run(client: SyncLangGraphClient) -> tuple[str, str]:
    """A run of ``slow`` that is running now: its thread and run ids."""
    tid = client.threads.create()["thread_id"]
    rid = client.runs.create(tid, "slow", input={"waited": False})["run_id"]
    until_running(client, tid, rid)
    return tid, rid


def _joined_streams(rec: Recorder, client: SyncLangGraphClient) -> None:
    t, r = client.threads, client.runs
    tid, rid = _slow_run(client)
    rec.call("runs.join_stream(running)", lambda: _ended_with(r.join_stream(tid, rid)), norm)
    tid, _rid = _slow_run(client)
    rec.call("threads.join_stream(running)", lambda: _ended_with(t.join_stream(tid)), norm)


def _batch_and_prune(rec: Recorder, client: SyncLangGraphClient) -> None:
    t, r = client.threads, client.runs
    # Not joined: LangGraph deletes a run without a thread once it ends (on_completion), so a
    # join may come too late there.
    rec.call(
        "runs.create_batch",
        lambda: r.create_batch(
            [
                {"assistant_id": "plain", "input": {"name": "one"}},
                {"assistant_id": "plain", "input": {"name": "two"}},
            ]
        ),
        lambda f: [pick(x, "status") | {"thread": bool(x.get("thread_id"))} for x in f],
    )
    tid = t.create()["thread_id"]
    rec.call("threads.prune", lambda: t.prune([tid]), norm)
    rec.call("threads.get(pruned)", lambda: t.get(tid), norm)


def _cancel_without_waiting(rec: Recorder, client: SyncLangGraphClient) -> None:
    r = client.runs
    tid, rid = _slow_run(client)
    rec.call("runs.cancel(running)", lambda: r.cancel(tid, rid), norm)
    r.join(tid, rid)
    rec.call("runs.get(cancelled, joined)", lambda: r.get(tid, rid), lambda f: pick(f, "status"))
    tid, rid = _slow_run(client)
    rec.call(
        "runs.cancel_many(thread, run_ids)",
        lambda: r.cancel_many(thread_id=tid, run_ids=[rid]),
        norm,
    )
    r.join(tid, rid)
    rec.call("runs.get(cancelled many)", lambda: r.get(tid, rid), lambda f: pick(f, "status"))


def _v3_stream(rec: Recorder, client: SyncLangGraphClient) -> None:
    """LangGraph's v3 thread streams (server-sent events): a run to its end; a run to its
    interrupt, answered; the same thread reattached; what the protocol refuses."""

    def session() -> Any:
        with client.threads.stream(assistant_id="plain") as stream:
            started = stream.run.start(input={"name": "v3"})
            return {"started": sorted(started), "output": stream.output}

    rec.call("threads.stream(v3 protocol)", session, norm)
    tid = ""

    def interrupted() -> Any:
        nonlocal tid
        with client.threads.stream(assistant_id="review") as stream:
            stream.run.start(input={"email": "v3"})
            for _ in range(1200):  # the SDK's watcher sees the interrupt on its own stream
                if stream.interrupted:
                    break
                time.sleep(0.05)
            tid = stream.thread_id
            waiting = [
                {k: v for k, v in i.items() if k != "interrupt_id"} for i in stream.interrupts
            ]
            answered = stream.run.respond([{"type": "accept", "args": None}])
            return {"waiting": waiting, "answered": answered, "output": stream.output}

    rec.call("threads.stream(v3, interrupt answered)", interrupted, norm)
    rec.call("threads.get(after v3)", lambda: client.threads.get(tid), lambda f: pick(f, "status"))

    def reattached() -> Any:
        with client.threads.stream(tid, assistant_id="review") as stream:
            return stream.output

    rec.call("threads.stream(v3, reattached)", reattached, norm)

    def unknown() -> Any:
        with client.threads.stream(assistant_id="nosuch") as stream:
            return stream.run.start(input={})

    rec.call("threads.stream(v3, unknown assistant)", unknown, norm)

    def socket() -> Any:
        key = client.http.client.headers.get("x-api-key", "")  # a handshake sends only these
        with client.threads.stream(
            assistant_id="plain", transport="websocket", headers={"x-api-key": key}
        ) as stream:
            stream.run.start(input={"name": "ws"})
            return stream.output

    rec.call("threads.stream(v3, websocket)", socket, norm)
