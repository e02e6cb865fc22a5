"""People's part of a run: decide gates, answer questions, list what waits, settle effects.

Every decision takes one path: check it, record it in the ledger (the database decides who was
first), then resume the run with ``Command(resume={interrupt id: decision})`` through the
runner's own claim-and-advance. What the sweeper decides on a deadline takes the same path
(``_deadlines``).
"""

from __future__ import annotations

import getpass
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

from langgraph.types import Command

from stageline.errors import (
    AnswerInvalid,
    CheckpointCorrupt,
    InvalidTransition,
    StaleDecision,
    UsageError,
)
from stageline.ledger import (
    Event,
    LedgerStore,
    NodeRecord,
    Run,
    Wait,
    WaitKind,
    WaitStatus,
)
from stageline.runner._advance import Advancer
from stageline.runner._decision_races import (
    RECHECKS,
    LedgerMoved,
    as_now,
    first_stands,
    ledger_moved,
)
from stageline.runner._graphs import Graphs
from stageline.runner._interrupts import check_inbox_answer, plain
from stageline.runner._reads import pending_waits, waiting_on
from stageline.runner._services import Services
from stageline.runner._support import RunSummary
from stageline.runner._trust import check_checkpoint
from stageline.runner._wait_pick import bound_wait, pick_wait
from stageline.runner._waits import round_event, what
from stageline.stages import validate_answers

__all__ = ["SWEEPER", "DecisionOptions", "Decisions"]

SWEEPER = "stageline sweep"
"""The actor of what the sweeper decides."""


def _actor(actor: str | None) -> str:
    if actor:
        return actor
    try:
        return getpass.getuser()
    except Exception:  # no user name to be had (containers)
        return "unknown"


class DecisionOptions(TypedDict, total=False):
    """What binds and accompanies a decision at a gate (``Runner.approve`` and its kin)."""

    gate: str | None
    """The gate's name, where the run waits at more than one."""
    actor: str | None
    """Who decides (default: the OS user)."""
    attempt: int | None
    """The attempt the decider saw; a decision for another attempt is stale."""
    state_hash: str | None
    """The hash of the state the decider saw; a decision on another state is stale."""
    services: Mapping[str, Any] | None
    force: bool
    """Go on with a template that changed since the run began."""
    wait_id: str | None
    """The visit of the gate the decider was shown (the decision binds to it)."""
    seen_at: float | None
    """When the decider looked: the decision binds to the visit waiting then."""


@dataclass(frozen=True)
class _Asked:
    """A person's (or the forge's) response, to check and record at the wait it is for."""

    run_id: str
    kind: WaitKind
    name: str | None
    respond: Callable[[Run, Wait], dict[str, Any]]
    """The response to record, from the run and the wait found (or a refusal)."""
    note: str | None = None
    services: Mapping[str, Any] | None = None
    force: bool = False
    wait: Wait | None = None
    """The visit the caller chose, if any."""
    bind: tuple[str | None, float | None] = (None, None)
    """The visit's id, or when the caller looked: the visit waiting then."""


