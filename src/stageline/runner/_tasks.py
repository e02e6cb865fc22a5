"""Node records for nodes stageline did not wrap, from LangGraph's ``tasks`` stream.

A plain LangGraph graph's nodes (and the nodes of a graph a template adds with ``add_graph``)
carry no stageline code. LangGraph announces each task it runs (its id, node name, input) and
its result (writes, error, interrupts) on the ``tasks`` stream; ``TaskRecords`` turns those
into the same journal records and events a stageline stage leaves: one per task, parallel
``Send`` tasks told apart by their task ids, a subgraph's nodes named ``parent/node``. A node
that called a LangChain chat model gets its tokens (the ``usage_metadata`` of the AI messages
it wrote) and cost (where the provider's ``response_metadata`` gives one); each tool call it
asked for is a ``node.tool_call`` event with the tool's name and call id, never its arguments.
A task that LangGraph ran again under a ``RetryPolicy`` leaves a record per try, as a stage
does: the same task id, try 1, 2, ..., the earlier ones failed with their error (``TaskTries``,
a callback handler the graph runs with, sees the tries the stream does not show).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

from stageline.runner._journal import LedgerJournal
from stageline.runner._task_tries import TaskTries
from stageline.stages import input_shape

__all__ = ["TaskRecords"]

_COST_KEYS = ("cost", "total_cost")


class TaskRecords:
    """Records the tasks of the nodes ``plain`` names (and everything inside them)."""

    def __init__(self, journal: LedgerJournal, template: str, plain: frozenset[str]) -> None:
        self._journal = journal
        self._template = template
        self._plain = plain
        self._open: dict[str, tuple[str, int, float, str]] = {}
        """Task id -> (node, try, started, input shape) of the tasks begun, not yet ended."""
        self._parents: set[str] = set()
        """Task ids of the tasks that ran a subgraph (their inner nodes hold the metrics)."""
        self.tries = TaskTries()
        """The callback handler the graph runs with, to see every try of a task."""

    def observe(self, namespace: tuple[str, ...], event: Mapping[str, Any]) -> None:
        """Take one ``tasks`` stream event, from the graph at ``namespace``."""
        # A number in the namespace (a subgraph's task that ran again: ``work:<id>|1``) tells
        # the runs of one frame apart; it is no level of the path.
        namespace = tuple(part for part in namespace if not part.isdigit())
        if not self._records(namespace, str(event.get("name", ""))):
            return
        for part in namespace:
            self._parents.add(part.partition(":")[2])
        task_id = str(event.get("id"))
        node = "/".join([*(p.partition(":")[0] for p in namespace), str(event.get("name"))])
        if "input" in event:  # the task begins, unless its saved writes are only replayed
            if not self._journal.succeeded_before(task_id):
                self._begin(task_id, node, event.get("input"))
        elif task_id in self._open:
            self._end(task_id, event)

    def _records(self, namespace: tuple[str, ...], name: str) -> bool:
        head = namespace[0].partition(":")[0] if namespace else name
        return head in self._plain

    def _begin(self, task_id: str, node: str, given: Any) -> None:
        started = self._journal.node_started(
            node=node, task_id=task_id, try_no=1, stage=node.rpartition("/")[2]
        )
        self._open[task_id] = (node, started, time.time(), input_shape(given))

    def _retried(
        self, task_id: str, node: str, try_no: int, started: float, shape: str
    ) -> tuple[int, float]:
        """Record the tries of the task before its last one (each failed, with its error);
        returns the try number and start of the last one."""
        tries = self.tries.take(task_id)
        for number, earlier in enumerate(tries[:-1]):
            if number:
                try_no = self._journal.node_started(
                    node=node,
                    task_id=task_id,
                    try_no=number + 1,
                    stage=node.rpartition("/")[2],
                    at=earlier.started,
                )
                started = earlier.started
            error = _described(earlier.error) if earlier.error else "failed"
            self._finish(
                node, task_id, try_no, started, "failed", {}, error, shape, at=earlier.finished
            )
        if len(tries) > 1:
            started = tries[-1].started
            try_no = self._journal.node_started(
                node=node,
                task_id=task_id,
                try_no=len(tries),
                stage=node.rpartition("/")[2],
                at=started,
            )
        return try_no, started

    def _end(self, task_id: str, event: Mapping[str, Any]) -> None:
        node, try_no, started, shape = self._open.pop(task_id)
        try_no, started = self._retried(task_id, node, try_no, started, shape)
        error = event.get("error")
        writes = event.get("result")
        metrics: dict[str, float] = {}
        if task_id not in self._parents:  # a subgraph's nodes count what it wrote
            metrics = _metrics(writes)
            for call in _tool_calls(writes):
                self._journal.node_event(
                    node=node,
                    kind="node.tool_call",
                    level="info",
                    message=call[0],
                    data={"tool": call[0], "id": call[1], "try": try_no},
                )
        if event.get("interrupts"):
            self._finish(node, task_id, try_no, started, "waiting", metrics)
        elif error is not None:
            self._finish(
                node, task_id, try_no, started, "failed", metrics, _described(error), shape
            )
        else:
            self._finish(node, task_id, try_no, started, "succeeded", metrics, None, shape)

    def _finish(
        self,
        node: str,
        task_id: str,
        try_no: int,
        started: float,
        status: str,
        metrics: Mapping[str, float],
        error: str | None = None,
        shape: str | None = None,
        at: float | None = None,
    ) -> None:
        self._journal.node_finished(
            node=node,
            task_id=task_id,
            try_no=try_no,
            stage=node.rpartition("/")[2],
            status=status,
            started=started,
            metrics=metrics,
            error=error,
            failure_phase="node" if error else None,
            template=None if shape is None else self._template,
            input_shape=shape or "",
            at=at,
        )

    def close(self) -> None:
        """The graph stopped: a task begun and never ended was stopped before it finished (a
        sibling failed, the process was stopped); a resume runs it again as a new try."""
        for task_id in list(self._open):
            node, try_no, started, shape = self._open.pop(task_id)
            try_no, started = self._retried(task_id, node, try_no, started, shape)
            self._journal.node_finished(
                node=node,
                task_id=task_id,
                try_no=try_no,
                stage=node.rpartition("/")[2],
                status="failed",
                started=started,
                metrics={},
                error="interrupted: stopped before it finished",
                failure_phase="interrupted",
            )


def _described(error: BaseException) -> str:
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _messages(writes: Any) -> Iterable[Any]:
    """The messages among a task's writes (its returned update)."""
    values: Iterable[Any] = writes.values() if isinstance(writes, Mapping) else ()
    for value in values:
        for item in value if isinstance(value, list | tuple) else (value,):
            if getattr(item, "type", None) == "ai":
                yield item


def _metrics(writes: Any) -> dict[str, float]:
    """Tokens and cost of the chat model calls whose answers the task wrote."""
    totals: dict[str, float] = {}
    for message in _messages(writes):
        usage = getattr(message, "usage_metadata", None) or {}
        for key in ("input_tokens", "output_tokens"):
            if isinstance(usage.get(key), int | float):
                totals[key] = totals.get(key, 0) + float(usage[key])
        meta = getattr(message, "response_metadata", None) or {}
        for key in _COST_KEYS:
            if isinstance(meta.get(key), int | float):
                totals["cost"] = totals.get("cost", 0) + float(meta[key])
                break
    if totals:
        totals["llm_calls"] = float(sum(1 for _ in _messages(writes)))
    return totals


def _tool_calls(writes: Any) -> list[tuple[str, str]]:
    """(tool name, call id) of each tool call the task's AI messages asked for."""
    return [
        (str(call.get("name", "")), str(call.get("id") or ""))
        for message in _messages(writes)
        for call in getattr(message, "tool_calls", None) or ()
    ]
