"""What the CLI prints: live progress, tables, run headers and JSON."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from stageline.cli._hints import failure_hint
from stageline.ledger import Event, NodeRecord, Run, RunStatus

if TYPE_CHECKING:
    from rich.console import Console, RenderableType
    from rich.table import Table
    from rich.text import Text

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


def _table() -> Table:
    """A borderless table, two spaces between columns, so it fits 80 columns."""
    from rich.table import Table

    return Table(box=None, pad_edge=False, padding=(0, 2, 0, 0), header_style="bold")


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


def _width() -> int:
    return console().width


def _with_errors(table: Table, errors: list[tuple[str, str]], wide: bool) -> RenderableType:
    """The table, and under it (when it has no error column) each error on a line of its own."""
    from rich.console import Group
    from rich.text import Text

    if wide or not errors:
        return table
    lines = [Text.assemble((f"{who}: ", "bold"), (error, "red")) for who, error in errors]
    return Group(table, Text(""), *lines)


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
    """The one-line outcome of a foreground run, and where to look next."""
    from rich.text import Text

    status = run.status
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
        f" in {seconds(elapsed)}",
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
                "  parked: out of rounds. approve grants more rounds (changes --note: "
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


def templates_table(infos: Iterable[TemplateInfo]) -> Table:
    table = _table()
    for column in ("name", "origin", "source"):
        table.add_column(column, overflow="fold")
    for info in infos:
        table.add_row(info.name, info.origin, info.source)
    return table


def runs_table(runs: Iterable[Run], width: int | None = None) -> RenderableType:
    """Runs, one a row, readable at 80 columns: nothing is cut. Narrower than ``WIDE`` the
    attempt column goes unless a run was retried, and errors go under the table."""
    rows = list(runs)
    wide = (width or _width()) >= WIDE
    retried = wide or any(r.attempt > 1 for r in rows)
    table = _table()
    table.add_column("run", no_wrap=True)
    table.add_column("template", overflow="fold", ratio=1)
    table.add_column("status", no_wrap=True)
    if retried:
        table.add_column("attempt", no_wrap=True)
    table.add_column("created", no_wrap=True)
    table.add_column("duration", no_wrap=True)
    if wide:
        table.add_column("error", overflow="fold", ratio=1)
    errors: list[tuple[str, str]] = []
    for run in rows:
        took = None if run.finished_at is None else run.finished_at - run.created_at
        cells: list[Any] = [run.run_id, run.template, status_text(run.status)]
        if retried:
            cells.append(str(run.attempt))
        cells += [when(run.created_at, "%Y-%m-%d %H:%M" if wide else "%m-%d %H:%M"), seconds(took)]
        if wide:
            cells.append(_first_line(run.error))
        elif run.error:
            errors.append((run.run_id, _first_line(run.error)))
        table.add_row(*cells)
    return _with_errors(table, errors, wide)


def run_header(run: Run) -> Table:
    from rich.table import Table
    from rich.text import Text

    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column(overflow="fold")
    grid.add_row("run", run.run_id)
    grid.add_row("template", run.template)
    grid.add_row("version", run.template_version)
    grid.add_row("status", status_text(run.status))
    grid.add_row("attempt", str(run.attempt))
    grid.add_row("created", when(run.created_at))
    grid.add_row("updated", when(run.updated_at))
    grid.add_row("finished", when(run.finished_at))
    if run.cancel_requested:
        grid.add_row("cancel", "requested")
    if run.status is RunStatus.FAILED or run.error:
        grid.add_row("error", Text(run.error or "-", style="red"))
        grid.add_row("phase", run.failure_phase or "-")
        grid.add_row("failed node", run.failed_node or "-")
    return grid


def records_table(records: Iterable[NodeRecord], width: int | None = None) -> RenderableType:
    """One row per node attempt; as ``runs_table``, errors go under it when narrow."""
    rows = list(records)
    wide = (width or _width()) >= WIDE
    retried = any(r.attempt > 1 for r in rows)
    table = _table()
    columns = [
        "node",
        *(["attempt"] if retried else []),
        "try",
        "status",
        "started",
        "duration",
        "metrics",
        *(["error"] if wide else []),
    ]
    for column in columns:
        table.add_column(
            column, no_wrap=column not in ("node", "metrics", "error"), overflow="fold"
        )
    errors: list[tuple[str, str]] = []
    for record in rows:
        error = _first_line(record.error)
        if error and record.failure_phase:
            error = f"[{record.failure_phase}] {error}"
        if error and not wide:
            errors.append((f"{record.node} (try {record.try_no})", error))
        table.add_row(
            record.node,
            *([str(record.attempt)] if retried else []),
            str(record.try_no),
            status_text(record.status),
            when(record.started_at, "%H:%M:%S"),
            seconds(record.duration),
            metrics_text(record.metrics, "\n"),
            *([error] if wide else []),
        )
    return _with_errors(table, errors, wide)


def event_line(event: Event) -> Text:
    """One event as a log line: time, sequence, category, kind, node, message."""
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
    if event.message:
        message = event.message
        if event.kind.startswith("harness."):  # agent output: one line each, as it came
            message = " ".join(message.split())
            message = message if len(message) <= 300 else message[:299] + "…"
        line.append(f"  {message}", style=style)
    return line
