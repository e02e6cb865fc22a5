"""The ``sdlc`` template's forge mode: GitHub instead of the local CI command and summary file.

A run with a ``forge_repo`` input (``OWNER/NAME``, one of ``[github.repositories]`` in
stageline.toml) builds as local mode does, in a worktree of the repository's configured
checkout, then:

- ``dispatch`` pushes the run's branch to the checkout's ``origin`` (``--force-with-lease``, so
  a rebuild replaces the branch's last push and nothing else), dispatches the repository's
  ``workflow`` on it (or, without one, takes the checks GitHub runs on the pushed commit), and
  the run waits for CI: a ``ci`` wait the ledger keeps, holding no worker and no lease, which
  the forge completes (``runner.forge_ci``: the ``workflow_run``/``check_suite`` webhook, or
  polling with backoff); no person can;
- ``verify`` reads the conclusion; a failure's feedback for the next build is the tail of the
  failed jobs' logs;
- ``approved`` opens a draft pull request (the plan, and the verification: the CI run, the
  builds taken) and the ``apply`` gate's approval marks it ready for review, and merges it
  where the repository's ``merge = true``; rejecting leaves the draft. The checkout is never
  changed.

The GitHub client and settings reach the stages as the ``forge`` service (made by the runner
from ``[github]``); nothing of them is kept in the state.
"""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from langgraph.types import interrupt

from stageline.errors import ConfigError, InputError, RunError
from stageline.operations import FailurePhase
from stageline.stages import StageContext

if TYPE_CHECKING:
    from stageline.forge import GitHubClient, GitHubSettings, PullRequest, RepoSettings

__all__ = [
    "SERVICE_FORGE",
    "ForgeAccess",
    "ci_passed",
    "forge_inputs",
    "forge_mode",
    "forge_publish",
    "open_pull_request",
    "push_and_wait",
    "verify_forge",
]

SERVICE_FORGE = "forge"
"""``services[SERVICE_FORGE]``: the ``[github]`` settings and client (``ForgeAccess``)."""
PASSED = ("success", "neutral", "skipped")
"""Conclusions a CI run passes with."""
LOG_LINES = 60


class ForgeAccess(Protocol):
    """What forge mode needs of the ``forge`` service: the settings, and one client."""

    @property
    def github(self) -> GitHubSettings: ...

    @property
    def client(self) -> GitHubClient: ...


def forge_mode(state: Any) -> bool:
    return bool(state.get("forge_repo"))


def ci_passed(conclusion: str | None) -> bool:
    return conclusion in PASSED


def forge_inputs(inputs: Mapping[str, Any], settings: Any) -> dict[str, Any] | None:
    """Input check: ``forge_repo`` names a repository of ``[github.repositories]``; ``repo``
    is filled with its checkout (a different ``repo`` is refused)."""
    name = inputs.get("forge_repo")
    if name in (None, ""):
        if inputs.get("issue_number") not in (None, ""):
            raise InputError("input 'issue_number' needs 'forge_repo': the issue's repository")
        return None
    if not isinstance(name, str):
        raise InputError(f"input 'forge_repo' must be OWNER/NAME, got {type(name).__name__}")
    conf = getattr(settings, "github", None)
    found = conf.repositories.get(name) if conf is not None else None
    if found is None:
        known = ", ".join(conf.repositories) if conf is not None and conf.repositories else "none"
        raise InputError(
            f"input 'forge_repo': {name!r} is not in [github.repositories] of stageline.toml "
            f"(configured: {known}); stageline touches only those"
        )
    checkout = (Path(settings.root) / found.checkout).resolve()
    given = inputs.get("repo")
    if given not in (None, "") and Path(str(given)).expanduser().resolve() != checkout:
        raise InputError(
            f"input 'repo': {given} is not the checkout of {name} ({checkout}); leave it out "
            "and the configured checkout is used"
        )
    return {"repo": str(checkout)}


def _access(ctx: StageContext) -> ForgeAccess:
    found = ctx.services.get(SERVICE_FORGE)
    if found is None:
        raise ConfigError(
            "this run builds for a GitHub repository (forge_repo), but no [github] is "
            "configured in this process's stageline.toml"
        )
    return found  # type: ignore[no-any-return]


