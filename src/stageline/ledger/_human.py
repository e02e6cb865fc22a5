"""What the ledger keeps about people and side effects: waits (gates, questions) and effects."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from stageline.errors import AlreadyDecided
from stageline.ledger.records import Event

__all__ = [
    "INBOX_TYPES",
    "Effect",
    "EffectStatus",
    "SettleRound",
    "Wait",
    "WaitChanges",
    "WaitKind",
    "WaitStatus",
    "already_decided",
]


class WaitKind(StrEnum):
    GATE = "gate"  # a person approves, rejects or asks for changes
    QUESTION = "question"  # a person answers a question set
    INTERRUPT = "interrupt"  # a person answers a graph's own ``interrupt(value)`` with a value
    CI = "ci"  # the forge's CI run ends (its webhook, or a poll); never a person


INBOX_TYPES = {
    "accept": "allow_accept",
    "edit": "allow_edit",
    "response": "allow_respond",
    "ignore": "allow_ignore",
}
"""Agent-Inbox response types to a ``HumanInterrupt``, and the ``config`` key allowing each."""


class WaitStatus(StrEnum):
    PENDING = "pending"  # asked; nobody has decided or answered yet
    DECIDED = "decided"  # a decision or answer is recorded; the resume that applies it is under way
    APPLIED = "applied"  # the run took it: it went past the gate, or the node has the answer
    ROLLED_BACK = "rolled_back"  # the resume failed before the run took it; asked again
    REFUSED = "refused"  # the node refused it as stale (another attempt or state); asked again
    EXPIRED = "expired"  # its deadline passed and the `fail` policy failed the run
    CLOSED = "closed"  # the run stopped waiting for it (cancelled, or asked again in a new attempt)

    @property
    def open(self) -> bool:
        """Still pending or being applied."""
        return self in (WaitStatus.PENDING, WaitStatus.DECIDED)


def _json(value: Any) -> str:
    return json.dumps(value, default=str, separators=(",", ":"))


def _load(text: str | None, empty: Any = None) -> Any:
    return json.loads(text) if text else empty


@dataclass(frozen=True, kw_only=True)
class Wait:
    """One round of a gate or question set a run waits on, and what a person said to it.

    ``wait_id`` names the request (a gate visit, or a question set's stable id); a request is
    asked again in a new ``round`` after a rollback, a refusal or a retry.
    """

    run_id: str
    wait_id: str
    round: int = 1
    kind: WaitKind
    name: str
    """The gate's name, or the question node's name."""
    node: str
    attempt: int
    interrupt_id: str
    payload: Mapping[str, Any] = field(default_factory=dict)
    """The interrupt payload: state hash, questions, what a reviewer should see."""
    requested_at: float = field(default_factory=time.time)
    deadline_at: float | None = None
    policy: tuple[str, ...] = ()
    """Deadline steps applied in order, e.g. ``("remind", "escalate", "reject")``."""
    policy_step: int = 0
    """How many of ``policy`` the sweeper has applied."""
    status: WaitStatus = WaitStatus.PENDING
    response: Mapping[str, Any] | None = None
    """The decision (``{"decision": ..., ...}``) or the answers (``{"answers": {...}, ...}``)."""
    actor: str | None = None
    note: str | None = None
    decided_at: float | None = None
    settled_at: float | None = None
    reason: str | None = None
    """Why it was rolled back, refused, expired or closed."""

    @property
    def token(self) -> str:
        """Identifies this round's response inside the run's checkpoint."""
        return f"{self.wait_id}#{self.round}"

    @property
    def inbox_allows(self) -> list[str]:
        """The Agent-Inbox responses an interrupt asking a ``HumanInterrupt`` allows (none for
        any other wait)."""
        if self.kind is not WaitKind.INTERRUPT or not self.payload.get("human"):
            return []
        config = (self.payload.get("inbox") or {}).get("config") or {}
        return [kind for kind, key in INBOX_TYPES.items() if config.get(key)]

    @property
    def decision(self) -> str | None:
        return None if self.response is None else self.response.get("decision")

    @property
    def state_hash(self) -> str | None:
        return self.payload.get("state_hash")

    def to_row(self) -> dict[str, Any]:
        row = {k: getattr(self, k) for k in self.__dataclass_fields__}
        row["kind"], row["status"] = str(self.kind), str(self.status)
        row["payload"] = _json(dict(self.payload))
        row["policy"] = _json(list(self.policy))
        row["response"] = None if self.response is None else _json(dict(self.response))
        return row

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Wait:
        data = dict(row)
        data["kind"], data["status"] = WaitKind(data["kind"]), WaitStatus(data["status"])
        data["payload"] = _load(data["payload"], {})
        data["policy"] = tuple(_load(data["policy"], []))
        data["response"] = _load(data["response"])
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        row = self.to_row()
        row.update(
            payload=dict(self.payload),
            policy=list(self.policy),
            response=None if self.response is None else dict(self.response),
        )
        if self.kind is WaitKind.GATE:
            row["decision"] = self.decision
        elif self.kind is WaitKind.CI:
            row["ci"] = None if self.response is None else self.response.get("ci")
        elif self.kind is WaitKind.INTERRUPT:
            row["value"] = self.payload.get("value")
            row["answer"] = None if self.response is None else self.response.get("value")
        else:
            row["answers"] = None if self.response is None else self.response.get("answers")
        return row


@dataclass(frozen=True, kw_only=True)
class SettleRound:
    """A decided round moved on by the advance that applied (or failed to apply) it."""

    wait: Wait
    """The round as read, ``decided``."""
    status: WaitStatus
    reason: str | None = None
    reopen: bool = False
    """Ask it again in a new pending round."""
    events: Sequence[Event] = ()


@dataclass(frozen=True, kw_only=True)
class WaitChanges:
    """What an advance's ending does to its run's waits, committed with the ending itself
    (``SqlLedger.end_advance``): rounds settled, then new rounds asked."""

    settle: Sequence[SettleRound] = ()
    asked: Sequence[Wait] = ()
    asked_events: Sequence[Event] = ()

    def __bool__(self) -> bool:
        return bool(self.settle or self.asked)


class EffectStatus(StrEnum):
    STARTED = "started"  # about to run, or running, or the process stopped while it ran
    DONE = "done"  # ran; its result is kept


@dataclass(frozen=True, kw_only=True)
class Effect:
    """A side effect a stage ran through ``ctx.effect``: at most once per (run, node, key)."""

    run_id: str
    node: str
    key: str
    attempt: int
    status: EffectStatus = EffectStatus.STARTED
    result: Any = None
    started_at: float = field(default_factory=time.time)
    finished_at: float | None = None

    def to_row(self) -> dict[str, Any]:
        row = {k: getattr(self, k) for k in self.__dataclass_fields__}
        row["status"] = str(self.status)
        row["result"] = _json(self.result)
        return row

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Effect:
        data = dict(row)
        data["status"] = EffectStatus(data["status"])
        data["result"] = _load(data["result"])
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        return {
            k: getattr(self, k) if k != "status" else str(self.status)
            for k in self.__dataclass_fields__
        }


def already_decided(found: Wait) -> AlreadyDecided:
    """The error for a second decision or answer: says who came first."""
    what = {
        WaitKind.GATE: f"gate {found.name!r}",
        WaitKind.QUESTION: f"question set {found.wait_id}",
        WaitKind.CI: f"the CI wait at node {found.node!r}",
    }.get(found.kind, f"interrupt {found.wait_id} at node {found.node!r}")
    if found.status is WaitStatus.PENDING:
        return AlreadyDecided(f"{what} of run {found.run_id} changed while deciding; try again")
    said = (
        {"approve": "approved", "reject": "rejected", "changes": "sent back for changes"}.get(
            found.decision or "", "decided"
        )
        if found.kind is WaitKind.GATE
        else "answered"
    )
    who = f" by {found.actor}" if found.actor else ""
    at = time.strftime(" at %H:%M:%S", time.localtime(found.decided_at)) if found.decided_at else ""
    status = "" if found.status is WaitStatus.DECIDED else f", now {found.status}"
    return AlreadyDecided(
        f"{what} of run {found.run_id} was already {said}{who}{at}{status}; "
        "the first decision stands and this one was not recorded"
    )
