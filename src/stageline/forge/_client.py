"""``GitHubClient``: the GitHub calls sdlc's forge mode makes, over githubkit (async, typed
endpoints generated from GitHub's OpenAPI description).

Answers are read as GitHub's JSON into small records (``_models``), so a field GitHub adds
or an enum value it grows never breaks a run. Every failure becomes one ``ForgeError`` with
GitHub's status and message (never the token). No cache (polls must see what changed) and no
automatic retries: the callers retry (the outbox, the CI poller's backoff).
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, Literal, TypeVar

import httpx
import jwt
from githubkit import AppInstallationAuthStrategy, GitHub, TokenAuthStrategy
from githubkit.exception import GraphQLFailed, RequestFailed, RequestTimeout
from githubkit.exception import RequestError as GitHubRequestError

from stageline.errors import ForgeError
from stageline.forge._models import CiRun, Comment, Issue, PullRequest
from stageline.forge._settings import GitHubSettings

__all__ = ["GitHubClient"]

T = TypeVar("T")
_PAGE = 100
_MAX_PAGES = 20
"""At most this many pages of a listing (2,000 items) are read."""

_READY = """
mutation($id: ID!) {
  markPullRequestReadyForReview(input: {pullRequestId: $id}) {
    pullRequest { number isDraft url }
  }
}
"""


def _split(repo: str) -> tuple[str, str]:
    owner, _, name = repo.partition("/")
    return owner, name


def _message(failed: RequestFailed) -> str:
    response = failed.response
    try:
        data = response.json()
    except ValueError:
        data = None
    if isinstance(data, dict) and data.get("message"):
        text = str(data["message"])
        errors = data.get("errors")
        if isinstance(errors, list) and errors:
            details = [
                str(e.get("message") or e.get("code")) if isinstance(e, dict) else str(e)
                for e in errors
            ]
            text += ": " + "; ".join(details)
        return text
    return response.raw_response.reason_phrase or "no message"


class GitHubClient:
    """One per process (its connection pool is shared); ``async with`` closes it."""

    def __init__(self, settings: GitHubSettings, *, timeout: float = 30.0) -> None:
        self.settings = settings
        app = settings.app
        auth = (
            TokenAuthStrategy(settings.token or "")
            if app is None
            else AppInstallationAuthStrategy(app.app_id, app.private_key, app.installation_id)
        )
        self._gh: GitHub[Any] = GitHub(
            auth,
            base_url=settings.api_url + "/",
            timeout=timeout,
            http_cache=False,
            auto_retry=False,
            user_agent="stageline",
        )

    async def __aenter__(self) -> GitHubClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Nothing to release: each call opens its own httpx client (githubkit's default)."""

    async def _call(self, action: str, call: Awaitable[T]) -> T:
        try:
            return await call
        except RequestFailed as exc:
            raise ForgeError(action, exc.response.status_code, _message(exc)) from None
        except RequestTimeout:
            raise ForgeError(action, None, "no answer before the timeout") from None
        except GraphQLFailed as exc:
            said = "; ".join(e.message for e in exc.response.errors or ()) or "GraphQL error"
            raise ForgeError(action, 200, said) from None
        except GitHubRequestError as exc:
            cause = exc.exc
            if isinstance(cause, RequestFailed):  # the App's sign-in, refused
                said = f"signing in as the GitHub App: {_message(cause)}"
                raise ForgeError(action, cause.response.status_code, said) from None
            if isinstance(cause, ValueError | jwt.PyJWTError) and self.settings.app is not None:
                said = type(cause).__name__  # never the key's text
                raise ForgeError(
                    action, None, f"the GitHub App's private key cannot sign its sign-in ({said})"
                ) from None
            what = type(cause).__name__ if isinstance(cause, httpx.HTTPError) else "error"
            raise ForgeError(action, None, f"cannot reach GitHub ({what})") from None

    async def _json(self, action: str, call: Awaitable[Any]) -> Any:
        response = await self._call(action, call)
        return response.json()

    # issues

    async def get_issue(self, repo: str, number: int) -> Issue:
        owner, name = _split(repo)
        data = await self._json(
            f"reading issue {repo}#{number}", self._gh.rest.issues.async_get(owner, name, number)
        )
        return Issue.from_json(data)

    async def list_labelled_issues(self, repo: str, label: str) -> list[Issue]:
        """The open issues of ``repo`` that carry ``label`` (pull requests left out), oldest
        first."""
        owner, name = _split(repo)
        found: list[Issue] = []
        for page in range(1, _MAX_PAGES + 1):
            data = await self._json(
                f"listing issues of {repo} labelled {label!r}",
                self._gh.rest.issues.async_list_for_repo(
                    owner,
                    name,
                    state="open",
                    labels=label,
                    sort="created",
                    direction="asc",
                    per_page=_PAGE,
                    page=page,
                ),
            )
            found += [Issue.from_json(i) for i in data if not i.get("pull_request")]
            if len(data) < _PAGE:
                break
        return found

    async def comment(self, repo: str, number: int, body: str) -> int:
        """Posts ``body`` on issue (or pull request) ``number``; its comment id."""
        owner, name = _split(repo)
        data = await self._json(
            f"commenting on {repo}#{number}",
            self._gh.rest.issues.async_create_comment(owner, name, number, body=body),
        )
        return int(data["id"])

    async def comments(self, repo: str, number: int) -> list[Comment]:
        """The comments of issue ``number``, oldest first."""
        owner, name = _split(repo)
        found: list[Comment] = []
        for page in range(1, _MAX_PAGES + 1):
            data = await self._json(
                f"reading the comments of {repo}#{number}",
                self._gh.rest.issues.async_list_comments(
                    owner, name, number, per_page=_PAGE, page=page
                ),
            )
            found += [Comment.from_json(c) for c in data]
            if len(data) < _PAGE:
                break
        return found

    # git

    async def ref_sha(self, repo: str, branch: str) -> str | None:
        """The commit branch ``branch`` points at on GitHub; None when there is no such
        branch."""
        owner, name = _split(repo)
        try:
            data = await self._json(
                f"reading branch {branch!r} of {repo}",
                self._gh.rest.git.async_get_ref(owner, name, f"heads/{branch}"),
            )
        except ForgeError as exc:
            if exc.status == 404:
                return None
            raise
        return str(data["object"]["sha"])

    # actions and checks

    async def dispatch_workflow(
        self, repo: str, workflow: str, ref: str, inputs: dict[str, str] | None = None
    ) -> None:
        """Starts ``workflow`` (its file name or id) on branch ``ref``. GitHub answers
        without the run: find it with ``workflow_runs(head_sha=...)``."""
        owner, name = _split(repo)
        await self._call(
            f"dispatching workflow {workflow!r} of {repo} on {ref!r}",
            self._gh.rest.actions.async_create_workflow_dispatch(
                owner, name, workflow, ref=ref, inputs=inputs or {}
            ),
        )

    async def workflow_runs(
        self,
        repo: str,
        workflow: str | None = None,
        *,
        head_sha: str | None = None,
        branch: str | None = None,
    ) -> list[CiRun]:
        """Runs of ``workflow`` (every workflow when None) for a commit or a branch, newest
        first."""
        owner, name = _split(repo)
        filters: dict[str, Any] = {"per_page": _PAGE}
        if head_sha:
            filters["head_sha"] = head_sha
        if branch:
            filters["branch"] = branch
        action = f"listing workflow runs of {repo}"
        if workflow is None:
            data = await self._json(
                action,
                self._gh.rest.actions.async_list_workflow_runs_for_repo(owner, name, **filters),
            )
        else:
            data = await self._json(
                action,
                self._gh.rest.actions.async_list_workflow_runs(owner, name, workflow, **filters),
            )
        return [CiRun.from_workflow_run(r) for r in data.get("workflow_runs") or ()]

    async def workflow_run(self, repo: str, run_id: int) -> CiRun:
        owner, name = _split(repo)
        data = await self._json(
            f"reading workflow run {run_id} of {repo}",
            self._gh.rest.actions.async_get_workflow_run(owner, name, run_id),
        )
        return CiRun.from_workflow_run(data)

    async def cancel_workflow_run(self, repo: str, run_id: int) -> None:
        """Ask GitHub to cancel workflow run ``run_id`` (202: it stops soon after)."""
        owner, name = _split(repo)
        await self._call(
            f"cancelling workflow run {run_id} of {repo}",
            self._gh.rest.actions.async_cancel_workflow_run(owner, name, run_id),
        )

    async def check_suites(self, repo: str, sha: str) -> list[CiRun]:
        """The check suites of commit ``sha`` (one per app that checks it)."""
        owner, name = _split(repo)
        data = await self._json(
            f"listing the check suites of {repo}@{sha[:12]}",
            self._gh.rest.checks.async_list_suites_for_ref(owner, name, sha, per_page=_PAGE),
        )
        return [CiRun.from_check_suite(s) for s in data.get("check_suites") or ()]

    async def ci_log_tail(self, repo: str, ci_run: CiRun, lines: int = 60) -> str:
        """The last ``lines`` lines of the logs of the run's failed jobs (every job when none
        failed), each job's part headed by its name. A check suite's logs are its workflow
        runs'."""
        owner, name = _split(repo)
        if ci_run.kind == "check_suite":
            data = await self._json(
                f"listing the workflow runs of check suite {ci_run.id} of {repo}",
                self._gh.rest.actions.async_list_workflow_runs_for_repo(
                    owner, name, check_suite_id=ci_run.id
                ),
            )
            run_ids = [int(r["id"]) for r in data.get("workflow_runs") or ()]
        else:
            run_ids = [ci_run.id]
        jobs: list[dict[str, Any]] = []
        for run_id in run_ids:
            data = await self._json(
                f"listing the jobs of workflow run {run_id} of {repo}",
                self._gh.rest.actions.async_list_jobs_for_workflow_run(
                    owner, name, run_id, per_page=_PAGE
                ),
            )
            jobs += list(data.get("jobs") or ())
        failed = [j for j in jobs if j.get("conclusion") not in ("success", "skipped", None)]
        text: list[str] = []
        for job in failed or jobs:
            response = await self._call(
                f"reading the log of job {job['id']} of {repo}",
                self._gh.rest.actions.async_download_job_logs_for_workflow_run(
                    owner, name, int(job["id"])
                ),
            )
            text += [f"== {job.get('name') or job['id']} ==", *response.text.splitlines()]
        return "\n".join(text[-lines:]) if lines > 0 else ""

    # pull requests

    async def open_draft_pr(
        self, repo: str, *, head: str, base: str, title: str, body: str
    ) -> PullRequest:
        """A draft pull request of branch ``head`` into ``base``; the open one of ``head``
        when there is one already (so a retried stage opens one, not two)."""
        owner, name = _split(repo)
        existing = await self.find_pr(repo, head)
        if existing is not None:
            return existing
        data = await self._json(
            f"opening a draft pull request of {head!r} into {base!r} in {repo}",
            self._gh.rest.pulls.async_create(
                owner, name, head=head, base=base, title=title, body=body, draft=True
            ),
        )
        return PullRequest.from_json(data)

    async def find_pr(self, repo: str, head: str) -> PullRequest | None:
        """The open pull request of branch ``head`` (of the repository's own owner)."""
        owner, name = _split(repo)
        data = await self._json(
            f"looking for the pull request of {head!r} in {repo}",
            self._gh.rest.pulls.async_list(owner, name, head=f"{owner}:{head}", state="open"),
        )
        if not data:
            return None
        return await self.get_pr(repo, int(data[0]["number"]))

    async def get_pr(self, repo: str, number: int) -> PullRequest:
        owner, name = _split(repo)
        data = await self._json(
            f"reading pull request {repo}#{number}",
            self._gh.rest.pulls.async_get(owner, name, number),
        )
        return PullRequest.from_json(data)

    async def mark_ready(self, repo: str, pr: PullRequest) -> PullRequest:
        """Marks a draft ready for review (GraphQL: REST cannot un-draft a pull request)."""
        if not pr.draft:
            return pr
        await self._call(
            f"marking {repo}#{pr.number} ready for review",
            self._gh.async_graphql(_READY, {"id": pr.node_id}),
        )
        return await self.get_pr(repo, pr.number)

    async def merge(
        self, repo: str, pr: PullRequest, *, method: Literal["merge", "squash", "rebase"] = "squash"
    ) -> str:
        """Merges the pull request; the merge commit's sha."""
        owner, name = _split(repo)
        data = await self._json(
            f"merging {repo}#{pr.number}",
            self._gh.rest.pulls.async_merge(owner, name, pr.number, merge_method=method),
        )
        return str(data.get("sha") or "")
