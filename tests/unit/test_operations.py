"""The operation runner: one lifecycle, classification, and a test per failure phase."""

from __future__ import annotations

import json
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from stageline.config import Settings
from stageline.errors import OperationFailed
from stageline.harnesses import (
    CommandHarness,
    HarnessEvent,
    HarnessRequest,
    HarnessResult,
    HarnessStatus,
)
from stageline.ledger import Event, EventCategory, RunStatus
from stageline.llm import OfflineModel
from stageline.operations import (
    SERVICE_HARNESS,
    SERVICE_LIVE,
    SERVICE_SINKS,
    FailurePhase,
    OperationInputs,
    OperationRunner,
    PostStep,
    classify,
    fallback_event,
    operation_stage,
)
from stageline.runner import Runner, RunSummary
from stageline.stages import RunContext, StageContext
from stageline.templates import Template
from stageline.testing import memory_runner


class OpState(OperationInputs, total=False):
    repo: str
    indexed: bool


GIT = ["git", "-c", "user.email=t@example.com", "-c", "user.name=t"]


def git_repo(path: Path) -> Path:
    """A repository with one commit (an isolated operation branches from it)."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "README.md").write_text("# repo\n")
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "init"]):
        subprocess.run([*GIT, "-C", str(path), *args], check=True)
    return path


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return git_repo(tmp_path / "repo")


@pytest.fixture
async def runner(memory_settings: Settings) -> AsyncIterator[Runner]:
    async with memory_runner(memory_settings) as opened:
        yield opened


def op_template(*post: PostStep, name: str = "op") -> Template:
    work = operation_stage(
        name, prompt=lambda s, op: "work on it", repo=lambda s: s["repo"], post_steps=post
    )
    template = Template(name, state=OpState)
    template.add_stage("work", work)
    return template


async def events_of(runner: Runner, summary: RunSummary) -> list[Event]:
    return await runner.ledger.events(summary.run.run_id)


def kinds(events: list[Event]) -> list[str]:
    return [e.kind for e in events]


def assert_failed_after_events(events: list[Event], phase: str) -> Event:
    """The error event precedes the node's and the run's terminal events; returns it."""
    names = kinds(events)
    assert names[-2:] == ["node.failed", "run.failed"]
    failed = events[names.index("operation.failed")]
    assert failed.category is EventCategory.ERROR
    assert failed.data["failure_phase"] == phase
    assert names.index("operation.failed") < names.index("node.failed")
    assert events[-1].data["failure_phase"] == phase
    return failed


# -- classification -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "category"),
    [
        ("text_delta", None),
        ("error", EventCategory.ERROR),
        ("tool_use", EventCategory.TOOL),
        ("tool_result", EventCategory.TOOL),
        ("tool_summary", EventCategory.TOOL),
        ("usage", EventCategory.TOOL),
        ("provider_session", EventCategory.TOOL),
        ("warning", EventCategory.TOOL),
        ("helper_agent", EventCategory.TOOL),
        ("message", EventCategory.OUTPUT),
        ("file_change", EventCategory.OUTPUT),
        ("result", EventCategory.OUTPUT),
        ("anything_else", EventCategory.OUTPUT),
    ],
)
def test_classification(kind: str, category: EventCategory | None) -> None:
    assert classify(HarnessEvent(kind=kind)) is category


def test_fallback_event_carries_status_and_output() -> None:
    event = fallback_event(HarnessResult(status=HarnessStatus.FAILED, output_text="", summary="x"))
    assert (event.kind, event.text, event.data["status"]) == ("result", "x", "failed")


# -- the lifecycle ------------------------------------------------------------------------------


async def test_success_records_events_transcript_and_summary(runner: Runner, repo: Path) -> None:
    seen: list[HarnessEvent] = []
    script = [
        {"event": {"type": "text_delta", "text": "thin"}},
        {"event": {"type": "text_delta", "text": "king"}},
        {"event": {"type": "message", "text": "Thinking done."}},
        {"write": "notes.md", "content": "hi"},
        {"event": {"type": "usage", "input_tokens": 10, "output_tokens": 2}},
        {"event": {"type": "result", "status": "succeeded", "summary": "wrote notes"}},
    ]
    summary = await runner.start(
        op_template(), {"repo": str(repo), "script": script}, services={SERVICE_LIVE: seen.append}
    )
    assert summary.status is RunStatus.SUCCEEDED, summary.run.error
    assert summary.state["summary"] == "wrote notes"
    assert not (repo / "notes.md").exists()  # the agent worked on the run's branch
    assert Path(summary.state["worktree"], "notes.md").read_text() == "hi"
    assert summary.state["branch"] == f"stageline/{summary.run.run_id}"
    events = await events_of(runner, summary)
    names = kinds(events)
    assert "harness.text_delta" not in names  # live only
    assert [e.text for e in seen if e.kind == "text_delta"] == ["thin", "king"]
    assert (
        names.index("operation.started")
        < names.index("harness.message")
        < names.index("operation.transcript")
        < names.index("operation.finished")
    )
    by_kind = {e.kind: e for e in events}
    assert by_kind["harness.tool_use"].category is EventCategory.TOOL
    assert by_kind["harness.usage"].category is EventCategory.TOOL
    assert by_kind["harness.message"].category is EventCategory.OUTPUT
    path = Path(by_kind["operation.transcript"].data["path"])
    assert path == Path(summary.state["transcript_path"])
    assert path == runner.settings.run_dir(summary.run.run_id) / "transcripts" / "work.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert rows[0]["type"] == "operation.begin" and rows[-1]["type"] == "harness.result"
    assert "text_delta" not in [r["type"] for r in rows]
    assert summary.records[0].metrics == {"input_tokens": 10.0, "output_tokens": 2.0}


async def test_a_silent_harness_gets_one_fallback_event(runner: Runner, repo: Path) -> None:
    summary = await runner.start(op_template(), {"repo": str(repo), "script": []})
    assert summary.status is RunStatus.SUCCEEDED
    harness = [e for e in await events_of(runner, summary) if e.kind.startswith("harness.")]
    assert [(e.kind, e.message, e.data["fallback"]) for e in harness] == [
        ("harness.result", "succeeded", True)
    ]


async def test_without_isolation_the_agent_writes_in_the_checkout(
    runner: Runner, repo: Path
) -> None:
    work = operation_stage(
        "op", prompt=lambda s, op: "work", repo=lambda s: s["repo"], isolation=False
    )
    template = Template("op_in_place", state=OpState).add_stage("work", work)
    script = [{"write": "anywhere.md", "content": "in place"}]
    summary = await runner.start(template, {"repo": str(repo), "script": script})
    assert summary.status is RunStatus.SUCCEEDED, summary.run.error
    assert (repo / "anywhere.md").read_text() == "in place"
    assert "branch" not in summary.state and "commit" not in summary.state


async def test_allowed_paths_come_from_the_state_and_stay_in_the_repository(
    runner: Runner, repo: Path, tmp_path: Path
) -> None:
    work = operation_stage(
        "op",
        prompt=lambda s, op: "work",
        repo=lambda s: s["repo"],
        allowed=lambda s: [s["repo"] + "/notes", "docs/a.md"],
    )
    template = Template("op_allowed", state=OpState).add_stage("work", work)
    script = [
        {"write": "notes/n.md", "content": "n"},
        {"write": "docs/a.md", "content": "a"},
        {"write": "docs/b.md", "content": "b"},
    ]
    summary = await runner.start(template, {"repo": str(repo), "script": script})
    assert summary.run.failure_phase == "validation"
    assert summary.run.error == (
        "OperationFailed: docs/b.md: written outside the allowed paths notes, docs/a.md"
    )
    outside = operation_stage(
        "op", prompt=lambda s, op: "work", repo=lambda s: s["repo"], allowed=[tmp_path]
    )
    template = Template("op_outside", state=OpState).add_stage("work", outside)
    refused = await runner.start(template, {"repo": str(repo), "script": []})
    assert refused.run.failure_phase == "source_preparation"
    assert "is outside the repository" in (refused.run.error or "")


# -- one test per failure phase -----------------------------------------------------------------


async def test_source_preparation(runner: Runner, tmp_path: Path) -> None:
    outside = tmp_path / "not-a-repo"
    outside.mkdir()
    summary = await runner.start(op_template(), {"repo": str(outside), "script": []})
    assert summary.run.failure_phase == "source_preparation"
    assert "is not inside a git repository" in (summary.run.error or "")
    assert_failed_after_events(await events_of(runner, summary), "source_preparation")


async def test_missing_agent_binary_is_harness_readiness(runner: Runner, repo: Path) -> None:
    summary = await runner.start(
        op_template(),
        {"repo": str(repo)},
        services={SERVICE_HARNESS: CommandHarness(["no-such-agent-binary-xyz"])},
    )
    run = summary.run
    assert (run.status, run.failure_phase, run.failed_node) == (
        RunStatus.FAILED,
        "harness_readiness",
        "work",
    )
    assert "'no-such-agent-binary-xyz' not found" in (run.error or "")
    failed = assert_failed_after_events(await events_of(runner, summary), "harness_readiness")
    assert failed.message.startswith("agent binary 'no-such-agent-binary-xyz' not found")


async def test_unknown_harness_spec_is_harness_readiness(runner: Runner, repo: Path) -> None:
    summary = await runner.start(op_template(), {"repo": str(repo), "harness": "warp-drive"})
    assert summary.run.failure_phase == "harness_readiness"
    assert "unknown harness 'warp-drive'" in (summary.run.error or "")


async def test_non_zero_exit_is_provider_execution_with_transcript_and_events(
    runner: Runner, repo: Path
) -> None:
    script = [
        {"event": {"type": "message", "text": "starting"}},
        {"event": {"type": "tool_use", "text": "Bash", "name": "Bash"}},
        {"stderr": "fatal: out of credits"},
        {"exit": 3},
    ]
    summary = await runner.start(op_template(), {"repo": str(repo), "script": script})
    run = summary.run
    assert (run.failure_phase, run.failed_node) == ("provider_execution", "work")
    assert run.error == "OperationFailed: the agent exited with code 3: fatal: out of credits"
    events = await events_of(runner, summary)
    failed = assert_failed_after_events(events, "provider_execution")
    names = kinds(events)
    for kept in ("harness.message", "harness.tool_use", "operation.transcript"):
        assert names.index(kept) < names.index("operation.failed"), kept
    path = Path(events[names.index("operation.transcript")].data["path"])
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["type"] for r in rows] == ["operation.begin", "message", "tool_use", "harness.result"]
    assert rows[-1]["exit_code"] == 3 and "out of credits" in rows[-1]["stderr"]
    assert failed.message == "the agent exited with code 3: fatal: out of credits"


class RaisingHarness:
    kind = "raising"

    async def ensure_ready(self, request: HarnessRequest, **future_kwargs: Any) -> None:
        return None

    async def run(self, request: HarnessRequest, **future_kwargs: Any) -> AsyncIterator[Any]:
        yield HarnessEvent(kind="message", text="about to break")
        raise RuntimeError("adapter bug")


async def test_an_adapter_that_raises_is_provider_execution(runner: Runner, repo: Path) -> None:
    summary = await runner.start(
        op_template(), {"repo": str(repo)}, services={SERVICE_HARNESS: RaisingHarness()}
    )
    assert summary.run.failure_phase == "provider_execution"
    assert summary.run.error == "OperationFailed: adapter bug"
    names = kinds(await events_of(runner, summary))
    assert (
        names.index("harness.message")
        < names.index("operation.transcript")
        < names.index("operation.failed")
    )


def _broken_index(state: Any, op: Any, result: Any) -> None:
    raise OSError("disk full while writing index.md")


def _invalid(state: Any, op: Any, result: Any) -> None:
    raise ValueError("page a.md: broken link 'b.md'")


async def test_index_refresh_raising_is_indexing(runner: Runner, repo: Path) -> None:
    template = op_template(
        PostStep(name="index", phase=FailurePhase.INDEXING, run=_broken_index),
        PostStep(name="check", phase=FailurePhase.VALIDATION, run=_invalid),
    )
    summary = await runner.start(
        template,
        {"repo": str(repo), "script": [{"event": {"type": "message", "text": "pages written"}}]},
    )
    assert summary.run.failure_phase == "indexing"
    assert summary.run.error == "OperationFailed: disk full while writing index.md"
    events = await events_of(runner, summary)
    assert_failed_after_events(events, "indexing")
    assert kinds(events).index("harness.message") < kinds(events).index("operation.failed")


async def test_invalid_output_is_validation(runner: Runner, repo: Path) -> None:
    async def index(state: Any, op: Any, result: Any) -> dict[str, Any]:
        return {"indexed": True}

    template = op_template(
        PostStep(name="index", phase=FailurePhase.INDEXING, run=index),
        PostStep(name="check", phase=FailurePhase.VALIDATION, run=_invalid),
    )
    summary = await runner.start(template, {"repo": str(repo), "script": []})
    assert summary.run.failure_phase == "validation"
    assert summary.run.error == "OperationFailed: page a.md: broken link 'b.md'"
    events = await events_of(runner, summary)
    assert_failed_after_events(events, "validation")
    steps = [e.data["step"] for e in events if e.kind == "operation.step"]
    assert steps == ["index"]


class FlakySink:
    """A caller's event sink that breaks on its third event."""

    def __init__(self) -> None:
        self.got: list[str] = []

    def record(self, event: HarnessEvent, **kwargs: Any) -> None:
        if len(self.got) == 2:
            raise ConnectionError("event store unreachable")
        self.got.append(event.kind)


