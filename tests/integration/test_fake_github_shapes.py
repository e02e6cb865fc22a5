"""The fake GitHub answers with the shapes of GitHub's published REST description: githubkit's
models, generated from that description, read every answer the forge tests rely on (a field
the description requires and the fake left out fails here, not in a test far away)."""

from __future__ import annotations

from typing import Any

import pytest
from fake_github import FakeGitHub

from forge_fixtures import REPO, TOKEN, GitRemote

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


async def test_every_answer_reads_as_githubs_description_says(
    fake_github: FakeGitHub, git_remote: GitRemote
) -> None:
    from githubkit import GitHub

    gh: Any = GitHub(TOKEN, base_url=fake_github.url + "/", http_cache=False, auto_retry=False)
    owner, name = REPO.split("/")
    fake_github.add_issue(REPO, 3, "A title", "A body", ("stageline",))
    git_remote.git("checkout", "-q", "-b", "feature")
    (git_remote.checkout / "x.txt").write_text("x\n")
    git_remote.git("add", "x.txt")
    git_remote.git("commit", "-q", "-m", "x")
    git_remote.git("push", "-q", "origin", "feature")
    rest = gh.rest
    read = {
        "issue": await rest.issues.async_get(owner, name, 3),
        "issues": await rest.issues.async_list_for_repo(owner, name, labels="stageline"),
        "comment": await rest.issues.async_create_comment(owner, name, 3, body="hello"),
        "comments": await rest.issues.async_list_comments(owner, name, 3),
        "ref": await rest.git.async_get_ref(owner, name, "heads/feature"),
    }
    await rest.actions.async_create_workflow_dispatch(owner, name, "ci.yml", ref="feature")
    run = fake_github.runs[0]
    read["runs"] = await rest.actions.async_list_workflow_runs(owner, name, "ci.yml")
    read["repo runs"] = await rest.actions.async_list_workflow_runs_for_repo(owner, name)
    fake_github.complete(run.id)
    read["run"] = await rest.actions.async_get_workflow_run(owner, name, run.id)
    read["jobs"] = await rest.actions.async_list_jobs_for_workflow_run(owner, name, run.id)
    fake_github.silent_apps = ["dependabot"]  # and an app's suite with no check runs
    read["suites"] = await rest.checks.async_list_suites_for_ref(owner, name, run.head_sha)
    created = await rest.pulls.async_create(
        owner, name, head="feature", base="main", title="t", body="b", draft=True
    )
    read["pull"] = created
    number = created.parsed_data.number
    read["pulls"] = await rest.pulls.async_list(owner, name, head=f"{owner}:feature")
    read["pull again"] = await rest.pulls.async_get(owner, name, number)
    fake_github.pulls[(REPO, number)]["draft"] = False
    read["merge"] = await rest.pulls.async_merge(owner, name, number, merge_method="squash")
    read["merged"] = await rest.pulls.async_get(owner, name, number)
    for what, response in read.items():
        assert response.parsed_data is not None, what  # validated against the models
    assert read["merged"].parsed_data.merged is True
    assert read["run"].parsed_data.conclusion == "success"
    log = await rest.actions.async_download_job_logs_for_workflow_run(owner, name, run.job_id)
    assert log.text == "ran the tests: success\n"
    ready = await gh.async_graphql(
        "mutation($id: ID!) { markPullRequestReadyForReview(input: {pullRequestId: $id}) "
        "{ pullRequest { isDraft } } }",
        {"id": f"PR_{number}"},
    )
    assert ready["markPullRequestReadyForReview"]["pullRequest"]["isDraft"] is False
