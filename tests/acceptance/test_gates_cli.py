"""Gates, questions, deadlines and effects as a user meets them: the CLI as a subprocess."""

from __future__ import annotations

import asyncio
import io
import json
import os
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

Cli = Callable[..., Any]

EFFECT_TEMPLATE = """
from pathlib import Path
from typing import Any, TypedDict

from stageline.templates import Template


class State(TypedDict, total=False):
    sent: Any
    answers: dict


async def notify(state: State, ctx: Any) -> dict[str, Any]:
    def send() -> int:
        with open("sent.log", "a") as out:  # outside the process: a file in the project
            out.write("sent\\n")
        return 1

    sent = await ctx.effect("notify", send)
    asked = ctx.ask(["Go ahead?"], turn=0)
    return {"sent": sent, "answers": asked["answers"]}


template = Template("notify_then_ask", state=State)
template.add_stage("notify", notify)
"""

DEADLINE_TEMPLATE = """
name: quick_gate
state:
  text: str
stages:
  write: tests_gates_stages:write
gates:
  approval: {deadline: 1, on_deadline: reject}
edges:
  - [write, approval]
"""

STAGES = """
async def write(state, ctx):
    return {"text": "draft"}
"""


@dataclass
class Done:
    returncode: int
    stdout: str
    stderr: str


Process = Callable[..., subprocess.CompletedProcess[str]]
"""The shared ``cli_process`` fixture: ``stageline ARGS`` as a subprocess in ``tmp_path``."""


def _env(tmp_path: Path) -> dict[str, str]:
    return {
        "STAGELINE_HOME": str(tmp_path / "home"),
        "STAGELINE_MODEL": "offline",
        "COLUMNS": "200",
    }


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Cli:
    """Runs ``stageline ARGS`` in this process (as ``main`` does, less the interpreter start),
    in ``tmp_path`` with its home under it, offline."""
    from stageline.cli._main import run_cli

    for key in [k for k in os.environ if k.startswith("STAGELINE_")]:
        monkeypatch.delenv(key)
    for key, value in _env(tmp_path).items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))

    def run(*args: str, code: int | None = 0, stdin: str | None = None) -> Done:
        capsys.readouterr()
        if stdin is not None:
            monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
        returned = run_cli(list(args))
        out, err = capsys.readouterr()
        done = Done(returned, out, err)
        assert "Traceback" not in err, err
        if code is not None:
            assert returned == code, (args, returned, out, err)
        return done

    return run


def show(cli: Cli, run_id: str) -> dict[str, Any]:
    return json.loads(cli("show", run_id, "--json").stdout)  # type: ignore[no-any-return]


def kinds(cli: Cli, run_id: str) -> list[str]:
    return [e["kind"] for e in json.loads(cli("logs", run_id, "--json").stdout)]


def test_blog_post_stops_for_the_editor_who_asks_for_changes_then_approves(
    cli: Cli, tmp_path: Path
) -> None:
    out = cli("run", "blog_post", "-i", "topic=durable gates", "--run-id", "b1", code=3).stdout
    assert "⏸ editor_approval is waiting for a person" in out
    assert "waiting at gate editor_approval (attempt 1" in out
    for command in ("stageline approve b1", "stageline changes b1 --note", "stageline reject b1"):
        assert command in out, out

    listed = cli("pending").stdout
    assert "b1" in listed and "gate editor_approval" in listed and "blog_post" in listed
    [pending] = json.loads(cli("pending", "--json").stdout)
    assert (pending["run_id"], pending["name"], pending["status"]) == (
        "b1",
        "editor_approval",
        "pending",
    )
    assert pending["payload"]["changes_left"] == 3 and pending["deadline_at"]

    again = cli("changes", "b1", "--note", "shorter", "--as", "ed", code=3).stdout
    assert again.index("▶ draft") < again.index("⏸ editor_approval"), again
    assert "2 round(s) left" in again
    assert show(cli, "b1")["state"]["feedback"] == "shorter"
    logged = [
        e
        for e in json.loads(cli("logs", "b1", "--json", "--kind", "log").stdout)
        if e["node"] == "draft" and e["data"].get("feedback")
    ]
    assert [e["data"]["feedback"] for e in logged] == ["shorter"]  # in the node's input

    done = cli("approve", "b1", "--note", "ship it", "--as", "ed").stdout
    assert "✔ publish" in done and "succeeded" in done
    assert (tmp_path / "home" / "runs" / "b1" / "post.md").is_file()
    shown = show(cli, "b1")
    assert [(d["decision"], d["actor"], d["note"], d["status"]) for d in shown["decisions"]] == [
        ("changes", "ed", "shorter", "applied"),
        ("approve", "ed", "ship it", "applied"),
    ]
    human = cli("show", "b1").stdout
    assert "decisions" in human and "ship it" in human
    assert cli("pending").stdout.startswith("nothing waits")
    second = cli("approve", "b1", code=5)
    assert "already approved by ed" in second.stderr

    cli("run", "blog_post", "-i", "topic=gates", "--run-id", "b2", code=3)
    rejected = cli("reject", "b2", "--note", "off topic", code=1).stdout
    assert "rejected" in rejected
    assert show(cli, "b2")["run"]["status"] == "rejected"
    assert not (tmp_path / "home" / "runs" / "b2" / "post.md").exists()