@pytest.mark.timeout(25)  # the agent sleeps 30 s unless it is stopped
async def test_a_sink_raising_is_internal_error(runner: Runner, repo: Path) -> None:
    script = [{"event": {"type": "message", "text": f"step {n}"}} for n in range(3)]
    script.append({"sleep": 30})  # the agent is stopped, not waited for
    sink = FlakySink()
    summary = await runner.start(
        op_template(), {"repo": str(repo), "script": script}, services={SERVICE_SINKS: [sink]}
    )
    assert summary.run.failure_phase == "internal_error"
    assert "event store unreachable" in (summary.run.error or "")
    events = await events_of(runner, summary)
    assert_failed_after_events(events, "internal_error")
    messages = [e.message for e in events if e.kind == "harness.message"]
    assert messages[:2] == ["step 0", "step 1"]


class BrokenJournal:
    """A journal whose every event write fails (a ledger gone bad)."""

    def node_started(self, **kwargs: Any) -> None: ...
    def node_finished(self, **kwargs: Any) -> None: ...

    def node_event(self, **kwargs: Any) -> None:
        raise RuntimeError("ledger is read-only")


def test_fail_raises_the_terminal_failure_even_when_the_error_event_cannot_be_written(
    tmp_path: Path,
) -> None:
    ctx = StageContext(
        node="work",
        run=RunContext(
            run_id="r1",
            attempt=1,
            template="t",
            services={},
            journal=BrokenJournal(),
            run_dir=tmp_path,
            model=OfflineModel(),
        ),
    )
    runner = OperationRunner(ctx)

    class Loud(Exception):
        def __str__(self) -> str:
            raise RuntimeError("cannot even describe myself")

    with pytest.raises(OperationFailed) as caught:
        runner.fail(FailurePhase.VALIDATION, ValueError("bad page\nwith detail"))
    assert (caught.value.summary, caught.value.failure_phase) == ("bad page", "validation")
    with pytest.raises(OperationFailed) as caught:
        runner.fail(FailurePhase.INDEXING, Loud())
    assert caught.value.summary == "Loud"


