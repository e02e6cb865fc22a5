"""The runner's part for people: decide gates, answer questions, list what waits, sweep deadlines.

Every decision takes one path: check it, record it in the ledger (the database decides who was
first), then resume the run with ``Command(resume={interrupt id: decision})`` through the
runner's own claim-and-advance. What the sweeper decides on a deadline takes the same path.
"""

from __future__ import annotations

import getpass
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from langgraph.types import Command

from stageline.errors import (
    AlreadyDecided,
    InvalidTransition,
    StagelineError,
    StaleDecision,
    UsageError,
)
from stageline.ledger import (
    Event,
    EventCategory,
    NodeRecord,
    Run,
    RunClaim,
    RunStatus,
    Wait,
    WaitKind,
    WaitStatus,
    already_decided,
)
from stageline.runner._reads import pending_waits, waiting_on
from stageline.runner._support import RunSummary
from stageline.runner._trust import check_checkpoint
from stageline.runner._waits import what
from stageline.stages import validate_answers

if TYPE_CHECKING:
    from langgraph.checkpoint.base import BaseCheckpointSaver

    from stageline.config import Settings
    from stageline.ledger import LedgerStore
    from stageline.templates import Template

__all__ = ["SWEEPER", "HumanMixin", "due_at"]

SWEEPER = "stageline sweep"
"""The actor of what the sweeper decides."""
_FRACTIONS = {"remind": 0.5, "escalate": 0.75}
"""When remind and escalate are due, as a share of the time to the deadline."""


def due_at(wait: Wait, step: int) -> float | None:
    """When deadline step ``step`` (0-based) of ``wait`` is due; None if it has no deadline."""
    if wait.deadline_at is None:
        return None
    share = _FRACTIONS.get(wait.policy[step], 1.0)
    return wait.requested_at + share * (wait.deadline_at - wait.requested_at)


def _actor(actor: str | None) -> str:
    if actor:
        return actor
    try:
        return getpass.getuser()
    except Exception:  # no user name to be had (containers)
        return "unknown"