def _interrupt_payload(tmp_path: Path, run_id: str) -> dict[str, Any]:
    """The question payload in the run's LangGraph checkpoint, read from the database."""
    from stageline.config import load_settings
    from stageline.runner import Runner

    async def read() -> dict[str, Any]:
        settings = load_settings(cwd=tmp_path, env={"STAGELINE_HOME": str(tmp_path / "home")})
        async with Runner.open(settings) as runner:
            graph = runner.graph("sdlc")
            snapshot = await graph.aget_state({"configurable": {"thread_id": run_id}})
            [asked] = snapshot.interrupts
            return dict(asked.value)

    return asyncio.run(read())


def test_sdlc_waits_at_clarify_and_one_answer_moves_it_on(cli: Cli, tmp_path: Path) -> None:
    out = cli(
        "run",
        "sdlc",
        "-i",
        "task=add rate limiting to the public API",
        "--run-id",
        "s1",
        "-i",
        "review_threshold:=0",
        code=3,
    ).stdout
    assert "⏸ clarify is waiting for a person" in out and "stageline answer s1" in out
    [pending] = json.loads(cli("pending", "s1", "--json").stdout)
    question_id = pending["wait_id"]
    assert _interrupt_payload(tmp_path, "s1")["question_id"] == question_id

    bad = cli("answer", "s1", "-a", "scope=x", "-a", "priority=whenever", code=2)
    assert "'whenever' is not a choice of question 'priority'" in bad.stderr
    assert json.loads(cli("pending", "s1", "--json").stdout)[0]["status"] == "pending"

    done = cli(
        "answer",
        "s1",
        "-a",
        "scope=the public endpoints only",
        "-a",
        "priority=high",
        "--as",
        "ann",
        code=3,
    ).stdout
    assert "▶ plan" in done and "▶ review" in done and "plan_approval" in done
    assert "succeeded" in cli("approve", "s1", "--gate", "plan_approval").stdout
    shown = show(cli, "s1")
    [answered] = shown["questions"]
    assert answered["wait_id"] == question_id == shown["state"]["qa_history"][0]["question_id"]
    assert answered["answers"] == {"scope": "the public endpoints only", "priority": "high"}
    assert shown["state"]["outcome"] in ("approved", "parked")
    assert Path(shown["state"]["plan_path"]).is_file()
    assert "questions and answers" in cli("show", "s1").stdout

    second = cli("answer", "s1", "--question", question_id, "-a", "scope=again", code=5)
    assert "already answered by ann" in second.stderr


def test_sdlc_asks_a_follow_up_and_answers_can_be_typed_in(cli: Cli) -> None:
    cli(
        "run",
        "sdlc",
        "-i",
        "task=fix the login bug",
        "--run-id",
        "s2",
        "-i",
        "review_threshold:=0",
        code=3,
    )
    follow = cli("answer", "s2", stdin="login\nurgent\n\n", code=3).stdout
    assert "The scope is short" in follow and "turn 1" in follow
    (Path.cwd() / "answers.yaml").write_text("scope_detail: only the password form, not SSO\n")
    done = cli("answer", "s2", "--answer-file", "answers.yaml", code=3).stdout
    assert "plan_approval" in done
    assert "succeeded" in cli("approve", "s2").stdout
    history = show(cli, "s2")["state"]["qa_history"]
    assert [e["turn"] for e in history] == [0, 1]
    assert history[0]["answers"]["priority"] == "urgent"


