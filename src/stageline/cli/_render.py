"""What the CLI prints: live progress, tables, run headers and JSON."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from stageline.cli._hints import failure_hint
from stageline.cli._tables import Col, console_width, fitted
from stageline.ledger import Event, NodeRecord, Run, RunStatus

if TYPE_CHECKING:
    from rich.console import Console, RenderableType
    from rich.text import Text

    from stageline.cli._timing import NodeTime
    from stageline.templates import TemplateInfo

# rich is imported where a table or a line is made, not here: `--help` and `--json` print
# nothing of rich's, and importing it is a sixth of `--help`'s start-up.

__all__ = [
    "ProgressSink",
    "console",
    "event_line",
    "print_json",
    "print_json_line",
    "records_table",
    "result_lines",
    "run_header",
    "runs_table",
    "templates_table",
]

_STATUS_STYLE = {
    "queued": "cyan",
    "running": "blue",
    "waiting": "yellow",
    "succeeded": "green",
    "failed": "red",
    "cancelled": "magenta",
    "rejected": "magenta",
    "parked": "yellow",
    "taken_over": "magenta",
}


def console() -> Console:
    """A console on stdout; markup and highlighting off so run data prints as it is."""
    from rich.console import Console

    return Console(highlight=False, markup=False, soft_wrap=True)


def print_json(data: Any) -> None:
    """JSON, and nothing else, on stdout."""
    sys.stdout.write(json.dumps(data, indent=2, default=str, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def print_json_line(data: Any) -> None:
    """One JSON document on one line (JSON Lines), for streams."""
    sys.stdout.write(json.dumps(data, default=str, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def when(ts: float | None, fmt: str = "%Y-%m-%d %H:%M:%S") -> str:
    if ts is None:
        return "-"
    return datetime.fromtimestamp(ts).strftime(fmt)


def seconds(value: float | None) -> str:
    if value is None:
        return "-"
    if value < 60:
        return f"{value:.2f}s"
    minutes, rest = divmod(int(value), 60)
    if minutes < 60:
        return f"{minutes}m{rest:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def _number(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if float(value).is_integer() or abs(value) >= 1000:
        return str(round(value))
    return f"{value:.3f}".rstrip("0").rstrip(".")


def metrics_text(metrics: Mapping[str, Any], sep: str = " ") -> str:
    return sep.join(f"{k}={_number(v)}" for k, v in metrics.items())


def status_text(status: str) -> Text:
    from rich.text import Text

    return Text(str(status), style=_STATUS_STYLE.get(str(status), ""))


def _first_line(text: str | None) -> str:
    """The first line of an error, whole: human output wraps, it never cuts (the rest of a
    multi-line error, such as a traceback, is in ``show --json`` and the logs)."""
    return (text or "").strip().splitlines()[0] if (text or "").strip() else ""


WIDE = 120
"""Columns from which tables show errors in a column of their own; narrower, each error is
printed whole on a line of its own under the table."""


# -- live progress ---------------------------------------------------------------------------


class ProgressSink:
    """Prints each node as it starts and ends, with the time since the command began."""

    def __init__(self, out: Console) -> None:
        self._out = out
        self._began = time.monotonic()

    def emit(self, event: Event, **future_kwargs: Any) -> None:
        from rich.text import Text

        line = _progress(event)
        if line is None:
            return
        clock = Text(f"{time.monotonic() - self._began:7.2f}s  ", style="dim")
        self._out.print(Text.assemble(clock, line))


def _try(event: Event) -> str:
    tried = event.data.get("try", 1)
    return f" (try {tried})" if isinstance(tried, int) and tried > 1 else ""


def _progress(event: Event) -> Text | None:
    from rich.text import Text

    node = event.node or "?"
    took = event.data.get("duration")
    took_text = f" {seconds(took)}" if isinstance(took, int | float) else ""
    if event.kind == "node.started":
        return Text.assemble(("▶ ", "blue"), node, (_try(event), "dim"))
    if event.kind == "node.succeeded":
        return Text.assemble(("✔ ", "green"), node, (took_text, "dim"))
    if event.kind == "node.failed":
        return Text.assemble(
            ("✖ ", "red"),
            node,
            (_try(event), "dim"),
            ": ",
            (_first_line(event.message) or "failed", "red"),
        )
    if event.kind == "node.waiting":
        return Text.assemble(("⏸ ", "yellow"), node, " is waiting for a person")
    if event.kind in ("gate.decided", "question.answered"):
        return Text.assemble(("➜ ", "cyan"), event.message)
    if event.kind.endswith(".rolled_back") or event.kind.endswith(".refused"):
        return Text(event.message, style="yellow")
    if event.kind == "run.drained":
        return Text(f"run stopped between steps: {event.message}", style="yellow")
    if event.kind in _AGENT_LINES:  # what the agent does, as it does it: one line each
        mark, style = _AGENT_LINES[event.kind]
        return Text.assemble(
            ("  " + mark + " ", style),
            (node, "dim"),
            " ",
            (_first_line(event.message) or event.kind[8:], style),
        )
    if event.kind == "operation.stopped":
        return Text.assemble(
            ("  ■ ", "yellow"), node, ": agent stopped: ", (event.message, "yellow")
        )
    return None


_AGENT_LINES = {
    "harness.tool_use": (">", "cyan"),
    "harness.helper_agent": (">>", "cyan"),
    "harness.message": ("~", ""),
    "harness.error": ("!", "red"),
}


def result_lines(run: Run, state: Mapping[str, Any], elapsed: float) -> list[Text]:
    """The one-line outcome of a foreground run, and where to look next.

    The time printed is the run's duration as ``runs`` prints it (``run_duration``); when the
    run began before this command (``elapsed`` seconds ago: it waited, or was queued), the
    command's own time follows it."""
    from rich.text import Text

    from stageline.cli._timing import run_duration

    status = run.status
    took = run_duration(run)
    this = time.time() - elapsed
    own = f" (this command: {seconds(elapsed)})" if run.created_at < this - 1.0 else ""
    head = Text.assemble(
        (
            "✔ "
            if status is RunStatus.SUCCEEDED
            else "✖ "
            if status.terminal or status is RunStatus.FAILED
            else "⏸ ",
            _STATUS_STYLE.get(str(status), ""),
        ),
        f"run {run.run_id} ",
        status_text(status),
        f" in {seconds(took if took is not None else elapsed)}{own}",
    )
    for key, value in state.items():
        if key.endswith("_path") and value:
            head.append(f"  {key}: {value}")
    lines = [head]
    if status is RunStatus.FAILED:
        where = f" at node {run.failed_node}" if run.failed_node else ""
        phase = f" ({run.failure_phase})" if run.failure_phase else ""
        lines.append(Text(f"  failed{where}{phase}: {(run.error or '').strip()}", style="red"))
        lines.append(Text(f"  {failure_hint(run)}", style="dim"))
    if status is RunStatus.QUEUED:
        lines.append(Text(f"  continue with: stageline resume {run.run_id}", style="dim"))
    if status is RunStatus.PARKED:
        lines.append(
            Text(
                "  parked (out of rounds, or past a deadline: stageline pending shows what "
                "waits). At a park gate approve grants more rounds (changes --note: "
                "with your guidance); takeover leaves the work to you (stageline takeover "
                f"{run.run_id}); reject ends the run",
                style="yellow",
            )
        )
    if status is RunStatus.TAKEN_OVER:
        branch = state.get("branch")
        lines.append(
            Text(
                "  taken over: the work is yours"
                + (f", on branch {branch} in worktree {state.get('worktree')}" if branch else ""),
                style="magenta",
            )
        )
    lines.append(Text(f"  details: stageline show {run.run_id}", style="dim"))
    return lines


