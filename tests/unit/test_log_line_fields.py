"""A log line shows a stage log's fields and a node's metrics (not only ``--json`` does): the
CLI's ``logs`` line and the console sink's line alike."""

from __future__ import annotations

import io

from rich.console import Console

from stageline.cli._render import event_line
from stageline.events import ConsoleSink
from stageline.ledger import Event, EventCategory

LOGGED = Event(
    run_id="r1",
    kind="stage.log",
    category=EventCategory.LOG,
    node="draft",
    message="drafted",
    data={"chars": 245, "topic": "retry budgets", "path": "/tmp/x/post.md"},
    seq=3,
)
FINISHED = Event(
    run_id="r1",
    kind="node.succeeded",
    node="draft",
    data={"attempt": 1, "try": 1, "duration": 0.5, "metrics": {"output_tokens": 77.0}},
    seq=4,
)
STARTED = Event(run_id="r1", kind="run.started", data={"attempt": 1, "template": "t"}, seq=1)


def _console_line(event: Event) -> str:
    out = io.StringIO()
    ConsoleSink(console=Console(file=out, width=200, color_system=None)).emit(event)
    return out.getvalue().strip()


def test_the_logs_line_shows_a_stage_logs_fields_and_a_nodes_metrics() -> None:
    line = event_line(LOGGED).plain
    assert line.endswith('drafted  chars=245 topic="retry budgets" path=/tmp/x/post.md'), line
    assert event_line(FINISHED).plain.endswith("draft 0.50s  output_tokens=77"), event_line(
        FINISHED
    ).plain
    assert event_line(STARTED).plain.endswith("run.started")  # routine data stays in --json


def test_the_console_sink_line_shows_them_too() -> None:
    assert _console_line(LOGGED).endswith(
        'drafted  chars=245 topic="retry budgets" path=/tmp/x/post.md'
    )
    assert _console_line(FINISHED).endswith("draft 0.50s  output_tokens=77.0")
    assert _console_line(STARTED).endswith("run.started")


def test_the_logs_line_after_a_wait_says_how_long_the_node_waited() -> None:
    from stageline.cli._timing import WaitClock

    data = {"attempt": 1, "try": 1}
    waiting = Event(
        run_id="r1", kind="node.waiting", node="g", data={**data, "duration": 0.25}, ts=100.0
    )
    passed = Event(
        run_id="r1", kind="node.succeeded", node="g", data={**data, "duration": 0.5}, ts=160.5
    )
    clock = WaitClock()
    assert clock.waited(waiting) is None
    assert clock.waited(passed) == 60.0  # from 100.0 to its second run's start, 160.0
    assert "(waited 1m00s)" in event_line(passed, 60.0).plain
