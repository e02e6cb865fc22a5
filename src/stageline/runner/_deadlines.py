"""Deadlines of gates and questions: the sweeper applies each policy step when it is due.

A wait's policy is a list of steps (``remind``, ``escalate``, then one final step: ``reject``,
``default``, ``park`` or ``fail``). Remind and escalate only tell people; a final step decides
through the same path as a person (``Decisions``), with ``stageline sweep`` as its actor;
``park`` leaves the wait open and the run ``parked`` (a person's decision moves it on).
"""

from __future__ import annotations

import time
from typing import Any

from stageline.errors import AlreadyDecided, StagelineError
from stageline.ledger import Event, EventCategory, LedgerStore, RunStatus, Wait, WaitStatus
from stageline.runner._human import SWEEPER, Decisions
from stageline.runner._reads import pending_waits
from stageline.runner._waits import what

__all__ = ["Sweeper", "due_at"]

_FRACTIONS = {"remind": 0.5, "escalate": 0.75}
"""When remind and escalate are due, as a share of the time to the deadline."""


def due_at(wait: Wait, step: int) -> float | None:
    """When deadline step ``step`` (0-based) of ``wait`` is due; None if it has no deadline."""
    if wait.deadline_at is None:
        return None
    share = _FRACTIONS.get(wait.policy[step], 1.0)
    return wait.requested_at + share * (wait.deadline_at - wait.requested_at)


class Sweeper:
    """Applies what is due at the deadlines of the runs' pending waits."""

    def __init__(self, ledger: LedgerStore, decisions: Decisions) -> None:
        self.ledger = ledger
        self.decisions = decisions

    async def sweep(self, *, now: float | None = None) -> list[dict[str, Any]]:
        """Apply every deadline step that is due: remind, escalate, then the safe default."""
        done: list[dict[str, Any]] = []
        for wait in await pending_waits(self.ledger):
            for step in range(wait.policy_step, len(wait.policy)):
                due = due_at(wait, step)
                if due is None or due > (now or time.time()):
                    break
                action = wait.policy[step]
                if not await self.ledger.advance_policy(
                    wait.run_id,
                    wait.wait_id,
                    wait.round,
                    step=step + 1,
                    events=[_step_event(wait, action)],
                ):
                    break  # another sweeper took it, or someone decided meanwhile
                entry = {
                    "run_id": wait.run_id,
                    "kind": str(wait.kind),
                    "name": wait.name,
                    "wait_id": wait.wait_id,
                    "step": action,
                    "outcome": None,
                }
                if action not in ("remind", "escalate"):
                    entry["outcome"] = await self._expire(wait, action)
                done.append(entry)
        return done

    async def _expire(self, wait: Wait, action: str) -> str:
        """Apply a final deadline step; returns what became of the run."""
        try:
            if action == "reject":
                summary = await self.decisions.decide(
                    wait.run_id,
                    "reject",
                    gate=wait.name,
                    note="deadline passed",
                    actor=SWEEPER,
                    wait=wait,
                )
                return str(summary.status)
            if action == "default":
                summary = await self.decisions.answer(
                    wait.run_id, {}, defaults=True, actor=SWEEPER, wait=wait
                )
                return str(summary.status)
        except AlreadyDecided:
            return "decided by someone else first"
        except StagelineError as exc:
            await self.ledger.append_events(
                wait.run_id,
                [
                    Event(
                        run_id=wait.run_id,
                        kind=f"{wait.kind}.expiry_failed",
                        node=wait.node,
                        level="error",
                        category=EventCategory.ERROR,
                        message=f"could not apply `{action}` at the deadline: {exc}",
                    )
                ],
            )
            return f"error: {exc}"
        if action == "fail":
            settled = await self.ledger.settle_wait(
                wait.run_id,
                wait.wait_id,
                wait.round,
                WaitStatus.EXPIRED,
                reason="deadline passed (policy fail)",
                expect=[WaitStatus.PENDING],
            )
            if settled is None:
                return "decided by someone else first"
            error = f"deadline passed at {what(wait)} (policy fail)"
            failed = await self.ledger.transition(
                wait.run_id,
                RunStatus.FAILED,
                expect=[RunStatus.WAITING, RunStatus.PARKED],
                error=error,
                failure_phase="deadline",
                failed_node=wait.node,
                finished_at=time.time(),
                events=[
                    Event(
                        run_id=wait.run_id,
                        kind="run.failed",
                        level="critical",
                        category=EventCategory.ERROR,
                        node=wait.node,
                        message=error,
                        data={"failure_phase": "deadline"},
                    )
                ],
            )
            return str(failed.status)
        return await self._park(wait)

    async def _park(self, wait: Wait) -> str:
        """The run is ``parked``: its wait stays open for a person, with no deadline step left
        (a decision in the meantime leaves it as it is)."""
        why = f"deadline passed at {what(wait)}: parked, it waits for a person"
        try:
            parked = await self.ledger.transition(
                wait.run_id,
                RunStatus.PARKED,
                expect=[RunStatus.WAITING],
                events=[
                    Event(
                        run_id=wait.run_id,
                        kind="run.parked",
                        level="warning",
                        node=wait.node,
                        message=why,
                        data={"wait_id": wait.wait_id, "policy": "park"},
                    )
                ],
            )
        except StagelineError:
            return "decided by someone else first"
        return str(parked.status)


def _step_event(wait: Wait, action: str) -> Event:
    deadline = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(wait.deadline_at or 0))
    since = time.strftime("%H:%M:%S", time.localtime(wait.requested_at))
    waiting = f"{what(wait)} has waited since {since}"
    if action == "remind":
        return Event(
            run_id=wait.run_id,
            kind=f"{wait.kind}.reminded",
            node=wait.node,
            level="warning",
            message=f"reminder: {waiting}; deadline {deadline}",
            data={"wait_id": wait.wait_id, "deadline_at": wait.deadline_at},
        )
    if action == "escalate":
        return Event(
            run_id=wait.run_id,
            kind=f"{wait.kind}.escalated",
            node=wait.node,
            level="critical",
            message=f"escalated: {waiting}; deadline {deadline}",
            data={"wait_id": wait.wait_id, "deadline_at": wait.deadline_at},
        )
    said = {
        "reject": "rejecting it",
        "default": "answering with the defaults",
        "park": "parked: it waits for a person, with no deadline left",
        "fail": "the run fails",
    }[action]
    return Event(
        run_id=wait.run_id,
        kind=f"{wait.kind}.expired",
        node=wait.node,
        level="critical",
        message=f"deadline passed at {what(wait)}: {said}",
        data={"wait_id": wait.wait_id, "policy": action},
    )