class Decisions:
    """People's decisions and answers: checked, recorded first, then applied by an advance."""

    def __init__(
        self, ledger: LedgerStore, graphs: Graphs, services: Services, advancer: Advancer
    ) -> None:
        self.ledger = ledger
        self.graphs = graphs
        self.services = services
        self.advancer = advancer

    async def decide(
        self,
        run_id: str,
        decision: str,
        *,
        note: str | None = None,
        gate: str | None = None,
        actor: str | None = None,
        attempt: int | None = None,
        state_hash: str | None = None,
        services: Mapping[str, Any] | None = None,
        force: bool = False,
        wait: Wait | None = None,
        wait_id: str | None = None,
        seen_at: float | None = None,
    ) -> RunSummary:
        """Decide the gate the run waits at: ``approve`` (it goes on past the gate), ``reject``
        (it ends ``rejected``, or follows the gate's reject route), ``changes`` (back to the
        gate's ``changes_to`` node with ``note`` as feedback) or ``takeover`` (a parked run ends
        ``taken_over``, its branch and worktree left for the person).

        The decision binds to one visit of the gate: ``wait``/``wait_id`` (the visit the caller
        showed), else the visit that was waiting at ``seen_at`` (when the caller looked; a CLI
        command's start). If that visit was decided meanwhile, ``AlreadyDecided`` names the
        decision that won, even when the run has come back to the gate since."""
        if decision == "changes" and (not note or not note.strip()):
            raise UsageError("a request for changes needs a note saying what to change")

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

        apply = await self._record(
            _Asked(
                run_id,
                WaitKind.GATE,
                gate,
                respond,
                note=note,
                services=services,
                force=force,
                wait=wait,
                bind=(wait_id, seen_at),
            )
        )
        return await apply()

    async def answer(
        self,
        run_id: str,
        answers: Mapping[str, Any],
        *,
        defaults: bool,
        question_id: str | None = None,
        actor: str | None = None,
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

        apply = await self._record(
            _Asked(
                run_id,
                WaitKind.QUESTION,
                question_id,
                respond,
                services=services,
                force=force,
                wait=wait,
                bind=(None, seen_at),
            )
        )
        return await apply()

    async def respond(
        self,
        run_id: str,
        value: Any,
        *,
        wait_id: str | None = None,
        actor: str | None = None,
        services: Mapping[str, Any] | None = None,
        force: bool = False,
        wait: Wait | None = None,
        seen_at: float | None = None,
    ) -> RunSummary:
        """Answer an interrupt the graph made itself (``interrupt(value)`` in any node or
        subgraph) with ``value``: the value its ``interrupt()`` returns. An Agent-Inbox
        ``HumanInterrupt`` takes one response its ``config`` allows (``check_inbox_answer``).
        Recorded first, bound to the visit (``wait_id``, else the one waiting at ``seen_at``);
        the first answer wins."""

        def respond(run: Run, found: Wait) -> dict[str, Any]:
            if found.attempt != run.attempt:
                raise StaleDecision(
                    f"stale: {what(found)} was asked in attempt "
                    f"{found.attempt}, the run is at attempt {run.attempt}"
                )
            if value is None:
                raise AnswerInvalid("an interrupt is answered with a value, not null")
            inbox = found.payload.get("inbox")
            answer = check_inbox_answer(inbox, value) if inbox else value
            return {"value": plain(answer), "actor": _actor(actor)}

        apply = await self._record(
            _Asked(
                run_id,
                WaitKind.INTERRUPT,
                None,
                respond,
                services=services,
                force=force,
                wait=wait,
                bind=(wait_id, seen_at),
            )
        )
        return await apply()

    async def complete_ci(
        self, run_id: str, wait: Wait, result: Mapping[str, Any], *, actor: str
    ) -> Callable[[], Awaitable[RunSummary]]:
        """Record that the CI run a CI wait waits on ended (``result``: its id, conclusion,
        url, head sha), by ``actor`` (the forge), and claim the run; returns the advance that
        applies it (the caller may run it later: the run holds its lease till then)."""

        def respond(run: Run, found: Wait) -> dict[str, Any]:
            if found.attempt != run.attempt:
                raise StaleDecision(
                    f"stale: {what(found)} was asked in attempt "
                    f"{found.attempt}, the run is at attempt {run.attempt}"
                )
            return {"ci": plain(dict(result)), "actor": actor}

        return await self._record(_Asked(run_id, WaitKind.CI, None, respond, wait=wait))

    async def _record(self, asked: _Asked) -> Callable[[], Awaitable[RunSummary]]:
        """Check and record the response, and claim the run; returns the advance applying it.

        The run and its waits are read before its checkpoint. When the checkpoint disagrees
        with them because another process decided and advanced the run in between (the ledger
        moved), the response is checked again on what the ledger holds now, at most
        ``RECHECKS`` times: the first decision then stands (``AlreadyDecided``) instead of the
        checkpoint being called damaged. A disagreement while the ledger stood still is one."""
        for left in range(RECHECKS, -1, -1):
            try:
                return await self._record_once(asked)
            except LedgerMoved as moved:
                if not left:
                    raise moved.corrupt from moved
        raise AssertionError("unreachable")

    async def _record_once(self, asked: _Asked) -> Callable[[], Awaitable[RunSummary]]:
        run_id, kind, name, wait = asked.run_id, asked.kind, asked.name, asked.wait
        respond, note, force, bind = asked.respond, asked.note, asked.force, asked.bind
        run = await self.ledger.get_run(run_id)
        waits = await self.ledger.waits(run_id)
        if wait is not None:  # the visit the caller chose, as the ledger holds it now
            wait = as_now(wait, waits)
        if wait is None and (bind[0] is not None or bind[1] is not None):
            wait = bound_wait(waits, kind, name, run_id, *bind)
        if wait is None:
            run, waits = await first_stands(self.ledger, run, waits, kind, name)
        if not run.status.waits_for_person:
            raise InvalidTransition(f"run {run_id} is {run.status}, not waiting for a person")
        made = self.graphs.checked(run, force)
        services = await self.services.resolve(asked.services)
        found = wait or pick_wait(
            [w for w in waits if w.status is WaitStatus.PENDING], kind, name, run_id
        )
        response = {**respond(run, found), "token": found.token}
        # Nothing is recorded, and the run does not move, on a checkpoint stageline did not write.
        try:
            await check_checkpoint(self.graphs.saver(made), run_id, waits, found.node)
        except CheckpointCorrupt as corrupt:
            if await ledger_moved(self.ledger, run, waits):
                raise LedgerMoved(corrupt) from corrupt
            raise
        said = response.get("decision") or "answered"
        decided = [
            Event(
                run_id=run_id,
                node=found.node,
                kind="gate.decided" if kind is WaitKind.GATE else f"{kind}.answered",
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
        claim = self.advancer.claim_of(run, made, "run.resumed")
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
                holder = await self.advancer.claim(run, made, "run.resumed")
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
                        round_event(
                            found,
                            "rolled_back",
                            f"the run could not be resumed ({exc}); the {said} is rolled back",
                        )
                    ],
                )
                raise
        # The graph's own interrupt() returns the value as it is; stageline's nodes check the
        # whole response (its token binds it to the round).
        resume = response["value"] if kind is WaitKind.INTERRUPT else response

        def apply() -> Awaitable[RunSummary]:
            return self.advancer.advance(
                run,
                made,
                Command(resume={found.interrupt_id: resume}),
                services,
                holder=holder,
                earlier=earlier,
            )

        return apply

    # -- reading ----------------------------------------------------------------------------

    async def pending(self, run_id: str | None = None) -> list[Wait]:
        """Pending gates and question sets of runs waiting for a person (waiting or parked; of
        one run), oldest first."""
        return await pending_waits(self.ledger, run_id)

    async def pending_with_templates(self, run_id: str | None = None) -> list[tuple[Wait, str]]:
        """``pending``, each with its run's template (one query, for ``stageline pending``)."""
        return await waiting_on(self.ledger, run_id)

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