def _repo(ctx: StageContext, state: Any) -> RepoSettings:
    return _access(ctx).github.repository(str(state["forge_repo"]))


def _git(cwd: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(cwd), *args], capture_output=True, text=True, check=False, timeout=300
    )
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or ["failed"])[-1]
        raise RuntimeError(f"git {args[0]}: {why}")
    return done.stdout.strip()


def _push(worktree: Path, branch: str) -> str:
    """Push the branch to ``origin``, replacing only what stageline pushed there before; the
    pushed commit's sha."""
    sha = _git(worktree, "rev-parse", "HEAD")
    _git(
        worktree,
        "push",
        "--porcelain",
        f"--force-with-lease=refs/heads/{branch}",
        "origin",
        f"HEAD:refs/heads/{branch}",
    )
    return sha


async def _dispatch(
    client: GitHubClient, repo: str, workflow: str, branch: str, sha: str
) -> dict[str, Any]:
    """Dispatch ``workflow`` on the branch: the ids of the commit's runs of it before (never
    the one waited for: a rebuild that changed nothing pushes the same commit), and the new
    run when GitHub lists it already (else the forge's side finds it)."""
    before = [r.id for r in await client.workflow_runs(repo, workflow, head_sha=sha)]
    await client.dispatch_workflow(repo, workflow, branch)
    new = [
        r for r in await client.workflow_runs(repo, workflow, head_sha=sha) if r.id not in before
    ]
    found = min(new, key=lambda r: r.id) if new else None
    return {"known_ids": before, **({"id": found.id, "url": found.url} if found else {})}


class ForgeStepFailed(RunError):
    """A forge step (push, CI, pull request) failed; its node's record names the phase."""

    def __init__(self, summary: str, phase: FailurePhase) -> None:
        super().__init__(summary)
        self.failure_phase = str(phase)


def _fail(phase: FailurePhase, what: str, exc: BaseException) -> ForgeStepFailed:
    return ForgeStepFailed(f"{what}: {exc}", phase)


async def push_and_wait(state: Any, ctx: StageContext) -> dict[str, Any]:
    """Forge mode's ``dispatch``: push, start CI, and wait for it (a ``ci`` wait, even for a
    CI that has ended already: the forge's side reads it); the CI run's id, url and
    conclusion. A push the remote refuses fails in ``source_preparation``."""
    repo = _repo(ctx, state)
    client = _access(ctx).client
    branch, round_no = str(state["branch"]), int(state.get("build_round") or 1)
    worktree = Path(state["worktree"])
    commit = str(state.get("commit") or "")[:12]
    try:  # once per build: LangGraph runs this node again from its start when CI ends
        sha = await ctx.effect(
            f"push-{round_no}-{commit}",
            lambda: asyncio.to_thread(_push, worktree, branch),
            idempotent=True,
        )
    except Exception as exc:
        raise _fail(FailurePhase.SOURCE_PREPARATION, f"pushing {branch} to origin", exc) from exc
    ci: dict[str, Any] = {
        "repository": repo.name,
        "head_sha": sha,
        "branch": branch,
        "workflow": repo.workflow,
        "build_round": round_no,
    }

    async def start_ci() -> dict[str, Any]:
        """Dispatch (or take the checks of the push) and say so: once, whatever replays."""
        started: dict[str, Any] = {}
        if repo.workflow:
            started = await _dispatch(client, repo.name, repo.workflow, branch, sha)
            said = f"CI: workflow {repo.workflow} dispatched on {branch} at {sha[:12]}"
        else:
            said = f"CI: waiting for the checks of {sha[:12]} on {branch}"
        ctx.log.info(
            said + (f" (run {started['id']})" if started.get("id") else ""),
            ci_run_id=started.get("id") or sha[:12],  # the commit's checks: no run known yet
            ci_url=started.get("url"),
            build_round=round_no,
            head_sha=sha,
        )
        return started

    # The node runs again from its start when CI has ended (LangGraph's replay): pushing,
    # dispatching and telling people happen once per build's commit.
    ci.update(await ctx.effect(f"ci-{round_no}-{sha[:12]}", start_ci, idempotent=True))
    # Even a CI that has ended already is read by the forge's side (``runner.forge_ci``): the
    # run waits, and its first poll (or the webhook) completes the wait.
    github = _access(ctx).github
    ci.update(_wait_for_ci(ctx, ci, float(github.poll_interval), float(github.ci_timeout)))
    return {
        "ci_run_id": str(ci.get("id") or ""),
        "ci_url": str(ci.get("url") or ""),
        "ci_conclusion": str(ci["conclusion"]),
        "ci_kind": str(ci.get("kind") or ("workflow_run" if repo.workflow else "check_suite")),
        "ci_timed_out_after": float(ci.get("timed_out_after") or 0.0),
        "pushed_sha": sha,
    }


