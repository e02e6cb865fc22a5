"""CI waits completed by the forge: GitHub's webhooks, or polling with backoff.

A run in forge mode waits for CI in a ``ci`` wait (``WaitKind.CI``) that the ledger keeps; no
process holds the run meanwhile. Its payload's ``ci`` names the repository, the pushed commit
(``head_sha``) and, once found, the workflow run (``id``). Two doors complete it, with the same
audited record (actor ``github``), the first one winning:

- ``on_webhook``: a ``workflow_run`` (``completed``) or ``check_suite`` (``completed``) event,
  matched by repository and head sha (and run id, when the wait knows it);
- ``poll_due``: whichever process serves or works calls it every few seconds. A wait is polled
  at ``poll_interval`` (``[github]``, kept in its payload) after it was asked, then at twice
  that, and so on up to every 10 minutes. The number of polls made is the wait's
  ``policy_step`` (a CI wait has no deadline policy): the ledger's compare-and-set on it lets
  one process make each poll, however many look. A wait older than its ``ci_timeout``
  (``[github]``, kept in its payload) is polled once more and, CI not having reported, ends
  ``timed_out`` (a failure; ``timed_out_after`` says it was stageline's timeout). The workflow
  run it waited on, if one was found, is cancelled on GitHub (``cancelled_on_forge``), so it
  uses no more CI minutes; a refused cancel is logged and the wait times out all the same.

Recording the answer claims the run (one transaction); the advance that applies it then runs
in a task of this process (``idle`` waits for them), so a webhook is answered at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from stageline.errors import StagelineError
from stageline.forge import CiRun
from stageline.ledger import LedgerStore, Wait, WaitKind
from stageline.runner._forge import ForgeAccess
from stageline.runner._human import Decisions
from stageline.runner._support import RunSummary

__all__ = [
    "CI_TIMEOUT",
    "FORGE_ACTOR",
    "MAX_POLL_INTERVAL",
    "ForgeCi",
    "ci_deadline",
    "next_poll_at",
]

FORGE_ACTOR = "github"
"""The actor of the answers the forge gives to CI waits."""
MAX_POLL_INTERVAL = 600.0
PASSED = ("success", "neutral", "skipped")
CI_TIMEOUT = 7200.0
"""Seconds a CI wait whose payload does not say (nor the process's ``[github]``) times out."""

_log = logging.getLogger("stageline.forge_ci")


def next_poll_at(wait: Wait) -> float:
    """When the next poll of a CI wait is due: ``poll_interval`` after it was asked, then
    doubling up to ``MAX_POLL_INTERVAL`` between polls."""
    first = max(float(wait.payload.get("poll_interval") or 30.0), 0.01)
    spent = sum(min(first * 2**k, MAX_POLL_INTERVAL) for k in range(wait.policy_step + 1))
    return float(wait.requested_at + spent)


def ci_deadline(wait: Wait, timeout: float = CI_TIMEOUT) -> float:
    """When a CI wait times out: its payload's ``ci_timeout`` (else ``timeout``) after it was
    asked."""
    given = wait.payload.get("ci_timeout")
    return float(wait.requested_at + (float(given) if given else timeout))


def _timed_out(ci: Mapping[str, Any], after: float) -> dict[str, Any]:
    """The answer of a CI wait CI did not report to in time: ``timed_out``, a failure."""
    return {
        "repository": ci.get("repository"),
        "head_sha": ci.get("head_sha"),
        "id": ci.get("id"),
        "url": ci.get("url"),
        "kind": "workflow_run" if ci.get("workflow") else "check_suite",
        "conclusion": "timed_out",
        "timed_out_after": after,
    }


def _suites_result(suites: list[CiRun], ci: Mapping[str, Any]) -> dict[str, Any] | None:
    """How the check suites of a commit ended, once all have: a failing one's, else the first.

    GitHub makes a suite on every push for each installed app, also those that check nothing:
    theirs has no check runs and stays ``queued`` for ever, so only suites with check runs
    decide. Until some suite has check runs, CI has not started: None (keep waiting).
    """
    suites = [s for s in suites if not s.checks_nothing]
    if not suites or any(s.status != "completed" for s in suites):
        return None
    failed = [s for s in suites if s.conclusion not in PASSED]
    chosen = (failed or suites)[0]
    return _result(ci, chosen, chosen.conclusion)


def _result(ci: Mapping[str, Any], run: CiRun, conclusion: str | None) -> dict[str, Any]:
    return {
        "repository": ci.get("repository"),
        "head_sha": ci.get("head_sha"),
        "id": run.id,
        "url": run.url,
        "kind": run.kind,
        "conclusion": conclusion or "failure",
    }


class ForgeCi:
    """The forge's side of CI waits: ``on_webhook`` and ``poll_due`` complete them."""

    def __init__(self, ledger: LedgerStore, decisions: Decisions, forge: ForgeAccess | None):
        self.ledger = ledger
        self.decisions = decisions
        self.forge = forge
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def busy(self) -> int:
        """How many runs this process is advancing after their CI ended."""
        return len(self._tasks)

    async def polls(self) -> bool:
        """Whether this process has CI waits to poll (the forge is configured, and some wait)."""
        return self.forge is not None and bool(await self.waiting())

    async def waiting(self) -> list[Wait]:
        """The pending CI waits of every run, oldest first."""
        return [w for w in await self.ledger.pending_waits() if w.kind is WaitKind.CI]

    async def on_webhook(self, event_name: str, payload: Mapping[str, Any]) -> list[str]:
        """Complete the CI waits a ``workflow_run`` or ``check_suite`` event ends; the ids of the
        runs moved on (none for any other event, or one no wait matches)."""
        if payload.get("action") != "completed" or event_name not in (
            "workflow_run",
            "check_suite",
        ):
            return []
        repo = str((payload.get("repository") or {}).get("full_name") or "")
        body = payload.get(event_name) or {}
        sha = str(body.get("head_sha") or "")
        moved: list[str] = []
        for wait in await self.waiting():
            ci = wait.payload.get("ci") or {}
            result: dict[str, Any] | None
            if ci.get("repository") != repo or ci.get("head_sha") != sha:
                continue
            if event_name == "workflow_run":
                if not ci.get("workflow") or (ci.get("id") and ci["id"] != body.get("id")):
                    continue
                if body.get("id") in (ci.get("known_ids") or ()):
                    continue  # a run of the same commit from before the dispatch
                path = str(body.get("path") or "")
                if not ci.get("id") and path and not path.endswith("/" + str(ci["workflow"])):
                    continue  # another workflow of the same commit
                result = {
                    "repository": repo,
                    "head_sha": sha,
                    "id": body.get("id"),
                    "url": body.get("html_url") or body.get("url"),
                    "kind": "workflow_run",
                    "conclusion": body.get("conclusion") or "failure",
                }
            else:
                if ci.get("workflow"):
                    continue  # a dispatched workflow's wait ends with its workflow_run
                result = await self._suites(ci)  # every suite of the commit, not this one only
                if result is None:
                    continue
            if await self._complete(wait, result):
                moved.append(wait.run_id)
        return moved

    async def poll_due(self, now: float | None = None) -> list[str]:
        """Poll GitHub for the CI waits whose poll is due; the ids of the runs moved on."""
        if self.forge is None:
            return []
        moved: list[str] = []
        now = time.time() if now is None else now
        for wait in await self.waiting():
            deadline = ci_deadline(wait, self._timeout())
            if min(next_poll_at(wait), deadline) > now:
                continue
            if not await self.ledger.advance_policy(
                wait.run_id, wait.wait_id, wait.round, step=wait.policy_step + 1
            ):
                continue  # another process polls it, or it was completed meanwhile
            ci = wait.payload.get("ci") or {}
            late = now >= deadline
            result: dict[str, Any] | None = None
            running: CiRun | None = None  # the workflow run this poll saw still running
            try:
                result, running = await self._read(ci)
            except StagelineError as exc:  # GitHub said no, or was away: the next poll tries
                _log.warning("could not poll CI of run %s: %s", wait.run_id, exc)
                if not late:
                    continue
            except Exception:  # nor a bug: the loops that call this recover runs too
                _log.exception("could not poll CI of run %s", wait.run_id)
                if not late:
                    continue
            if result is None and late:
                result = _timed_out(ci, deadline - wait.requested_at)
                result["cancelled_on_forge"] = await self._cancel(ci, running)
                _log.warning("CI of run %s did not report in time: timed_out", wait.run_id)
            if result is not None and await self._complete(wait, result):
                moved.append(wait.run_id)
        return moved

    def _timeout(self) -> float:
        """``[github] ci_timeout`` of this process (for waits whose payload does not say)."""
        try:
            return CI_TIMEOUT if self.forge is None else self.forge.github.ci_timeout
        except StagelineError:  # the token is not set: no poll is made either
            return CI_TIMEOUT

    async def idle(self) -> None:
        """Wait until the advances this process started (completed CI waits) have stopped."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def aclose(self, timeout: float = 10.0) -> None:
        """Let the advances under way stop (the runner drains them), within ``timeout``."""
        if self._tasks:
            _done, late = await asyncio.wait(list(self._tasks), timeout=timeout)
            for task in late:
                task.cancel()

    async def _read(self, ci: Mapping[str, Any]) -> tuple[dict[str, Any] | None, CiRun | None]:
        """How the CI a wait waits on ended, or None while it runs (or has not started); and
        the workflow run found still running, if any."""
        if not ci.get("workflow"):
            return await self._suites(ci), None
        found = await self._workflow_run(ci)
        if found is None or not found.completed:
            return None, found
        return _result(ci, found, found.conclusion), None

    async def _workflow_run(self, ci: Mapping[str, Any]) -> CiRun | None:
        """The workflow run a wait waits on: its ``id``, else the first run of the workflow
        on the pushed commit that was not there before the dispatch; None before it starts."""
        assert self.forge is not None
        client, repo = self.forge.client, str(ci.get("repository"))
        if ci.get("id"):
            return await client.workflow_run(repo, int(ci["id"]))
        runs = await client.workflow_runs(repo, ci["workflow"], head_sha=ci.get("head_sha"))
        new = [r for r in runs if r.id not in (ci.get("known_ids") or ())]
        return min(new, key=lambda r: r.id) if new else None

    async def _cancel(self, ci: Mapping[str, Any], running: CiRun | None) -> bool:
        """Cancel the workflow run a timed-out wait's last poll saw running; whether GitHub
        took the cancel. (Check suites of the commit belong to their apps: they are left.)"""
        if self.forge is None or running is None:
            return False
        try:
            await self.forge.client.cancel_workflow_run(str(ci.get("repository")), running.id)
        except StagelineError as exc:
            _log.warning("could not cancel the timed-out CI run: %s", exc)
            return False
        return True

    async def _suites(self, ci: Mapping[str, Any]) -> dict[str, Any] | None:
        if self.forge is None:
            return None
        suites = await self.forge.client.check_suites(str(ci["repository"]), str(ci["head_sha"]))
        return _suites_result(suites, ci)

    async def _complete(self, wait: Wait, result: Mapping[str, Any]) -> bool:
        """Record the answer and claim the run; its advance goes on in a task of its own."""
        try:
            apply = await self.decisions.complete_ci(wait.run_id, wait, result, actor=FORGE_ACTOR)
        except StagelineError as exc:  # completed by the other door first, cancelled, gone
            _log.info("CI wait of run %s not completed here: %s", wait.run_id, exc)
            return False
        task = asyncio.create_task(self._advance(wait.run_id, apply), name=f"ci {wait.run_id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return True

    async def _advance(self, run_id: str, apply: Callable[[], Awaitable[RunSummary]]) -> None:
        with contextlib.suppress(asyncio.CancelledError):
            try:
                await apply()
            except StagelineError as exc:
                _log.warning("run %s could not go on after CI: %s", run_id, exc)
            except Exception:
                _log.exception("run %s could not go on after CI", run_id)