async def test_a_failing_live_callback_never_fails_the_run(runner: Runner, repo: Path) -> None:
    def broken(event: HarnessEvent) -> None:
        raise RuntimeError("terminal closed")

    summary = await runner.start(
        op_template(),
        {"repo": str(repo), "script": [{"event": {"type": "text_delta", "text": "hi"}}]},
        services={SERVICE_LIVE: broken},
    )
    assert summary.status is RunStatus.SUCCEEDED


# -- usage, live budgets, caps --------------------------------------------------------------


def _usage_script(*costs: float) -> list[dict[str, Any]]:
    steps: list[dict[str, Any]] = []
    for cost in costs:
        steps += [
            {"event": {"type": "tool_use", "text": "shell ls"}},
            {
                "event": {
                    "type": "usage",
                    "input_tokens": 100,
                    "cached_input_tokens": 40,
                    "output_tokens": 10,
                    "cost": cost,
                }
            },
        ]
    return [*steps, {"event": {"type": "result", "status": "succeeded", "summary": "done"}}]


async def test_usage_becomes_the_node_metrics(runner: Runner, repo: Path) -> None:
    done = await runner.start(
        op_template(), {"repo": str(repo), "script": _usage_script(0.25, 0.5)}
    )
    assert done.status is RunStatus.SUCCEEDED, done.run.error
    [record] = done.records
    assert record.metrics == {
        "input_tokens": 200,
        "cached_input_tokens": 80,
        "output_tokens": 20,
        "cost": 0.75,
    }