# -- tables ----------------------------------------------------------------------------------


def templates_table(infos: Iterable[TemplateInfo]) -> RenderableType:
    cols = [Col(name="name"), Col(name="origin", keep=5), Col(name="source", keep=1, under=True)]
    return fitted(cols, [[i.name, i.origin, i.source] for i in infos])


def runs_table(runs: Iterable[Run], width: int | None = None) -> RenderableType:
    """Runs, one a row; nothing is cut (see ``_tables``). The attempt column shows when a run
    was retried; errors get a column from ``WIDE`` columns on, and go under the table below.
    The duration is ``run_duration``'s: what the command that advanced the run printed last."""
    from stageline.cli._timing import run_duration

    rows = list(runs)
    width = width or console_width()
    wide = width >= WIDE
    retried = wide or any(r.attempt > 1 for r in rows)
    cols = [
        Col(name="run"),
        Col(name="template", wrap=True),
        Col(name="status"),
        *([Col(name="attempt", keep=3, right=True)] if retried else []),
        Col(name="created", keep=1),
        Col(name="duration", keep=2, right=True),
        Col(name="error", wrap=True, under=True, keep=0, at_least=WIDE),
    ]
    cells = [
        [
            run.run_id,
            run.template,
            status_text(run.status),
            *([str(run.attempt)] if retried else []),
            when(run.created_at, "%Y-%m-%d %H:%M" if wide else "%m-%d %H:%M"),
            seconds(run_duration(run)),
            _first_line(run.error),
        ]
        for run in rows
    ]
    return fitted(cols, cells, width=width)


