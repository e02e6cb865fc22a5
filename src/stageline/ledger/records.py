"""The ledger's records: runs, node records and events, with their statuses."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

__all__ = [
    "Claimed",
    "Event",
    "EventCategory",
    "NodeRecord",
    "NodeStatus",
    "Run",
    "RunClaim",
    "RunStatus",
]


class RunStatus(StrEnum):
    QUEUED = "queued"  # created; no process has advanced it yet
    RUNNING = "running"  # a process holds its lease and is advancing it
    WAITING = "waiting"  # paused at a gate or question
    SUCCEEDED = "succeeded"  # reached the end of its graph
    FAILED = "failed"  # a node failed; `retry` continues from the checkpoint
    CANCELLED = "cancelled"  # stopped on request between steps
    REJECTED = "rejected"  # a gate rejected it
    PARKED = "parked"  # out of rounds, or past a deadline (park): waits for a person to decide
    TAKEN_OVER = "taken_over"  # a person took the parked work over (its branch stays theirs)
    STOPPED = "stopped"  # its process was stopped (Ctrl-C, SIGTERM) mid-step; `resume` continues

    @property
    def waits_for_person(self) -> bool:
        """Waiting at a gate or question, parked included: a decision can move it on."""
        return self in (RunStatus.WAITING, RunStatus.PARKED)

    @property
    def terminal(self) -> bool:
        return self in (
            RunStatus.SUCCEEDED,
            RunStatus.CANCELLED,
            RunStatus.REJECTED,
            RunStatus.TAKEN_OVER,
        )


class NodeStatus(StrEnum):
    RUNNING = "running"  # started; no outcome recorded yet
    SUCCEEDED = "succeeded"  # returned its update
    FAILED = "failed"  # raised; error and failure phase recorded
    WAITING = "waiting"  # interrupted for a person; its replay finishes this record


class EventCategory(StrEnum):
    LIFECYCLE = "lifecycle"  # run and node transitions
    LOG = "log"  # lines a stage logged
    TOOL = "tool"  # harness tool use, usage, warnings
    OUTPUT = "output"  # harness output
    ERROR = "error"  # errors


def _json(value: Any) -> str:
    return json.dumps(value, default=str, separators=(",", ":"))


def _load(text: str | None) -> Any:
    return json.loads(text) if text else {}


@dataclass(frozen=True, kw_only=True)
class Run:
    """One execution of a template."""

    run_id: str
    template: str
    template_version: str
    status: RunStatus
    attempt: int = 1
    inputs: Mapping[str, Any] = field(default_factory=dict)
    created_at: float = field(default_factory=time.time)
    updated_at: float = field(default_factory=time.time)
    finished_at: float | None = None
    error: str | None = None
    failure_phase: str | None = None
    failed_node: str | None = None
    lease_holder: str | None = None
    lease_expires_at: float | None = None
    cancel_requested: bool = False
    last_seq: int = 0

    def to_row(self) -> dict[str, Any]:
        row = {k: getattr(self, k) for k in self.__dataclass_fields__}
        row["status"] = str(self.status)
        row["inputs"] = _json(dict(self.inputs))
        return row

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Run:
        data = dict(row)
        data["status"] = RunStatus(data["status"])
        data["inputs"] = _load(data["inputs"])
        data["cancel_requested"] = bool(data["cancel_requested"])
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        row = self.to_row()
        row["inputs"] = dict(self.inputs)
        return row


@dataclass(frozen=True, kw_only=True)
class NodeRecord:
    """One attempt of one node; keyed by (run, LangGraph task, run attempt, try)."""

    run_id: str
    task_id: str
    attempt: int
    try_no: int
    node: str
    stage: str
    status: NodeStatus
    started_at: float
    finished_at: float | None = None
    metrics: Mapping[str, float] = field(default_factory=dict)
    error: str | None = None
    failure_phase: str | None = None

    @property
    def duration(self) -> float | None:
        return None if self.finished_at is None else self.finished_at - self.started_at

    def to_row(self) -> dict[str, Any]:
        row = {k: getattr(self, k) for k in self.__dataclass_fields__}
        row["status"] = str(self.status)
        row["metrics"] = _json(dict(self.metrics))
        return row

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> NodeRecord:
        data = dict(row)
        data["status"] = NodeStatus(data["status"])
        data["metrics"] = _load(data["metrics"])
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        row = self.to_row()
        row["metrics"] = dict(self.metrics)
        row["duration"] = self.duration
        return row


@dataclass(frozen=True, kw_only=True)
class Event:
    """A classified, timestamped fact about a run; ``seq`` is set when it is written."""

    run_id: str
    kind: str
    category: EventCategory = EventCategory.LIFECYCLE
    level: str = "info"
    node: str | None = None
    message: str = ""
    data: Mapping[str, Any] = field(default_factory=dict)
    ts: float = field(default_factory=time.time)
    seq: int = 0

    def to_row(self) -> dict[str, Any]:
        row = {k: getattr(self, k) for k in self.__dataclass_fields__}
        row["category"] = str(self.category)
        row["data"] = _json(dict(self.data))
        return row

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Event:
        data = dict(row)
        data["category"] = EventCategory(data["category"])
        data["data"] = _load(data["data"])
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        row = self.to_row()
        row["data"] = dict(self.data)
        return row

    def fields(self) -> dict[str, Any]:
        """The data a log line shows after the message: every field of a stage's log line; a
        node's metrics and failure phase (the rest is in the JSON)."""
        if self.category is EventCategory.LOG:
            return dict(self.data)
        if not self.kind.startswith("node."):
            return {}
        metrics = self.data.get("metrics")
        shown = dict(metrics) if isinstance(metrics, Mapping) else {}
        if self.data.get("failure_phase"):
            shown["failure_phase"] = self.data["failure_phase"]
        return shown


@dataclass(frozen=True, kw_only=True)
class RunClaim:
    """Taking a run's lease to advance it: the lease, the status it moves from and to, the
    fields set, the events written (``transition(lease=...)`` spelled as a value)."""

    holder: str
    ttl: float
    expect: tuple[RunStatus, ...]
    status: RunStatus = RunStatus.RUNNING
    fields: Mapping[str, Any] = field(default_factory=dict)
    events: tuple[Event, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Claimed:
    """What a claim found of its run, read in the claim's own transaction, under the lease."""

    run: Run
    saved: bool
    """Whether the run has a checkpoint (only the advance that claimed it can write one now)."""
    records: tuple[NodeRecord, ...] = ()
    """The run's node records, oldest first (none without a checkpoint: the first checkpoint
    precedes every node)."""
