"""``stageline respond``: a graph's own ``interrupt()`` answered from the command line, as a
subprocess: ``pending`` shows it, the answer is recorded with its actor and returned by the
node's ``interrupt()``, a second answer exits 5, bad input exits 2."""

from __future__ import annotations

import json
from pathlib import Path

from _procs import cli, cli_env

TEMPLATE = """
from typing import Any, TypedDict

from langgraph.types import interrupt

from stageline.templates import Template


class State(TypedDict, total=False):
    said: Any
    agreed: Any


async def ask(state: State, ctx: Any) -> dict[str, Any]:
    return {"said": interrupt({"question": "which colour?"})}


async def confirm(state: State, ctx: Any) -> dict[str, Any]:
    return {"agreed": interrupt({
        "action_request": {"action": "paint", "args": {"colour": state["said"]}},
        "config": {"allow_accept": True, "allow_ignore": True, "allow_respond": False,
                   "allow_edit": False},
        "description": "Paint it?",
    })}


template = Template("asks_anything", state=State)
template.add_stage("ask", ask).add_stage("confirm", confirm).add_edge("ask", "confirm")
"""


def test_respond_answers_an_interrupt_and_the_run_goes_on(tmp_path: Path) -> None:
    (tmp_path / "templates").mkdir()
    (tmp_path / "templates" / "asks.py").write_text(TEMPLATE)
    env = cli_env(tmp_path / "home")
    started = cli(["run", "asks", "--run-id", "paint-1"], tmp_path, env)
    assert started.returncode == 3, started.stderr
    assert "stageline respond paint-1" in started.stdout

    listed = cli(["pending", "--json"], tmp_path, env)
    [wait] = json.loads(listed.stdout)
    assert (wait["kind"], wait["node"], wait["value"]) == (
        "interrupt",
        "ask",
        {"question": "which colour?"},
    )
    shown = cli(["pending"], tmp_path, env)
    assert "interrupt ask" in shown.stdout and "which colour?" in shown.stdout

    bad = cli(["respond", "paint-1", "--value", "{nope"], tmp_path, env)
    assert bad.returncode == 2 and "not JSON" in bad.stderr and "Traceback" not in bad.stderr

    answered = cli(["respond", "paint-1", "-v", '"blue"', "--as", "ann"], tmp_path, env)
    assert answered.returncode == 3, answered.stderr  # it now waits at the HumanInterrupt
    assert "allows: accept, ignore" in answered.stdout

    refused = cli(["respond", "paint-1", "-v", '{"type": "edit", "args": {}}'], tmp_path, env)
    assert refused.returncode == 2 and "does not allow 'edit'" in refused.stderr

    [second] = json.loads(cli(["pending", "paint-1", "--json"], tmp_path, env).stdout)
    assert second["wait_id"][:12] in cli(["pending"], tmp_path, env).stdout  # the id column
    accepted = cli(
        ["respond", "paint-1", "--wait", second["wait_id"][:12], "-v", '{"type": "accept"}'],
        tmp_path,
        env,
    )
    assert accepted.returncode == 0, accepted.stderr

    late = cli(
        ["respond", "paint-1", "--wait", second["wait_id"], "-t", "too late", "--as", "bo"],
        tmp_path,
        env,
    )
    assert late.returncode == 5, late.stderr
    assert "already answered by" in late.stderr

    shown = json.loads(cli(["show", "paint-1", "--json"], tmp_path, env).stdout)
    assert shown["state"]["said"] == "blue"
    assert shown["state"]["agreed"] == [{"type": "accept", "args": None}]
    text = cli(["show", "paint-1"], tmp_path, env).stdout
    assert "questions and answers" in text and "A blue" in text and "by ann" in text