def run_header(run: Run) -> RenderableType:
    """The run's facts, one ``name  value`` line each; a value is never folded or cut (a
    multi-line error continues on indented lines)."""
    from rich.console import Group
    from rich.text import Text

    from stageline.cli._timing import run_duration

    facts: list[tuple[str, str | Text]] = [
        ("run", run.run_id),
        ("template", run.template),
        ("version", run.template_version),
        ("status", status_text(run.status)),
        ("attempt", str(run.attempt)),
        ("created", when(run.created_at)),
        ("updated", when(run.updated_at)),
        ("finished", when(run.finished_at)),
        ("duration", seconds(run_duration(run))),
    ]
    if run.cancel_requested:
        facts.append(("cancel", "requested"))
    if run.status is RunStatus.FAILED or run.error:
        facts.append(("error", Text(run.error or "-", style="red")))
        facts.append(("phase", run.failure_phase or "-"))
        facts.append(("failed node", run.failed_node or "-"))
    pad = max(len(name) for name, _ in facts) + 2
    lines: list[Text] = []
    for name, value in facts:
        text = value if isinstance(value, Text) else Text(value)
        for i, part in enumerate(text.split("\n") or [text]):
            lines.append(Text.assemble((f"{name if i == 0 else '':<{pad}}", "bold"), part))
    return Group(*lines)


def records_table(
    records: Iterable[NodeRecord],
    width: int | None = None,
    *,
    times: Sequence[NodeTime] | None = None,
) -> RenderableType:
    """One row per node attempt: its work and the time it waited for a person apart (``times``,
    from ``node_times``); as ``runs_table``, errors and what does not fit go under it."""
    rows = list(records)
    width = width or console_width()
    split = times if times is not None else [None] * len(rows)
    retried = any(r.attempt > 1 for r in rows)
    waited = any(t is not None and t.waited is not None for t in split)
    cols = [
        Col(name="node", wrap=True),
        *([Col(name="attempt", right=True)] if retried else []),
        Col(name="try", keep=4, right=True),
        Col(name="status"),
        Col(name="started", keep=1),
        Col(name="work", keep=6, right=True),
        *([Col(name="waited", keep=5, right=True)] if waited else []),
        Col(name="metrics", wrap=True, under=True, keep=3),
        Col(name="error", wrap=True, under=True, keep=0, at_least=WIDE),
    ]
    cells: list[list[Any]] = []
    labels: list[str] = []
    for record, took in zip(rows, split, strict=True):
        error = _first_line(record.error)
        if error and record.failure_phase:
            error = f"[{record.failure_phase}] {error}"
        labels.append(f"{record.node} (try {record.try_no})")
        cells.append(
            [
                record.node,
                *([str(record.attempt)] if retried else []),
                str(record.try_no),
                status_text(record.status),
                when(record.started_at, "%H:%M:%S"),
                seconds(record.duration if took is None else took.work),
                *([seconds(None if took is None else took.waited)] if waited else []),
                metrics_text(record.metrics),
                error,
            ]
        )
    return fitted(cols, cells, width=width, labels=labels)


def event_line(event: Event, waited: float | None = None) -> Text:
    """One event as a log line: time, sequence, category, kind, node, the work a node's code
    took (and ``waited`` for a person before it, from ``WaitClock``), message, then the
    event's fields as ``key=value`` (a node's metrics; a stage log's own fields)."""
    from rich.text import Text

    stamp = datetime.fromtimestamp(event.ts).strftime("%H:%M:%S.%f")[:-3]
    style = {"error": "red", "critical": "bold red", "warning": "yellow"}.get(event.level, "")
    line = Text.assemble(
        (f"{stamp} #{event.seq:<4} ", "dim"), (f"{event.category:<9} ", "dim"), (event.kind, style)
    )
    if event.node:
        line.append(f" {event.node}")
    took = event.data.get("duration")
    if isinstance(took, int | float):
        line.append(f" {seconds(took)}", style="dim")
    if waited is not None:
        line.append(f" (waited {seconds(waited)})", style="dim")
    if event.message:
        message = event.message
        if event.kind.startswith("harness."):  # agent output: one line each, as it came
            message = " ".join(message.split())
            message = message if len(message) <= 300 else message[:299] + "…"
        line.append(f"  {message}", style=style)
    fields = event.fields()
    if fields:
        line.append("  " + " ".join(f"{k}={_value(v)}" for k, v in fields.items()), style="dim")
    return line


def _value(value: Any) -> str:
    if isinstance(value, str):
        return value if value and not any(c.isspace() for c in value) else json.dumps(value)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return _number(value)
    return json.dumps(value, default=str, ensure_ascii=False)
