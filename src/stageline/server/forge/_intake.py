"""Issue intake: a GitHub issue carrying ``[github] intake_label`` starts sdlc (or
``intake_template``) for its repository, once per issue.

Once, whoever asks and however often: the run's id is made from the repository and the issue
number, and the ledger refuses a second run with the same id, so a redelivered webhook, a poll
that sees the issue again and another server process all find the run already there.
"""

from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from stageline.errors import InvalidTransition, RunNotFound
from stageline.forge import GitHubSettings, Issue
from stageline.names import check_run_id

if TYPE_CHECKING:
    from stageline.forge import GitHubClient
    from stageline.runner import Runner

__all__ = ["Intake", "intake_inputs", "issue_run_id", "poll_issues", "start_for_issue"]

_log = logging.getLogger("stageline.forge")


@dataclass(frozen=True)
class Intake:
    """What became of one issue: its run, and whether this call started it."""

    repo: str
    number: int
    run_id: str
    started: bool


def issue_run_id(repo: str, number: int) -> str:
    """The id of the run an issue starts: ``gh-OWNER-NAME-NUMBER`` (a hash of the repository
    in place of its name when that would be too long)."""
    readable = "gh-" + re.sub(r"[^A-Za-z0-9._-]", "-", repo.replace("/", "-")) + f"-{number}"
    if len(readable) <= 64:
        return check_run_id(readable)
    digest = hashlib.sha256(repo.encode()).hexdigest()[:16]
    return check_run_id(f"gh-{digest}-{number}")


def intake_inputs(forge: GitHubSettings, repo: str, issue: Issue) -> dict[str, Any]:
    """The inputs of the run an issue starts: its text as the task, where to build."""
    task = issue.title.strip()
    if issue.body.strip():
        task = f"{task}\n\n{issue.body.strip()}"
    return {
        "task": task,
        "forge_repo": repo,
        "issue_number": issue.number,
        "repo": str(forge.repository(repo).checkout),
    }


async def start_for_issue(runner: Runner, forge: GitHubSettings, repo: str, issue: Issue) -> Intake:
    """Create the issue's run (queued) unless it exists; the caller has it advanced."""
    run_id = issue_run_id(repo, issue.number)
    try:
        await runner.ledger.get_run(run_id)
        return Intake(repo, issue.number, run_id, started=False)
    except RunNotFound:
        pass
    inputs = intake_inputs(forge, repo, issue)
    try:
        await runner.create(forge.intake_template, inputs, run_id=run_id)
    except InvalidTransition:  # another process (or delivery) made it a moment ago
        return Intake(repo, issue.number, run_id, started=False)
    _log.info("issue %s#%d started run %s", repo, issue.number, run_id)
    return Intake(repo, issue.number, run_id, started=True)


async def poll_issues(runner: Runner, forge: GitHubSettings, client: GitHubClient) -> list[Intake]:
    """Look at the open issues carrying the intake label in every configured repository and
    start the runs not started yet; what each issue became, oldest issue first."""
    found: list[Intake] = []
    for repo in forge.repositories:
        for issue in await client.list_labelled_issues(repo, forge.intake_label):
            found.append(await start_for_issue(runner, forge, repo, issue))
    return found