def _wait_for_ci(
    ctx: StageContext, ci: Mapping[str, Any], poll: float, timeout: float
) -> dict[str, Any]:
    """Interrupt until the forge says how CI ended (or that it did not report within
    ``timeout``): a response for this commit."""
    payload: dict[str, Any] = {
        "kind": "ci",
        "name": "ci",
        "node": ctx.node,
        "run_id": ctx.run_id,
        "attempt": ctx.attempt,
        "ci": dict(ci),
        "poll_interval": poll,
        "ci_timeout": timeout,
    }
    asked = payload
    while True:
        response = interrupt(asked)
        got = response.get("ci") if isinstance(response, Mapping) else None
        if (
            isinstance(got, Mapping)
            and got.get("head_sha") == ci["head_sha"]
            and got.get("conclusion")
        ):
            return dict(got)
        token = response.get("token") if isinstance(response, Mapping) else None
        asked = {**payload, "refused": {"token": token, "reason": f"not CI of {ci['head_sha']}"}}


async def verify_forge(state: Any, ctx: StageContext) -> dict[str, Any]:
    """Forge mode's ``verify``: a pass goes on; a failure's feedback is the CI logs' tail."""
    conclusion = state.get("ci_conclusion")
    round_no = int(state.get("build_round") or 1)
    if ci_passed(conclusion):
        ctx.log.info(
            f"CI run {state.get('ci_run_id')}: {conclusion} (build {round_no})",
            ci_run_id=state.get("ci_run_id"),
            ci_url=state.get("ci_url"),
            conclusion=conclusion,
            build_round=round_no,
        )
        return {"ci_conclusion": "success", "build_feedback": ""}
    from stageline.forge import CiRun  # forge mode only

    repo = _repo(ctx, state)
    waited = float(state.get("ci_timed_out_after") or 0.0)
    if waited:
        return _timed_out(state, ctx, repo.name, waited)
    tail = ""
    if state.get("ci_run_id"):
        run = CiRun(
            id=int(state["ci_run_id"]),
            status="completed",
            conclusion=conclusion,
            url=str(state.get("ci_url") or ""),
            head_sha=str(state.get("pushed_sha") or ""),
            kind=str(state.get("ci_kind") or "workflow_run"),
        )
        try:
            tail = await _access(ctx).client.ci_log_tail(repo.name, run, LOG_LINES)
        except Exception as exc:  # the failure is what matters; say why the logs are missing
            tail = f"(the CI logs could not be read: {exc})"
    feedback = (
        f"CI run {state.get('ci_run_id') or '-'} of {repo.name} ({state.get('ci_url') or '-'}) "
        f"ended {conclusion}:\n{tail}"
    )
    ctx.log.warning(
        f"CI run {state.get('ci_run_id')}: {conclusion} (build {round_no}); back to build",
        ci_run_id=state.get("ci_run_id"),
        ci_url=state.get("ci_url"),
        conclusion=conclusion,
        build_round=round_no,
    )
    return {"ci_conclusion": str(conclusion), "build_feedback": feedback}


def _timed_out(state: Any, ctx: StageContext, repo: str, waited: float) -> dict[str, Any]:
    """CI did not report within ``[github] ci_timeout``: a failure (back to build, within the
    builds allowed) whose feedback says so; no logs are read (CI may not have started)."""
    round_no = int(state.get("build_round") or 1)
    sha = str(state.get("pushed_sha") or "")[:12]
    what = f"CI run {state['ci_run_id']}" if state.get("ci_run_id") else "CI"
    feedback = (
        f"{what} of {repo} for commit {sha} did not report within the timeout "
        f"({_duration(waited)}, [github] ci_timeout): counted as failed (timed_out). "
        "No CI logs were read."
    )
    ctx.log.warning(
        f"{what}: did not report within {_duration(waited)} (build {round_no}); back to build",
        ci_run_id=state.get("ci_run_id") or sha,
        ci_url=state.get("ci_url"),
        conclusion="timed_out",
        build_round=round_no,
    )
    return {"ci_conclusion": "timed_out", "build_feedback": feedback}