def test_sweep_rejects_a_gate_past_its_deadline_after_remind_and_escalate(
    cli: Cli, tmp_path: Path
) -> None:
    (tmp_path / "quick.yaml").write_text(DEADLINE_TEMPLATE)
    (tmp_path / "tests_gates_stages.py").write_text(STAGES)
    cli("run", "quick.yaml", "--run-id", "q1", code=3)
    time.sleep(1.05)
    swept = cli("sweep").stdout
    assert "q1  gate approval: reject -> run rejected" in swept, swept
    assert show(cli, "q1")["run"]["status"] == "rejected"
    order = [k for k in kinds(cli, "q1") if k.startswith("gate.") or k == "run.rejected"]
    assert order == [
        "gate.waiting",
        "gate.reminded",
        "gate.escalated",
        "gate.expired",
        "gate.decided",
        "run.rejected",
    ]


def test_an_effect_before_a_question_happens_once(
    cli: Cli, tmp_path: Path, cli_process: Process
) -> None:
    """Two processes: the run that sends and stops, then the answer that resumes it."""
    (tmp_path / "notify.py").write_text(EFFECT_TEMPLATE)
    first = cli_process("run", "notify.py", "--run-id", "e1")
    assert first.returncode == 3, (first.stdout, first.stderr)
    assert (tmp_path / "sent.log").read_text() == "sent\n"
    second = cli_process("answer", "e1", "-a", "q1=yes")
    assert second.returncode == 0, (second.stdout, second.stderr)
    assert (tmp_path / "sent.log").read_text() == "sent\n"  # the resume did not send again
    assert show(cli, "e1")["state"] == {"sent": 1, "answers": {"q1": "yes"}}


DOUBT_TEMPLATE = """
from pathlib import Path
from typing import Any, TypedDict

from stageline.templates import Template


class State(TypedDict, total=False):
    charged: Any


async def charge(state: State, ctx: Any) -> dict[str, Any]:
    def pay() -> str:
        with open("charged.log", "a") as out:
            out.write("charged\\n")
        return "receipt-1"

    return {"charged": await ctx.effect("card", pay)}


template = Template("charge", state=State)
template.add_stage("charge", charge)
"""


def test_an_effect_in_doubt_is_named_and_settled_from_the_cli(cli: Cli, tmp_path: Path) -> None:
    from stageline.config import load_settings
    from stageline.ledger import Effect
    from stageline.runner import Runner

    (tmp_path / "charge.py").write_text(DOUBT_TEMPLATE)

    async def crashed_mid_effect() -> None:  # as if the process died inside `pay`
        settings = load_settings(cwd=tmp_path, env={"STAGELINE_HOME": str(tmp_path / "home")})
        async with Runner.open(settings) as runner:
            await runner.create(str(tmp_path / "charge.py"), {}, run_id="c1")
            await runner.ledger.begin_effect(
                Effect(run_id="c1", node="charge", key="card", attempt=1)
            )

    asyncio.run(crashed_mid_effect())
    failed = cli("resume", "c1", code=1).stdout
    assert "effect 'card' of node 'charge'" in failed
    assert "stageline effect c1 charge card" in failed
    assert not (tmp_path / "charged.log").exists()
    cli("effect", "c1", "charge", "card", code=2)  # --done or --redo, not neither
    cli("effect", "c1", "charge", "nope", "--redo", code=2)
    assert "will run again" in cli("effect", "c1", "charge", "card", "--redo").stdout
    cli("retry", "c1")
    assert (tmp_path / "charged.log").read_text() == "charged\n"
    assert show(cli, "c1")["state"] == {"charged": "receipt-1"}


def test_blog_post_as_separate_processes(tmp_path: Path, cli_process: Process) -> None:
    """`stageline run` stops at the editor's gate (exit 3), `pending` lists it, `approve`
    finishes it: each its own process."""
    ran = cli_process("run", "blog_post", "-i", "topic=x", "--run-id", "p1")
    assert ran.returncode == 3 and "stageline approve p1" in ran.stdout, (ran.stdout, ran.stderr)
    listed = cli_process("pending")
    assert listed.returncode == 0 and "gate editor_approval" in listed.stdout
    done = cli_process("approve", "p1")
    assert done.returncode == 0 and "succeeded" in done.stdout, (done.stdout, done.stderr)


def test_help_documents_the_new_commands_and_exit_5(cli: Cli) -> None:
    out = cli("--help").stdout
    assert "\n    5 " in out and "already decided" in out
    for command in ("pending", "approve", "reject", "changes", "answer", "sweep"):
        assert command in out, out