class HumanMixin:
    """Mixed into ``Runner``."""

    if TYPE_CHECKING:
        ledger: LedgerStore
        settings: Settings

        def _checked_template(self, run: Run, force: bool) -> Template: ...
        def _saver(self, template: Template) -> BaseCheckpointSaver[Any]: ...
        async def _services(self, given: Mapping[str, Any] | None) -> Mapping[str, Any]: ...
        async def _claim(
            self, run: Run, template: Template, kind: str, *, attempt: int | None = None
        ) -> str: ...
        def _claim_of(
            self, run: Run, template: Template, kind: str, *, attempt: int | None = None
        ) -> RunClaim: ...
        async def _advance(
            self,
            run: Run,
            template: Template,
            payload: Any,
            services: Mapping[str, Any],
            *,
            holder: str,
            fresh: bool = False,
            earlier: Sequence[NodeRecord] | None = None,
        ) -> RunSummary: ...

    # -- deciding ---------------------------------------------------------------------------

    async def approve(
        self,
        run_id: str,
        *,
        gate: str | None = None,
        note: str | None = None,
        actor: str | None = None,
        attempt: int | None = None,
        state_hash: str | None = None,
        services: Mapping[str, Any] | None = None,
        force: bool = False,
        wait_id: str | None = None,
        seen_at: float | None = None,
    ) -> RunSummary:
        """Approve the gate the run waits at; the run goes on past it.

        The decision binds to one visit of the gate: ``wait_id`` (the visit the caller showed),
        else the visit that was waiting at ``seen_at`` (when the caller looked; a CLI command's
        start). If that visit was decided meanwhile, ``AlreadyDecided`` names the decision that
        won, even when the run has come back to the gate since."""
        return await self._decide(
            run_id,
            "approve",
            gate=gate,
            note=note,
            actor=actor,
            attempt=attempt,
            state_hash=state_hash,
            services=services,
            force=force,
            wait_id=wait_id,
            seen_at=seen_at,
        )

    async def reject(
        self,
        run_id: str,
        *,
        gate: str | None = None,
        note: str | None = None,
        actor: str | None = None,
        attempt: int | None = None,
        state_hash: str | None = None,
        services: Mapping[str, Any] | None = None,
        force: bool = False,
        wait_id: str | None = None,
        seen_at: float | None = None,
    ) -> RunSummary:
        """Reject: the run ends ``rejected``, or follows the gate's reject route (bound to a
        visit as ``approve`` is)."""
        return await self._decide(
            run_id,
            "reject",
            gate=gate,
            note=note,
            actor=actor,
            attempt=attempt,
            state_hash=state_hash,
            services=services,
            force=force,
            wait_id=wait_id,
            seen_at=seen_at,
        )

    async def take_over(
        self,
        run_id: str,
        *,
        gate: str | None = None,
        note: str | None = None,
        actor: str | None = None,
        attempt: int | None = None,
        state_hash: str | None = None,
        services: Mapping[str, Any] | None = None,
        force: bool = False,
        wait_id: str | None = None,
        seen_at: float | None = None,
    ) -> RunSummary:
        """Take over a parked run: it ends ``taken_over``, its branch and worktree left for the
        person (the ``run.taken_over`` event says where). Only a park gate takes this."""
        return await self._decide(
            run_id,
            "takeover",
            gate=gate,
            note=note,
            actor=actor,
            attempt=attempt,
            state_hash=state_hash,
            services=services,
            force=force,
            wait_id=wait_id,
            seen_at=seen_at,
        )

    async def request_changes(
        self,
        run_id: str,
        *,
        note: str,
        gate: str | None = None,
        actor: str | None = None,
        attempt: int | None = None,
        state_hash: str | None = None,
        services: Mapping[str, Any] | None = None,
        force: bool = False,
        wait_id: str | None = None,
        seen_at: float | None = None,
    ) -> RunSummary:
        """Send the run back to the gate's ``changes_to`` node with ``note`` as its feedback
        (bound to a visit as ``approve`` is)."""
        if not note or not note.strip():
            raise UsageError("a request for changes needs a note saying what to change")
        return await self._decide(
            run_id,
            "changes",
            gate=gate,
            note=note,
            actor=actor,
            attempt=attempt,
            state_hash=state_hash,
            services=services,
            force=force,
            wait_id=wait_id,
            seen_at=seen_at,
        )

    async def _decide(
        self,
        run_id: str,
        decision: str,
        *,
        gate: str | None,
        note: str | None,
        actor: str | None,
        attempt: int | None,
        state_hash: str | None,
        services: Mapping[str, Any] | None,
        force: bool,
        wait: Wait | None = None,
        wait_id: str | None = None,
        seen_at: float | None = None,
    ) -> RunSummary:
        def respond(run: Run, found: Wait) -> dict[str, Any]:
            said = f"{decision} for {what(found)} of run {run_id}"
            if attempt is not None and attempt != found.attempt:
                raise StaleDecision(
                    f"stale: this {said} was made for attempt {attempt}, but the run now waits "
                    f"there in attempt {found.attempt}; look again (`stageline pending "
                    f"{run_id}`) and decide on what it shows now"
                )
            if state_hash is not None and state_hash != found.state_hash:
                raise StaleDecision(
                    f"stale: this {said} was made on state {state_hash}, but the state at the "
                    f"gate is now {found.state_hash}; look again and decide on what it is now"
                )
            if found.attempt != run.attempt:
                raise StaleDecision(
                    f"stale: {what(found)} was asked in attempt "
                    f"{found.attempt}, the run is at attempt {run.attempt}"
                )
            if decision == "takeover" and not found.payload.get("park"):
                raise InvalidTransition(
                    f"{what(found)} is not a park gate; only a parked run can be taken over "
                    "(approve or reject)"
                )
            if decision == "changes":
                if found.payload.get("changes_to") is None:
                    raise InvalidTransition(f"{what(found)} takes no changes; approve or reject")
                if found.payload.get("changes_left") == 0:
                    raise InvalidTransition(
                        f"{what(found)} has no rounds of changes left; approve or reject"
                    )
            return {
                "decision": decision,
                "note": note,
                "actor": _actor(actor),
                "attempt": found.attempt,
                "state_hash": found.state_hash,
            }

        return await self._respond(
            run_id,
            WaitKind.GATE,
            gate,
            respond,
            actor=actor,
            note=note,
            services=services,
            force=force,
            wait=wait,
            bind=(wait_id, seen_at),
        )

    async def answer(
        self,
        run_id: str,
        answers: Mapping[str, Any],
        *,
        question_id: str | None = None,
        actor: str | None = None,
        defaults: bool = False,
        services: Mapping[str, Any] | None = None,
        force: bool = False,
        wait: Wait | None = None,
        seen_at: float | None = None,
    ) -> RunSummary:
        """Answer the question set the run waits on (checked first: nothing is recorded for an
        answer that does not fit); ``defaults`` fills unanswered questions with their defaults.
        ``seen_at`` binds the answer to the set that was waiting then (see ``approve``)."""

        def respond(run: Run, found: Wait) -> dict[str, Any]:
            questions = found.payload.get("question_set", {}).get("questions", [])
            checked = validate_answers(questions, answers, defaults=defaults)
            return {"question_id": found.wait_id, "answers": checked, "actor": _actor(actor)}

        return await self._respond(
            run_id,
            WaitKind.QUESTION,
            question_id,
            respond,
            actor=actor,
            note=None,
            services=services,
            force=force,
            wait=wait,
            bind=(None, seen_at),
        )

    async def _respond(
        self,
        run_id: str,
        kind: WaitKind,
        name: str | None,
        respond: Callable[[Run, Wait], dict[str, Any]],
        *,
        actor: str | None,
        note: str | None,
        services: Mapping[str, Any] | None,
        force: bool,
        wait: Wait | None,
        bind: tuple[str | None, float | None] = (None, None),
    ) -> RunSummary:
        run = await self.ledger.get_run(run_id)
        waits = await self.ledger.waits(run_id)
        if wait is None and (bind[0] is not None or bind[1] is not None):
            wait = _bound(waits, kind, name, run_id, *bind)
        if wait is None:
            mine = [w for w in waits if w.kind is kind and (name is None or _named(w, name))]
            taken = [w for w in mine if w.status in (WaitStatus.DECIDED, WaitStatus.APPLIED)]
            latest = max(taken, key=lambda w: w.decided_at or 0) if taken else None
            if (
                latest is not None
                and not any(w.status is WaitStatus.PENDING for w in mine)
                and (
                    name is not None
                    or latest.status is WaitStatus.DECIDED
                    or not run.status.waits_for_person
                )
            ):  # someone came first (a race, or a second answer): the first one stands
                raise already_decided(latest)
        if not run.status.waits_for_person:
            raise InvalidTransition(f"run {run_id} is {run.status}, not waiting for a person")
        made = self._checked_template(run, force)
        services = await self._services(services)
        found = wait or _pick(
            [w for w in waits if w.status is WaitStatus.PENDING], kind, name, run_id
        )
        response = {**respond(run, found), "token": found.token}
        # Nothing is recorded, and the run does not move, on a checkpoint stageline did not write.
        await check_checkpoint(self._saver(made), run_id, waits, found.node)
        said = response.get("decision") or "answered"
        decided = [
            Event(
                run_id=run_id,
                node=found.node,
                kind="gate.decided" if kind is WaitKind.GATE else "question.answered",
                message=f"{what(found)}: {said} by {response['actor']}"
                + (f": {note}" if note else ""),
                data={
                    "wait_id": found.wait_id,
                    "round": found.round,
                    "decision": said,
                    "actor": response["actor"],
                    "attempt": found.attempt,
                },
            )
        ]
        # The decision and the claim of the run that applies it: one transaction.
        claim = self._claim_of(run, made, "run.resumed")
        earlier: Sequence[NodeRecord] | None = None
        if claimed := await self.ledger.decide_and_claim(
            run_id,
            found.wait_id,
            found.round,
            response=response,
            actor=response["actor"],
            claim=claim,
            note=note,
            events=decided,
        ):
            holder, earlier = claim.holder, claimed.records
        else:  # refused, nothing recorded: record the decision, and roll it back if still refused
            await self.ledger.decide_wait(
                run_id,
                found.wait_id,
                found.round,
                response=response,
                actor=response["actor"],
                note=note,
                events=decided,
            )
            try:
                holder = await self._claim(run, made, "run.resumed")
            except BaseException as exc:
                current = await self.ledger.get_run(run_id)
                await self.ledger.settle_wait(
                    run_id,
                    found.wait_id,
                    found.round,
                    WaitStatus.ROLLED_BACK,
                    reason=f"the run could not be resumed: {exc}",
                    reopen=current.status.waits_for_person,
                    events=[
                        Event(
                            run_id=run_id,
                            kind=f"{kind}.rolled_back",
                            node=found.node,
                            level="warning",
                            message=(
                                f"the run could not be resumed ({exc}); the {said} is rolled back"
                            ),
                        )
                    ],
                )
                raise
        return await self._advance(
            run,
            made,
            Command(resume={found.interrupt_id: response}),
            services,
            holder=holder,
            earlier=earlier,
        )

    # -- reading ----------------------------------------------------------------------------

    async def pending(self, run_id: str | None = None) -> list[Wait]:
        """Pending gates and question sets of runs waiting for a person (waiting or parked; of
        one run), oldest first."""
        return await pending_waits(self.ledger, run_id)

    async def pending_with_templates(self, run_id: str | None = None) -> list[tuple[Wait, str]]:
        """``pending``, each with its run's template (one query, for ``stageline pending``)."""
        return await waiting_on(self.ledger, run_id)

    # -- deadlines --------------------------------------------------------------------------

    async def sweep(self, *, now: float | None = None) -> list[dict[str, Any]]:
        """Apply every deadline step that is due: remind, escalate, then the safe default."""
        done: list[dict[str, Any]] = []
        for wait in await self.pending():
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
                summary = await self._decide(
                    wait.run_id,
                    "reject",
                    gate=wait.name,
                    note="deadline passed",
                    actor=SWEEPER,
                    attempt=None,
                    state_hash=None,
                    services=None,
                    force=False,
                    wait=wait,
                )
                return str(summary.status)
            if action == "default":
                summary = await self.answer(
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
        return "parked"  # it keeps waiting for a person, with no deadline step left

    # -- the side-effect journal ------------------------------------------------------------

    async def resolve_effect(
        self, run_id: str, node: str, key: str, *, done: bool, result: Any = None
    ) -> None:
        """Settle an effect in doubt: it happened (``done``, with ``result``), or run it again.

        Refused for a run that ended (succeeded, cancelled, rejected): nothing of it will run
        again, so forgetting an effect would only make its record lie."""
        found = await self.ledger.get_effect(run_id, node, key)
        if found is None:
            raise UsageError(f"run {run_id} has no effect {key!r} in node {node!r}")
        run = await self.ledger.get_run(run_id)
        if run.status.terminal:
            raise InvalidTransition(
                f"run {run_id} is {run.status}, so effect {key!r} of node {node!r} can no "
                f"longer be {'settled' if done else 'run again'}: its record stays as it is; "
                "start a new run to do it again"
            )
        if done:
            await self.ledger.finish_effect(run_id, node, key, result)
        else:
            await self.ledger.forget_effect(run_id, node, key)


def _bound(
    waits: list[Wait],
    kind: WaitKind,
    name: str | None,
    run_id: str,
    wait_id: str | None,
    seen_at: float | None,
) -> Wait | None:
    """The pending round a decision binds to: of visit ``wait_id``, else of the visit that was
    waiting at ``seen_at``. ``AlreadyDecided`` (naming the winner) when that visit was decided
    meanwhile; None when ``seen_at`` precedes every visit (decide on what waits now)."""
    mine = [w for w in waits if w.kind is kind and (name is None or _named(w, name))]
    if wait_id is not None:
        visit = [w for w in mine if w.wait_id == wait_id]
        if not visit:
            raise InvalidTransition(f"run {run_id} has no {kind} wait {wait_id!r}")
    else:
        pending = [w for w in mine if w.status is WaitStatus.PENDING]
        if not pending:
            return None  # nothing waits: the caller's checks say who came first
        current = _pick(pending, kind, name, run_id)
        assert seen_at is not None
        if current.requested_at <= seen_at:
            return current
        # The run came to this wait after the caller looked: they saw an earlier visit.
        earlier = [w for w in mine if w.name == current.name and w.requested_at <= seen_at]
        if not earlier:
            return None
        latest = max(earlier, key=lambda w: w.requested_at)
        visit = [w for w in mine if w.wait_id == latest.wait_id]
    last = max(visit, key=lambda w: w.round)
    if last.status is WaitStatus.PENDING:
        return last
    decided = [w for w in visit if w.status in (WaitStatus.DECIDED, WaitStatus.APPLIED)]
    if decided:
        raise already_decided(max(decided, key=lambda w: w.round))
    raise StaleDecision(
        f"{what(last)} of run {run_id} is no longer waiting ({last.status}"
        + (f": {last.reason}" if last.reason else "")
        + "); look again with "
        f"`stageline pending {run_id}`"
    )


def _pick(pending: list[Wait], kind: WaitKind, name: str | None, run_id: str) -> Wait:
    """The pending wait a decision or answer is for."""
    mine = [w for w in pending if w.kind is kind and (name is None or _named(w, name))]
    noun = "gate" if kind is WaitKind.GATE else "question set"
    if not mine:
        others = ", ".join(f"{w.kind} {w.name}" for w in pending) or "nothing"
        named = f" {name!r}" if name else ""
        raise InvalidTransition(
            f"run {run_id} is not waiting at a {noun}{named} (it waits on: {others})"
        )
    if len(mine) > 1:
        names = ", ".join(w.name if kind is WaitKind.GATE else w.wait_id for w in mine)
        flag = "--gate" if kind is WaitKind.GATE else "--question"
        raise UsageError(
            f"run {run_id} waits at {len(mine)} {noun}s ({names}); say which with {flag}"
        )
    return mine[0]


def _named(wait: Wait, name: str) -> bool:
    """Whether ``name`` names this wait: the gate or node name, or its id (or a prefix of it)."""
    return name in (wait.name, wait.wait_id) or (
        wait.kind is WaitKind.QUESTION and len(name) >= 6 and wait.wait_id.startswith(name)
    )


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