def _duration(seconds: float) -> str:
    """``2h``, ``45m``, ``90s``: a whole number of the largest unit that fits exactly."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


def _body(state: Any) -> str:
    rounds = int(state.get("build_round") or 1)
    issue = f"Closes #{state['issue_number']}\n\n" if state.get("issue_number") else ""
    return "\n".join(
        [
            f"{issue}{state.get('summary') or state['task']}",
            "",
            "## Verification",
            "",
            f"CI run {state.get('ci_run_id') or '-'} passed: {state.get('ci_url') or '-'}",
            f"Builds taken: {rounds}",
            f"Commit: {state.get('pushed_sha') or state.get('commit') or '-'}",
            "",
            "## Plan",
            "",
            str(state.get("plan") or "-"),
            "",
            f"_Opened by stageline run {state['run_id']}._",
        ]
    )


async def open_pull_request(state: Any, ctx: StageContext) -> dict[str, Any]:
    """Forge mode's ``approved``: a draft pull request of the branch (once per run)."""
    repo = _repo(ctx, state)
    client = _access(ctx).client
    branch = str(state["branch"])

    async def open_it() -> dict[str, Any]:
        pr = await client.open_draft_pr(
            repo.name,
            head=branch,
            base=repo.base,
            title=str(state["task"])[:200],
            body=_body({**dict(state), "run_id": ctx.run_id}),
        )
        return {"number": pr.number, "url": pr.url, "node_id": pr.node_id, "draft": pr.draft}

    try:
        pr = await ctx.effect(f"pr-{branch}", open_it, idempotent=True)
    except Exception as exc:
        what = f"opening the draft pull request of {branch}"
        raise _fail(FailurePhase.VALIDATION, what, exc) from exc
    then = "mark it ready for review" + (" and merge it (squash)" if repo.merge else "")
    ctx.log.info(
        f"draft pull request #{pr['number']} opened",
        pr_url=pr["url"],
        pr_number=pr["number"],
        pr_state="draft",
    )
    return {
        "outcome": "approved",
        "pr_url": pr["url"],
        "pr_number": int(pr["number"]),
        "pr_node_id": pr["node_id"],
        "pr_state": "draft",
        "apply_action": f"approve: {then} (#{pr['number']}); reject: leave the draft as it is",
    }


async def forge_publish(state: Any, ctx: StageContext) -> dict[str, Any]:
    """Forge mode's apply step: mark the draft ready for review; merge it where allowed."""
    from stageline.forge import PullRequest  # forge mode only

    repo = _repo(ctx, state)
    client = _access(ctx).client
    pr = PullRequest(
        number=int(state["pr_number"]),
        url=str(state.get("pr_url") or ""),
        node_id=str(state.get("pr_node_id") or ""),
        draft=True,
    )
    try:
        await ctx.effect(
            f"ready-{pr.number}", lambda: _ready(client, repo.name, pr), idempotent=True
        )
        pr_state = "ready"
        if repo.merge:
            await ctx.effect(
                f"merge-{pr.number}", lambda: client.merge(repo.name, pr), idempotent=True
            )
            pr_state = "merged"
    except Exception as exc:
        raise _fail(FailurePhase.VALIDATION, f"publishing pull request #{pr.number}", exc) from exc
    said = "merged" if pr_state == "merged" else "ready for review"
    ctx.log.info(
        f"pull request #{pr.number} {said}",
        pr_url=pr.url,
        pr_number=pr.number,
        pr_state=pr_state,
    )
    return {"pr_state": pr_state}


async def _ready(client: GitHubClient, repo: str, pr: PullRequest) -> bool:
    done = await client.mark_ready(repo, pr)
    return not bool(getattr(done, "draft", False))
