"""``stageline run sdlc`` against the sample repository: build, dispatch (real CI), verify."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sdlc_sample"
GIT = ["git", "-c", "user.email=t@example.com", "-c", "user.name=t"]

Cli = Callable[..., subprocess.CompletedProcess[str]]

ANSWERS = [
    "-a",
    "scope=calc.py gains a subtract function with its tests",
    "-a",
    "priority=normal",
    "-a",
    "done_when=CI passes",
]


@pytest.fixture
def sample(tmp_path: Path) -> Path:
    """The shipped sample, as its own git repository."""
    repo = tmp_path / "sample"
    shutil.copytree(SAMPLE, repo)
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "sample"]):
        subprocess.run([*GIT, "-C", str(repo), *args], check=True)
    return repo


def _start(cli: Cli, sample: Path, run_id: str, *extra: str, code: int = 3) -> dict[str, object]:
    waiting = cli(
        "run",
        "sdlc",
        "-i",
        "task=Add a subtract function to calc",
        "-i",
        f"repo={sample}",
        "-i",
        "review_threshold:=0",
        "--run-id",
        run_id,
        *extra,
    )
    assert waiting.returncode == 3, (waiting.stdout, waiting.stderr)  # the clarifier asks
    planned = cli("answer", run_id, *ANSWERS)
    assert planned.returncode == 3, (planned.stdout, planned.stderr)  # clarify, plan, review
    assert "plan_approval" in planned.stdout
    shown = json.loads(cli("show", run_id, "--json").stdout)
    assert [r["node"] for r in shown["records"]][-3:] == ["plan", "review", "plan_approval"]
    done = cli("approve", run_id, "--gate", "plan_approval")  # a person approves the plan
    # (then a verified build waits at the apply gate: exit 3)
    assert done.returncode == code, (done.stdout, done.stderr)
    shown = json.loads(cli("show", run_id, "--json").stdout)
    return shown


def _status(repo: Path) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), "status", "--porcelain"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def test_sample_goes_through_build_dispatch_verify_to_approved(cli: Cli, sample: Path) -> None:
    shown = _start(cli, sample, "s1")
    assert shown["run"]["status"] == "waiting"  # type: ignore[index]
    state = shown["state"]
    assert isinstance(state, dict)
    assert state["outcome"] == "approved" and state["ci_conclusion"] == "success"
    nodes = [r["node"] for r in shown["records"]]  # type: ignore[union-attr]
    assert nodes[-5:] == ["build", "dispatch", "verify", "approved", "apply"]
    log = subprocess.run(
        ["git", "-C", str(sample), "log", "--format=%s", "stageline/s1"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert log == ["Add a subtract function to calc", "sample"]
    assert _status(sample) == ""  # the checkout is untouched until the apply gate
    ci_log = Path(str(state["ci_log_path"])).read_text()
    assert "Ran 2 tests" in ci_log and "OK" in ci_log
    summary = Path(str(state["pr_summary_path"])).read_text()
    assert summary.startswith("# Add a subtract function to calc\n\nBranch `stageline/s1` at ")
    assert "CHANGELOG.md | 2 ++" in summary and "CI run s1-ci1 passed after 1 build(s)" in summary
    transcript = cli("transcript", "s1", "build")
    assert transcript.returncode == 0 and "CHANGELOG.md" in transcript.stdout


def test_the_checkout_changes_only_when_the_apply_gate_is_approved(cli: Cli, sample: Path) -> None:
    (sample / "notes.txt").write_text("mine, uncommitted\n")
    _start(cli, sample, "a1")
    pending = cli("pending")
    assert pending.returncode == 0 and "apply" in pending.stdout
    assert _status(sample) == "?? notes.txt\n"  # only the person's own work
    assert not (sample / "CHANGELOG.md").exists()
    applied = cli("approve", "a1", "--gate", "apply")
    assert applied.returncode == 0, (applied.stdout, applied.stderr)
    shown = json.loads(cli("show", "a1", "--json").stdout)
    assert shown["run"]["status"] == "succeeded"
    assert shown["state"]["applied"] == ["CHANGELOG.md"]
    assert _status(sample) == "?? CHANGELOG.md\n?? notes.txt\n"  # uncommitted, to review
    assert (
        "- Add a subtract function to calc (stageline run a1, build 1)"
        in (sample / "CHANGELOG.md").read_text()
    )
    assert (sample / "notes.txt").read_text() == "mine, uncommitted\n"


def test_apply_brings_the_verified_branch_in_without_waiting(cli: Cli, sample: Path) -> None:
    shown = _start(cli, sample, "a2", "--apply", code=0)
    assert shown["run"]["status"] == "succeeded"  # type: ignore[index]
    assert "apply" not in [r["node"] for r in shown["records"]]  # type: ignore[union-attr]
    assert _status(sample) == "?? CHANGELOG.md\n"


def test_a_harness_that_breaks_the_tests_loops_then_parks(
    cli: Cli, sample: Path, tmp_path: Path
) -> None:
    broken = "def add(a, b):\n    return a - b\n\n\ndef multiply(a, b):\n    return a * b\n"
    script = tmp_path / "break.json"
    script.write_text(json.dumps({"script": [{"write": "calc.py", "content": broken}]}))
    shown = _start(cli, sample, "s2", "--input-file", str(script), code=7)  # 7: parked
    assert shown["run"]["status"] == "parked"  # type: ignore[index]
    state = shown["state"]
    assert isinstance(state, dict)
    assert (state["outcome"], state["ci_conclusion"], state["build_round"]) == (
        "parked",
        "failure",
        3,
    )
    nodes = [r["node"] for r in shown["records"]]  # type: ignore[union-attr]
    assert nodes.count("build") == 3 and nodes.count("dispatch") == 3
    assert nodes[-2:] == ["build_parked", "build_rounds"] and "approved" not in nodes
    assert "apply" not in nodes and _status(sample) == ""  # nothing of a parked build applied
    listed = cli("runs", "--status", "parked", "--json")
    assert [r["run_id"] for r in json.loads(listed.stdout)] == ["s2"]
    pending = cli("pending")
    assert pending.returncode == 0 and "build_rounds" in pending.stdout
    assert "FAILED (failures=1)" in str(state["build_feedback"])
    parked = Path(str(state["pr_summary_path"])).read_text()
    assert "CI still fails after 3 builds" in parked
    prompt_rows = [
        json.loads(line) for line in Path(str(state["transcript_path"])).read_text().splitlines()
    ]
    assert [r["attempt"] for r in prompt_rows if r["type"] == "operation.begin"] == [1, 1, 1]
    # the person takes the parked work over: the run ends taken_over, the branch stays theirs
    taken = cli("takeover", "s2", "--note", "I will fix calc myself", "--as", "ann")
    assert taken.returncode == 0, (taken.stdout, taken.stderr)
    assert "taken_over" in taken.stdout and "stageline/s2" in taken.stdout
    after = json.loads(cli("show", "s2", "--json").stdout)
    assert after["run"]["status"] == "taken_over"
    [event] = [
        e for e in json.loads(cli("logs", "s2", "--json").stdout) if e["kind"] == "run.taken_over"
    ]
    assert "by ann (I will fix calc myself)" in event["message"]
    assert f"on branch stageline/s2 in worktree {state['worktree']}" in event["message"]
    assert Path(str(state["worktree"]), "calc.py").read_text() == broken  # left as it was
    branches = subprocess.run(
        ["git", "-C", str(sample), "branch", "--list", "stageline/s2"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "stageline/s2" in branches
    assert json.loads(cli("runs", "--status", "taken_over", "--json").stdout)[0]["run_id"] == "s2"


def test_only_a_park_gate_can_be_taken_over(cli: Cli, sample: Path) -> None:
    waiting = cli(
        "run",
        "sdlc",
        "-i",
        "task=Add subtract",
        "-i",
        f"repo={sample}",
        "--run-id",
        "s3",
        "-i",
        "review_threshold:=0",  # the plan passes review: the run waits at plan approval
    )
    assert waiting.returncode == 3
    assert cli("answer", "s3", *ANSWERS).returncode == 3  # at the plan_approval gate
    refused = cli("takeover", "s3")
    assert refused.returncode == 4, (refused.stdout, refused.stderr)
    assert "not a park gate" in refused.stderr + refused.stdout
    assert json.loads(cli("show", "s3", "--json").stdout)["run"]["status"] == "waiting"