async def test_a_failed_operation_keeps_what_it_spent(runner: Runner, repo: Path) -> None:
    script = [
        *_usage_script(0.09)[:-1],
        {"event": {"type": "result", "status": "failed", "summary": "gave up"}},
    ]
    done = await runner.start(op_template(), {"repo": str(repo), "script": script})
    assert done.run.failure_phase == "provider_execution"
    assert done.records[-1].metrics["cost"] == pytest.approx(0.09)


async def test_a_budget_past_mid_stream_stops_the_agent_at_the_budget_gate(
    runner: Runner, repo: Path
) -> None:
    done = await runner.start(
        op_template(),
        {"repo": str(repo), "script": _usage_script(0.3, 0.3, 0.3)},
        budget={"cost": 0.5, "ask_cost": 2.0},
    )
    assert done.status is RunStatus.WAITING
    assert [w.name for w in done.waiting] == ["budget"]
    log = await events_of(runner, done)
    assert kinds(log).count("harness.usage") == 2  # stopped at the second: 0.6 of 0.5
    assert "harness.result" not in kinds(log) and "operation.stopped" in kinds(log)
    assert done.records[-1].metrics["cost"] == pytest.approx(0.6)
    resumed = await runner.approve(done.run.run_id)  # 2.0 more: the agent goes on to the end
    assert resumed.status is RunStatus.SUCCEEDED, resumed.run.error
    assert resumed.records[-1].metrics["cost"] == pytest.approx(0.6 + 0.9)


async def test_an_operation_cap_stops_the_agent_and_fails(runner: Runner, repo: Path) -> None:
    done = await runner.start(
        op_template(), {"repo": str(repo), "max_cost": 0.4, "script": _usage_script(0.3, 0.3, 0.3)}
    )
    assert done.run.failure_phase == "provider_execution"
    assert "the agent was stopped: the operation used 0.6 of its 0.4 in cost" in (
        done.run.error or ""
    )


@pytest.mark.parametrize(
    ("given", "kept"),
    [
        ("9f1c2b7e-3a4d-4c5e-8f60-1a2b3c4d5e6f", True),
        ("--dangerously-skip-permissions", False),
        ("a b", False),
        ("", False),
        ("x" * 200, False),
        (5, False),
    ],
)
def test_only_a_plain_session_id_is_ever_resumed(tmp_path: Path, given: Any, kept: bool) -> None:
    from stageline.operations._session import SessionFile

    sessions = SessionFile(tmp_path, "build")
    sessions.update(session_id=given, harness="command:claude")
    assert sessions.session("command:claude") == (given if kept else None)
    assert sessions.session("command:codex") is None  # another agent's session is not resumed
