"""The dashboard's graph picture: layout, loops, and each node's status from the ledger."""

from __future__ import annotations

import re
import time

from stageline.ledger import Event, NodeRecord, NodeStatus, Run, RunStatus, Wait, WaitKind
from stageline.server.ui._charts import bar_chart, fmt_seconds, timeline
from stageline.server.ui._graph import Edge, Node, draw_graph, layout
from stageline.server.ui._runview import node_statuses

NODES = [
    Node("__start__", "start"),
    Node("draft", "stage"),
    Node("critic_a", "stage"),
    Node("critic_b", "stage"),
    Node("join", "stage"),
    Node("gate", "gate"),
    Node("publish", "stage"),
    Node("__end__", "end"),
]
EDGES = [
    Edge("__start__", "draft"),
    Edge("draft", "critic_a"),
    Edge("draft", "critic_b"),
    Edge("critic_a", "join"),
    Edge("critic_b", "join"),
    Edge("join", "gate"),
    Edge("gate", "publish", True, "approve"),
    Edge("gate", "draft", True, "changes"),
    Edge("gate", "__end__", True, "reject"),
    Edge("publish", "__end__"),
]


def _record(
    node: str, status: NodeStatus, started: float, *, task: str | None = None, try_no: int = 1
) -> NodeRecord:
    return NodeRecord(
        run_id="r1",
        task_id=task or f"t-{node}-{started}",
        attempt=1,
        try_no=try_no,
        node=node,
        stage=node,
        status=status,
        started_at=started,
        finished_at=None if status is NodeStatus.WAITING else started + 1,
    )


def test_layers_follow_the_longest_path_and_the_way_back_is_a_loop() -> None:
    g = layout(NODES, EDGES)
    assert [
        g.layer[n] for n in ("__start__", "draft", "critic_a", "join", "gate", "publish", "__end__")
    ] == [0, 1, 2, 3, 4, 5, 6]
    assert g.layer["critic_a"] == g.layer["critic_b"]
    assert g.pos["critic_a"][0] != g.pos["critic_b"][0]  # the fan-out side by side
    assert [EDGES[i] for i in g.back] == [Edge("gate", "draft", True, "changes")]


def test_the_picture_carries_each_status_and_the_loop_count_as_data() -> None:
    g = layout(NODES, EDGES)
    svg = str(
        draw_graph(g, {"draft": "succeeded", "gate": "waiting"}, loops={next(iter(g.back)): 2})
    )
    assert 'data-node="draft" data-status="succeeded"' in svg
    assert 'data-node="gate" data-status="waiting"' in svg
    assert 'data-node="publish" data-status="not_reached"' in svg
    assert re.search(r'data-edge="gate->draft" data-loop="true" data-iterations="2"', svg)
    assert "changes \u00d72" in svg
    assert "<script" not in svg


def test_names_are_escaped_in_the_picture() -> None:
    g = layout([Node("<b>x</b>", "stage")], [])
    assert "<b>" not in str(draw_graph(g))


def test_statuses_come_from_the_last_record_and_pending_waits() -> None:
    g = layout(NODES, EDGES)
    run = Run(run_id="r1", template="t", template_version="1", status=RunStatus.WAITING)
    records = [
        _record("draft", NodeStatus.FAILED, 1, task="a"),
        _record("draft", NodeStatus.SUCCEEDED, 2, task="a", try_no=2),
        _record("critic_a", NodeStatus.SUCCEEDED, 3),
        _record("critic_b", NodeStatus.SUCCEEDED, 3),
        _record("join", NodeStatus.SUCCEEDED, 4),
        _record("gate", NodeStatus.WAITING, 5),
    ]
    wait = Wait(
        run_id="r1",
        wait_id="w",
        kind=WaitKind.GATE,
        name="gate",
        node="gate",
        attempt=1,
        interrupt_id="i",
    )
    found = node_statuses(g, run, records, [wait])
    assert found["draft"] == "succeeded" and found["gate"] == "waiting"
    assert found["publish"] == "not_reached" and found["__end__"] == "not_reached"


def test_an_ended_run_marks_the_branch_not_taken_as_skipped() -> None:
    g = layout(NODES, EDGES)
    run = Run(
        run_id="r1",
        template="t",
        template_version="1",
        status=RunStatus.REJECTED,
        finished_at=time.time(),
    )
    records = [
        _record(n, NodeStatus.SUCCEEDED, i)
        for i, n in enumerate(["draft", "critic_a", "critic_b", "join", "gate"])
    ]
    found = node_statuses(g, run, records, [])
    assert found["publish"] == "skipped"
    ongoing = Run(run_id="r1", template="t", template_version="1", status=RunStatus.RUNNING)
    assert node_statuses(g, ongoing, records, [])["publish"] == "not_reached"


def test_the_timeline_draws_a_bar_per_attempt_and_marks_retries() -> None:
    records = [
        _record("draft", NodeStatus.FAILED, 10, task="a"),
        _record("draft", NodeStatus.SUCCEEDED, 12, task="a", try_no=2),
    ]
    resumed = Event(run_id="r1", kind="run.retried", ts=15, data={"attempt": 2})
    svg = str(timeline(records, [resumed], start=10, end=20))
    assert svg.count('data-bar-node="draft"') == 2
    assert 'data-restart="retried"' in svg and "attempt 2" in svg
    assert "draft (try 2)" in svg and 'data-bar-status="failed"' in svg


def test_numbers_read_well() -> None:
    assert fmt_seconds(None) == "—"
    assert fmt_seconds(0.25) == "250 ms" and fmt_seconds(3.21) == "3.2 s"
    assert fmt_seconds(600) == "10.0 min" and fmt_seconds(7200) == "2.0 h"
    assert 'data-bar="parse" data-value="0.5"' in str(bar_chart({"parse": 0.5}, percent=True))
