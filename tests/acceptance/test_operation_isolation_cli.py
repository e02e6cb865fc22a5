"""A user's own operation template, run as a user runs it: the fake ``claude`` on the PATH
writes files; the operation works on branch ``stageline/RUN`` in a worktree, never in the
checkout, whose uncommitted work stays byte-identical; ``prune`` removes worktree and branch."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agents import FakeAgents, agent_cli

Cli = Callable[..., subprocess.CompletedProcess[str]]
GIT = ["git", "-c", "user.email=t@example.com", "-c", "user.name=t"]

TEMPLATE = """
from __future__ import annotations

from typing import Any

from stageline.operations import OperationInputs, add_apply, operation_stage
from stageline.templates import Template


class State(OperationInputs, total=False):
    repo: str


def prompt(state: Any, op: Any) -> str:
    return "Document the app: one page under docs/."


document = operation_stage(
    "document", prompt=prompt, repo=lambda s: s["repo"], allowed=["docs"]
)
template = Template("document", state=State)
template.add_stage("document", document)
add_apply(template, after="document")
"""


def git(root: Path, *args: str) -> str:
    return subprocess.run(
        [*GIT, "-C", str(root), *args], capture_output=True, text=True, check=True
    ).stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "docs").mkdir(parents=True)
    (root / "README.md").write_text("# App\n")
    (root / "docs" / "intro.md").write_text("# Intro\n")
    (root / "app.py").write_text("print('hi')\n")
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "init"]):
        git(root, *args)
    # uncommitted work: an edit, a staged change, an untracked file, a draft in docs/
    (root / "README.md").write_text("# App\n\nMy unsaved edit.\n")
    (root / "app.py").write_text("print('staged')\n")
    git(root, "add", "app.py")
    (root / "notes.txt").write_text("untracked\n")
    (root / "docs" / "draft.md").write_text("# Draft, not committed\n")
    return root


@pytest.fixture
def agents(tmp_path: Path) -> FakeAgents:
    return FakeAgents(tmp_path / "bin")


@pytest.fixture
def cli(repo: Path, tmp_path: Path, agents: FakeAgents) -> Cli:
    (tmp_path / "document.py").write_text(TEMPLATE)
    return agent_cli(repo, tmp_path / "home", agents)


def start(cli: Cli, tmp_path: Path, run_id: str, *more: str) -> subprocess.CompletedProcess[str]:
    template = str(tmp_path / "document.py")
    return cli(
        "run", template, "-i", "repo=.", "-i", "harness=command:claude", *more, "--run-id", run_id
    )


def shown(cli: Cli, run_id: str) -> dict[str, Any]:
    return json.loads(cli("show", run_id, "--json").stdout)  # type: ignore[no-any-return]


def snapshot(root: Path) -> tuple[dict[str, bytes], str, str, str]:
    """Every file's bytes (the home and the run folders aside) and git's view of the checkout."""
    files = {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".git" not in p.relative_to(root).parts
    }
    return (
        files,
        git(root, "status", "--porcelain=v1"),
        git(root, "diff", "--cached"),
        git(root, "diff"),
    )


def branches(root: Path) -> list[str]:
    return git(root, "branch", "--format=%(refname:short)").split()


def test_a_write_outside_the_allowed_paths_fails_and_leaves_the_checkout_byte_identical(
    cli: Cli, repo: Path, tmp_path: Path, agents: FakeAgents
) -> None:
    before = snapshot(repo)
    agents.scenario(
        "claude",
        streams=["claude_session.jsonl"],
        writes={"docs/app.md": "# The app\n", "README.md": "# Hijacked\n"},
    )
    done = start(cli, tmp_path, "u1")
    assert done.returncode == 1, (done.stdout, done.stderr)
    run = shown(cli, "u1")["run"]
    assert run["failure_phase"] == "validation"
    assert "README.md: written outside the allowed path docs" in run["error"]
    [call] = agents.calls("claude")
    worktree = Path(call["cwd"])
    assert worktree.resolve() != repo.resolve()
    assert snapshot(repo) == before  # the checkout, uncommitted work and all, untouched
    # what the agent did was thrown away: the worktree is back at its base, nothing committed
    assert git(worktree, "status", "--porcelain") == ""
    assert (worktree / "README.md").read_text() == "# App\n"
    assert git(repo, "log", "--format=%s", "stageline/u1").splitlines()[1:] == ["init"]


def test_a_write_outside_that_the_agent_committed_itself_fails_too(
    cli: Cli, repo: Path, tmp_path: Path, agents: FakeAgents
) -> None:
    before = snapshot(repo)
    agents.scenario(
        "claude",
        streams=["claude_session.jsonl"],
        writes={"docs/app.md": "# The app\n", "app.py": "print('hijacked')\n"},
        commit=True,
    )
    done = start(cli, tmp_path, "u5")
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "app.py: written outside the allowed path docs" in shown(cli, "u5")["run"]["error"]
    assert snapshot(repo) == before
    assert git(repo, "log", "--format=%s", "stageline/u5").splitlines()[1:] == ["init"]


def test_the_result_is_a_commit_on_the_branch_and_the_apply_gate_brings_it_in(
    cli: Cli, repo: Path, tmp_path: Path, agents: FakeAgents
) -> None:
    before = snapshot(repo)
    agents.scenario(
        "claude", streams=["claude_session.jsonl"], writes={"docs/app.md": "# The app\n"}
    )
    waiting = start(cli, tmp_path, "u2")
    assert waiting.returncode == 3, (waiting.stdout, waiting.stderr)
    [call] = agents.calls("claude")
    assert Path(call["cwd"]).resolve() != repo.resolve()
    assert (Path(call["cwd"]) / "docs" / "draft.md").exists()  # the draft was carried in
    assert snapshot(repo) == before
    state = shown(cli, "u2")["state"]
    assert state["branch"] == "stageline/u2" and "docs/app.md" in state["changes"]
    assert git(repo, "show", f"{state['commit']}:docs/app.md") == "# The app\n"
    subject = git(repo, "log", "-1", "--format=%s", "stageline/u2").strip()
    assert subject.startswith("document: ")
    [gate] = json.loads(cli("pending", "u2", "--json").stdout)
    assert gate["name"] == "apply"
    approved = cli("approve", "u2")
    assert approved.returncode == 0, (approved.stdout, approved.stderr)
    assert (repo / "docs" / "app.md").read_text() == "# The app\n"
    after = snapshot(repo)[0]
    assert {k: v for k, v in after.items() if k != "docs/app.md"} == before[0]  # all else kept


def test_apply_flag_brings_the_result_in_at_once_and_prune_removes_worktree_and_branch(
    cli: Cli, repo: Path, tmp_path: Path, agents: FakeAgents
) -> None:
    agents.scenario("claude", streams=["claude_session.jsonl"], writes={"docs/app.md": "# App\n"})
    done = start(cli, tmp_path, "u3", "--apply")
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert (repo / "docs" / "app.md").read_text() == "# App\n"
    worktree = Path(shown(cli, "u3")["state"]["worktree"])
    assert worktree.is_dir() and "stageline/u3" in branches(repo)
    # a branch a person checked out to review is theirs: prune leaves it
    agents.scenario("claude", streams=["claude_session.jsonl"], writes={"docs/b.md": "# B\n"})
    assert start(cli, tmp_path, "u4").returncode == 3
    assert cli("reject", "u4").returncode == 1  # the run ends rejected
    review = tmp_path / "review"
    git(repo, "worktree", "add", "--force", str(review), "stageline/u4")
    time.sleep(1.1)  # the runs are older than the second `--older-than` allows
    pruned = cli("prune", "--older-than", "1s", "--status", "succeeded,rejected")
    assert pruned.returncode == 0, (pruned.stdout, pruned.stderr)
    assert not worktree.exists() and "stageline/u3" not in branches(repo)
    assert "stageline/u4" in branches(repo)
    assert str(worktree) not in git(repo, "worktree", "list")
    assert snapshot(repo)[0]["docs/app.md"] == b"# App\n"


def test_a_folder_outside_any_git_repository_fails_before_the_agent_starts(
    cli: Cli, tmp_path: Path, agents: FakeAgents
) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    template = str(tmp_path / "document.py")
    done = cli("run", template, "-i", f"repo={plain}", "-i", "harness=command:claude")
    assert done.returncode == 1
    assert "is not inside a git repository" in done.stdout + done.stderr
    assert agents.calls("claude") == []


def test_a_home_inside_the_checkout_stays_out_of_git_status(
    repo: Path, tmp_path: Path, agents: FakeAgents
) -> None:
    (tmp_path / "document.py").write_text(TEMPLATE)
    inside = agent_cli(repo, repo / ".stageline", agents)
    status = git(repo, "status", "--porcelain=v1")
    agents.scenario("claude", streams=["claude_session.jsonl"], writes={"docs/app.md": "# App\n"})
    done = start(inside, tmp_path, "h1", "--apply")
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert (repo / ".stageline" / "runs" / "h1" / "worktree" / "docs" / "app.md").exists()
    after = set(git(repo, "status", "--porcelain=v1").splitlines())
    assert after == {*status.splitlines(), "?? docs/app.md"}  # no .stageline/ in there
