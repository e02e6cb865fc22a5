"""How long things took, one definition for every command that prints it.

- A run's duration runs from its creation to its end, or, for a run that stopped without
  ending (waiting for a person, failed, parked), to when it stopped; a queued or running run
  has none yet. Time it waited for people is in it. ``runs`` and the line a foreground command
  ends with (``✔ run R succeeded in 4.89s``) print this same figure.
- A node's *work* is the time its code ran; its *waited* time is the time it spent waiting for
  a person (a gate or a question): LangGraph runs such a node once up to its ``interrupt`` and
  again after the decision, and the ledger keeps one record from the first start to the last
  end. ``show`` prints the two apart; ``logs`` prints each run of the node's code with its work
  and, after a wait, how long it waited.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from stageline.ledger import Event, NodeRecord, NodeStatus, Run, RunStatus

__all__ = ["NodeTime", "WaitClock", "node_times", "run_duration"]

_ENDS = ("node.succeeded", "node.failed", "node.waiting")
"""The events that end one run of a node's code; each carries its ``duration`` (work)."""


def run_duration(run: Run) -> float | None:
    """From the run's creation to its end, or to where it stopped; None while it is live."""
    if run.finished_at is not None:
        return max(0.0, run.finished_at - run.created_at)
    if run.status in (RunStatus.QUEUED, RunStatus.RUNNING):
        return None
    return max(0.0, run.updated_at - run.created_at)


@dataclass(frozen=True)
class NodeTime:
    """One node record's time, split: its code ran ``work`` seconds and waited ``waited``."""

    work: float | None
    waited: float | None


def _key(node: str | None, data: Mapping[str, object]) -> tuple[str | None, object, object]:
    return (node, data.get("attempt"), data.get("try"))


def node_times(
    records: Iterable[NodeRecord], events: Iterable[Event], now: float | None = None
) -> list[NodeTime]:
    """Work and waited time of each record, in order, from the events that ended its code.

    A record that never waited worked all its duration; one that waited worked the sum of the
    durations its events report, and waited the rest (while it still waits: until ``now``).
    """
    work: dict[tuple[str | None, object, object], float] = {}
    waited: set[tuple[str | None, object, object]] = set()
    for event in events:
        took = event.data.get("duration")
        if event.kind not in _ENDS or not isinstance(took, int | float):
            continue
        key = _key(event.node, event.data)
        work[key] = work.get(key, 0.0) + float(took)
        if event.kind == "node.waiting":
            waited.add(key)
    times = []
    for record in records:
        key = (record.node, record.attempt, record.try_no)
        took = record.duration
        if key not in waited or took is None:
            times.append(NodeTime(work=took, waited=None))
            continue
        worked = min(work[key], took)
        if record.status is NodeStatus.WAITING:
            times.append(
                NodeTime(work=worked, waited=(now or time.time()) - record.started_at - worked)
            )
        else:
            times.append(NodeTime(work=worked, waited=took - worked))
    return times


class WaitClock:
    """For ``logs``, fed events in order: how long a node waited for a person before the run of
    its code that an event ends (from its ``node.waiting`` to the start of that run)."""

    def __init__(self) -> None:
        self._asked: dict[tuple[str | None, object, object], float] = {}

    def waited(self, event: Event) -> float | None:
        took = event.data.get("duration")
        if event.kind not in _ENDS or not isinstance(took, int | float):
            return None
        key = _key(event.node, event.data)
        began = self._asked.pop(key, None)
        if event.kind == "node.waiting":
            self._asked[key] = event.ts
        return None if began is None else max(0.0, event.ts - float(took) - began)
