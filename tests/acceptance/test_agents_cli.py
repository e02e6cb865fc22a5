"""Operations with real coding-agent executables, as a user runs them: fake ``claude`` and
``codex`` on the PATH replay recorded streams (tests/fixtures/agents; see
tests/unit/test_harness_parsers.py for where their shapes come from)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agents import FakeAgents, agent_cli

Cli = Callable[..., subprocess.CompletedProcess[str]]

SESSION = "9f1c2b7e-3a4d-4c5e-8f60-1a2b3c4d5e6f"
THREAD = "0199a213-81c0-7800-8aa1-bbab2a035a53"
PAGE = "---\ntitle: Overview\n---\n# Overview\n\nThe app and its tests.\n"
GIT = ["git", "-c", "user.email=t@example.com", "-c", "user.name=t"]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "src").mkdir(parents=True)
    (root / "README.md").write_text("# App\n\nIt answers questions.\n")
    (root / "src" / "app.py").write_text("print('hi')\n")
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "init"]):
        subprocess.run([*GIT, "-C", str(root), *args], check=True)
    return root


@pytest.fixture
def agents(tmp_path: Path) -> FakeAgents:
    return FakeAgents(tmp_path / "bin")


@pytest.fixture
def cli(repo: Path, tmp_path: Path, agents: FakeAgents) -> Cli:
    return agent_cli(repo, tmp_path / "home", agents)


def shown(cli: Cli, run_id: str) -> dict[str, Any]:
    return json.loads(cli("show", run_id, "--json").stdout)  # type: ignore[no-any-return]


def events(cli: Cli, run_id: str) -> list[dict[str, Any]]:
    return json.loads(cli("logs", run_id, "--json").stdout)  # type: ignore[no-any-return]


def metrics(cli: Cli, run_id: str, node: str) -> dict[str, float]:
    return [r for r in shown(cli, run_id)["records"] if r["node"] == node][-1]["metrics"]


def test_claude_stream_is_recorded_classified_and_costed(
    cli: Cli, repo: Path, agents: FakeAgents
) -> None:
    agents.scenario("claude", streams=["claude_session.jsonl"], writes={"wiki/overview.md": PAGE})
    done = cli(
        "run",
        "wiki_build",
        "-i",
        "wiki=wiki",
        "-i",
        "harness=command:claude",
        "-i",
        "max_turns:=12",
        "--apply",
        "--run-id",
        "c1",
    )
    assert done.returncode == 0, (done.stdout, done.stderr)
    # live, one line each: the tool and what it acts on
    assert "build Bash git ls-files | head -50" in done.stdout
    assert "build task_started: Survey the tests" in done.stdout
    [call] = agents.calls("claude")
    assert call["argv"][call["argv"].index("--max-turns") + 1] == "12"
    assert call["cwd"] != str(repo)  # the agent worked in the run's worktree
    log = events(cli, "c1")
    helper = [e for e in log if e["kind"] == "harness.helper_agent"]
    assert len(helper) == 5 and {e["category"] for e in helper} == {"tool"}
    assert [e["message"] for e in log if e["kind"] == "harness.warning"] == [
        "malformed line, not JSON (Expecting value)"
    ]
    assert not [e for e in log if e["kind"] in ("harness.text_delta", "harness.error")]
    assert metrics(cli, "c1", "build") == pytest.approx(
        {
            "input_tokens": 12 + 5320 + 43640,
            "cached_input_tokens": 43640,
            "output_tokens": 1290,
            "cost": 0.0932,
        }
    )
    [node] = [n for n in json.loads(cli("stats", "--json").stdout)["nodes"] if n["node"] == "build"]
    assert node["cost"] == pytest.approx(0.0932) and node["input_tokens"] == 48972
    transcript = cli("transcript", "c1", "build").stdout
    assert "Write /repo/wiki/overview.md" in transcript and "Bash git ls-files" in transcript
    assert (repo / "wiki" / "overview.md").read_text() == PAGE  # applied with --apply


def test_failed_claude_operation_keeps_its_cost_and_retry_resumes_its_session(
    cli: Cli, agents: FakeAgents
) -> None:
    agents.scenario(
        "claude",
        streams=["claude_error.jsonl", "claude_session.jsonl"],
        exit=[1, 0],
        writes={"wiki/overview.md": PAGE},
    )
    failed = cli(
        "run",
        "wiki_build",
        "-i",
        "wiki=wiki",
        "-i",
        "harness=command:claude",
        "--apply",
        "--run-id",
        "c2",
    )
    assert failed.returncode == 1
    run = shown(cli, "c2")["run"]
    assert run["status"] == "failed" and run["failure_phase"] == "provider_execution"
    assert "Reached maximum number of turns (4)" in run["error"]
    [error] = [e for e in events(cli, "c2") if e["kind"] == "harness.error"]
    assert "terminal reason: max_turns" in error["message"] and error["category"] == "error"
    assert metrics(cli, "c2", "build")["cost"] == pytest.approx(0.09)  # a failure keeps its cost
    [node] = [n for n in json.loads(cli("stats", "--json").stdout)["nodes"] if n["node"] == "build"]
    assert node["cost"] == pytest.approx(0.09)  # and stats show what the failed operation spent
    retried = cli("retry", "c2")
    assert retried.returncode == 0, (retried.stdout, retried.stderr)
    first, second = agents.calls("claude")
    assert "--resume" not in first["argv"]
    assert second["argv"][second["argv"].index("--resume") + 1] == SESSION
    assert second["prompt"].startswith("You were stopped before you finished.")


def test_retry_fresh_starts_a_new_session(cli: Cli, agents: FakeAgents) -> None:
    agents.scenario(
        "claude",
        streams=["claude_error.jsonl", "claude_session.jsonl"],
        exit=[1, 0],
        writes={"wiki/overview.md": PAGE},
    )
    assert (
        cli(
            "run",
            "wiki_build",
            "-i",
            "wiki=wiki",
            "-i",
            "harness=command:claude",
            "--apply",
            "--run-id",
            "c3",
        ).returncode
        == 1
    )
    assert cli("retry", "c3", "--fresh").returncode == 0
    assert "--resume" not in agents.calls("claude")[1]["argv"]


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split()[2] == "Z"


def test_a_cost_budget_stops_the_agent_mid_stream_and_waits_at_the_budget_gate(
    cli: Cli, agents: FakeAgents
) -> None:
    # The stream would go on for long and the agent would then hang for minutes: the budget
    # is past at its first message (estimated from its usage), so stageline stops it there.
    agents.scenario(
        "claude",
        streams=["claude_session.jsonl"],
        delay=0.2,
        hang=[True],
        writes={"wiki/overview.md": PAGE},
    )
    waiting = cli(
        "run",
        "wiki_build",
        "-i",
        "wiki=wiki",
        "-i",
        "harness=command:claude",
        "--budget-cost",
        "0.01",
        "--apply",
        "--run-id",
        "b1",
    )
    assert waiting.returncode == 3, (waiting.stdout, waiting.stderr)
    assert "agent stopped: the run used" in waiting.stdout
    [call] = agents.calls("claude")
    assert _gone(call["pid"])  # its process group was stopped
    [gate] = json.loads(cli("pending", "b1", "--json").stdout)
    assert gate["name"] == "budget" and gate["payload"]["budget"]["measure"] == "cost"
    spent = metrics(cli, "b1", "build")
    assert 0.01 < spent["cost"] < 0.05 and spent["cached_input_tokens"] == 11800
    kinds = [e["kind"] for e in events(cli, "b1")]
    assert "harness.result" not in kinds and "operation.stopped" in kinds
    # Approved: the agent continues its session, is past the raised budget again, waits again.
    again = cli("approve", "b1")
    assert again.returncode == 3, (again.stdout, again.stderr)
    second = agents.calls("claude")[1]
    assert second["argv"][second["argv"].index("--resume") + 1] == SESSION
    assert metrics(cli, "b1", "build")["cost"] > spent["cost"]
    rejected = cli("reject", "b1", "--note", "enough")
    assert rejected.returncode == 1
    run = shown(cli, "b1")["run"]
    assert run["status"] == "failed" and run["failure_phase"] == "budget"
    assert metrics(cli, "b1", "build")["cost"] > spent["cost"]  # the spend is kept


def _tree(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".git" not in p.relative_to(root).parts
    }


def _git_view(root: Path) -> tuple[str, str, str]:
    def out(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(root), *args], capture_output=True, text=True, check=True
        ).stdout

    return out("status", "--porcelain=v1"), out("diff", "--cached"), out("diff")


def test_checkout_with_uncommitted_work_is_untouched_by_a_write_outside_the_wiki(
    cli: Cli, repo: Path, agents: FakeAgents
) -> None:
    (repo / "README.md").write_text("# App\n\nMy unsaved edit.\n")
    (repo / "notes.txt").write_text("untracked notes\n")
    (repo / "src" / "app.py").write_text("print('staged')\n")
    subprocess.run(["git", "-C", str(repo), "add", "src/app.py"], check=True)
    before, view = _tree(repo), _git_view(repo)
    agents.scenario(
        "claude",
        streams=["claude_session.jsonl"],
        writes={"wiki/overview.md": PAGE, "README.md": "# Hijacked\n"},
    )
    done = cli(
        "run",
        "wiki_build",
        "-i",
        "wiki=wiki",
        "-i",
        "harness=command:claude",
        "--apply",
        "--run-id",
        "w1",
    )
    assert done.returncode == 1
    run = shown(cli, "w1")["run"]
    assert run["failure_phase"] == "validation"
    assert "README.md: written outside the allowed path wiki" in run["error"]
    assert _tree(repo) == before and _git_view(repo) == view


def test_apply_gate_brings_the_result_into_the_checkout(
    cli: Cli, repo: Path, agents: FakeAgents
) -> None:
    (repo / "README.md").write_text("# App\n\nMy unsaved edit.\n")
    agents.scenario("claude", streams=["claude_session.jsonl"], writes={"wiki/overview.md": PAGE})
    waiting = cli(
        "run", "wiki_build", "-i", "wiki=wiki", "-i", "harness=command:claude", "--run-id", "g1"
    )
    assert waiting.returncode == 3 and "apply" in waiting.stdout
    assert not (repo / "wiki").exists()
    state = shown(cli, "g1")["state"]
    log = subprocess.run(
        ["git", "-C", str(repo), "log", "--format=%s", "stageline/g1"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert log[0].startswith("build: Wrote the overview page.") and state["commit"]
    assert "wiki/overview.md" in state["changes"]
    assert cli("approve", "g1").returncode == 0
    assert (repo / "wiki" / "overview.md").read_text() == PAGE
    assert (repo / "README.md").read_text() == "# App\n\nMy unsaved edit.\n"


def test_codex_reconnect_in_a_completed_turn_succeeds_and_a_failed_turn_fails(
    cli: Cli, repo: Path, agents: FakeAgents
) -> None:
    agents.scenario(
        "codex",
        streams=["codex_session.jsonl", "codex_failed_turn.jsonl", "codex_session.jsonl"],
        writes={"wiki/overview.md": PAGE},
    )
    ok = cli(
        "run",
        "wiki_build",
        "-i",
        "wiki=wiki",
        "-i",
        "harness=command:codex",
        "-i",
        "model=gpt-5-codex",
        "--apply",
        "--run-id",
        "x1",
    )
    assert ok.returncode == 0, (ok.stdout, ok.stderr)
    log = events(cli, "x1")
    changes = [e for e in log if e["data"].get("name") == "file_change"]
    assert [e["kind"] for e in changes] == ["harness.tool_use", "harness.tool_result"]
    assert {e["category"] for e in changes} == {"tool"}
    assert changes[0]["data"]["paths"] == ["/repo/wiki/overview.md"]
    reconnect = [e for e in log if e["message"] == "Reconnecting... 1/5"]
    assert reconnect and reconnect[0]["level"] == "warning"
    spent = metrics(cli, "x1", "build")
    assert spent["input_tokens"] == 24763 and spent["cached_input_tokens"] == 24448
    assert spent["cost"] > 0
    agents.scenario(
        "codex",
        streams=["codex_session.jsonl", "codex_failed_turn.jsonl", "codex_session.jsonl"],
        writes={"wiki2/overview.md": PAGE},
    )
    failed = cli(
        "run",
        "wiki_build",
        "-i",
        "wiki=wiki2",
        "-i",
        "harness=command:codex",
        "--apply",
        "--run-id",
        "x2",
    )
    assert failed.returncode == 1
    run = shown(cli, "x2")["run"]
    assert run["failure_phase"] == "provider_execution"
    assert "stream disconnected before completion" in run["error"]
    assert cli("retry", "x2").returncode == 0
    argv = agents.calls("codex")[2]["argv"]
    assert argv[-3:] == ["resume", THREAD, "-"]


@pytest.mark.parametrize(
    ("args", "why"),
    [
        (["wiki_build"], "missing required input 'wiki'"),
        (["wiki_ingest", "-i", "wiki=wiki"], "missing required input 'source'"),
        (
            ["wiki_ingest", "-i", "wiki=wiki", "-i", "source=nope.md"],
            "input 'source': nope.md does not exist",
        ),
        (["wiki_garden", "-i", "wiki=nowiki"], "input 'wiki': nowiki does not exist"),
        (["wiki_build", "-i", "wiki=README.md"], "input 'wiki': README.md is a file"),
        (["wiki_build", "-i", "wiki=/tmp/stageline-not-a-repo/wiki"], "is not inside a git"),
        (["wiki_build", "-i", "wiki=wiki", "-i", "harness=command:gpt"], "unknown command agent"),
        (["sdlc", "-i", "task=x", "-i", "repo=missing"], "input 'repo': missing does not exist"),
        (["sdlc", "-i", "task=x", "-i", "repo=README.md"], "not a folder"),
        (["sdlc", "-i", "repo=."], "missing required input 'task'"),
    ],
)
def test_input_errors_exit_2_naming_the_input_and_create_nothing(
    cli: Cli, args: list[str], why: str
) -> None:
    done = cli("run", *args)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert why in done.stderr and len(done.stderr.strip().splitlines()) <= 2
    assert json.loads(cli("runs", "--json").stdout) == []


def test_sdlc_builds_with_claude_from_the_approved_plan(
    cli: Cli, agents: FakeAgents, tmp_path: Path
) -> None:
    sample = tmp_path / "sample"
    shutil.copytree(Path(__file__).resolve().parents[2] / "examples" / "sdlc_sample", sample)
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "sample"]):
        subprocess.run([*GIT, "-C", str(sample), *args], check=True)
    agents.scenario(
        "claude",
        streams=["claude_session.jsonl"],
        writes={"CHANGELOG.md": "# Changelog\n\n- subtract\n"},
    )
    asked = cli(
        "run",
        "sdlc",
        "-i",
        "task=Add a subtract function",
        "-i",
        f"repo={sample}",
        "-i",
        "review_threshold:=0",
        "-i",
        "harness=command:claude",
        "--run-id",
        "d1",
    )
    assert asked.returncode == 3
    planned = cli(
        "answer",
        "d1",
        "-a",
        "scope=calc.py gains subtract with tests",
        "-a",
        "priority=normal",
        "-a",
        "done_when=CI passes",
    )
    assert planned.returncode == 3 and "plan_approval" in planned.stdout
    assert agents.calls("claude") == []  # nothing is built before a person approves the plan
    done = cli("approve", "d1", "--gate", "plan_approval")
    assert done.returncode == 3, (done.stdout, done.stderr)  # verified: at the apply gate
    [call] = agents.calls("claude")
    plan = shown(cli, "d1")["state"]["plan"]
    assert plan.startswith("# Plan v1: Add a subtract function") and plan in call["prompt"]
    nodes = [r["node"] for r in shown(cli, "d1")["records"]]
    assert nodes[-6:] == ["plan_approved", "build", "dispatch", "verify", "approved", "apply"]
