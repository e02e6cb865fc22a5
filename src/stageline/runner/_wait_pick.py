"""Which pending wait a decision or answer is for: the visit it binds to, or the one waiting."""

from __future__ import annotations

from stageline.errors import InvalidTransition, StaleDecision, UsageError
from stageline.ledger import Wait, WaitKind, WaitStatus, already_decided
from stageline.runner._waits import what

__all__ = ["bound_wait", "ci_rule", "ci_wait_refused", "names_wait", "pick_wait"]


def bound_wait(
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
    mine = [w for w in waits if w.kind is kind and (name is None or names_wait(w, name))]
    if wait_id is not None:
        visit = [w for w in mine if w.wait_id == wait_id]
        if not visit and kind is not WaitKind.GATE and len(wait_id) >= 6:  # a shown prefix
            ids = {w.wait_id for w in mine if w.wait_id.startswith(wait_id)}
            visit = [w for w in mine if w.wait_id in ids] if len(ids) == 1 else []
        if not visit:
            raise InvalidTransition(f"run {run_id} has no {kind} wait {wait_id!r}")
    else:
        pending = [w for w in mine if w.status is WaitStatus.PENDING]
        if not pending:
            return None  # nothing waits: the caller's checks say who came first
        current = pick_wait(pending, kind, name, run_id)
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


def pick_wait(pending: list[Wait], kind: WaitKind, name: str | None, run_id: str) -> Wait:
    """The pending wait a decision or answer is for."""
    mine = [w for w in pending if w.kind is kind and (name is None or names_wait(w, name))]
    noun = {WaitKind.GATE: "gate", WaitKind.QUESTION: "question set"}.get(kind, "interrupt")
    if not mine and kind is not WaitKind.CI:
        ci = next((w for w in pending if w.kind is WaitKind.CI), None)
        if ci is not None:
            raise ci_wait_refused(run_id, ci)
    if not mine:
        others = ", ".join(f"{w.kind} {w.name}" for w in pending) or "nothing"
        named = f" {name!r}" if name else ""
        raise InvalidTransition(
            f"run {run_id} is not waiting at a {noun}{named} (it waits on: {others})"
        )
    if len(mine) > 1:
        names = ", ".join(w.name if kind is WaitKind.GATE else w.wait_id for w in mine)
        flag = {WaitKind.GATE: "--gate", WaitKind.QUESTION: "--question"}.get(kind, "--wait")
        raise UsageError(
            f"run {run_id} waits at {len(mine)} {noun}s ({names}); say which with {flag}"
        )
    return mine[0]


def ci_rule(run_id: str, wait: Wait) -> str:
    """The rule of a wait for CI, for every refusal of a person's move on it."""
    return (
        f"run {run_id} waits on CI ({what(wait)}), which only the forge completes (its "
        "workflow_run or check_suite webhook, or stageline's polling)"
    )


def ci_wait_refused(run_id: str, wait: Wait) -> InvalidTransition:
    """The error for a person's answer to a wait for CI: only the forge completes one."""
    return InvalidTransition(
        f"{ci_rule(run_id, wait)}: a person cannot answer it; to stop the run, cancel it "
        f"(`stageline cancel {run_id}`)"
    )


def names_wait(wait: Wait, name: str) -> bool:
    """Whether ``name`` names this wait: the gate or node name, or its id (or a prefix of it)."""
    return name in (wait.name, wait.wait_id) or (
        wait.kind is not WaitKind.GATE and len(name) >= 6 and wait.wait_id.startswith(name)
    )
