"""What a person reads is whole: at 80 columns and piped, errors and instructions wrap, tables
drop or wrap columns, nothing ends in an ellipsis. And the small things that misled: a node
re-run after SIGTERM is a new try, gate rounds count, ``effect --redo`` on an ended run."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

Cli = Callable[..., subprocess.CompletedProcess[str]]

NAME = "a_rather_long_template_name"
"""27 characters: fits whole beside the other columns of `runs` at 80 columns."""

DOUBT = f"""
from typing import Any, TypedDict

from stageline.templates import Template


class State(TypedDict, total=False):
    charged: Any


async def charge(state: State, ctx: Any) -> dict[str, Any]:
    return {{"charged": await ctx.effect("card", lambda: "receipt-1")}}


template = Template({NAME!r}, state=State)
template.add_stage("charge", charge)
"""

SLOW = """
import asyncio
from pathlib import Path
from typing import Any, TypedDict

from stageline.templates import Template


class State(TypedDict, total=False):
    n: int


async def first(state: State, ctx: Any) -> dict[str, Any]:
    return {"n": 1}


async def slow(state: State, ctx: Any) -> dict[str, Any]:
    Path("slow.started").touch()
    while Path("hold").exists():
        await asyncio.sleep(0.05)
    return {"n": 2}


template = Template("slow", state=State)
template.add_stage("first", first).add_stage("slow", slow).add_edge("first", "slow")
"""


def _narrow(cli: Cli) -> dict[str, Cli]:
    """The same command at COLUMNS=80, and piped with no COLUMNS at all."""
    return {"COLUMNS=80": lambda *a: cli(*a, COLUMNS="80"), "piped": lambda *a: cli(*a, COLUMNS="")}


def _whole(text: str) -> None:
    assert "…" not in text and "..." not in text, text


@pytest.fixture
def in_doubt(tmp_path: Path) -> str:
    """Run d1 of the long-named template, queued with its effect begun and never finished,
    as if its process died inside the effect."""
    from stageline.config import load_settings
    from stageline.ledger import Effect
    from stageline.runner import Runner

    (tmp_path / "templates").mkdir()
    (tmp_path / "templates" / f"{NAME}.py").write_text(DOUBT)

    async def crashed() -> None:
        settings = load_settings(cwd=tmp_path, env={"STAGELINE_HOME": str(tmp_path / "home")})
        async with Runner.open(settings) as runner:
            await runner.create(NAME, {}, run_id="d1")
            await runner.ledger.begin_effect(
                Effect(run_id="d1", node="charge", key="card", attempt=1)
            )

    asyncio.run(crashed())
    return "d1"


def test_the_effect_in_doubt_instruction_and_tables_are_whole_at_80_columns_and_piped(
    cli: Cli, in_doubt: str
) -> None:
    instruction = "or `--redo` (run it again), and retry the run"
    failed = cli("resume", in_doubt, COLUMNS="80")
    assert failed.returncode == 1, (failed.stdout, failed.stderr)
    _whole(failed.stdout)
    assert instruction in " ".join(failed.stdout.split())
    for how, narrow in _narrow(cli).items():
        shown = narrow("show", in_doubt)
        assert shown.returncode == 0, (how, shown.stderr)
        _whole(shown.stdout)
        assert instruction in " ".join(shown.stdout.split()), (how, shown.stdout)
        listed = narrow("runs")
        _whole(listed.stdout)
        assert NAME in listed.stdout, (how, listed.stdout)  # on one line, not folded
        assert instruction in " ".join(listed.stdout.split()), (how, listed.stdout)
        assert all(
            len(line.rstrip()) <= 80
            for line in listed.stdout.splitlines()
            if "effect 'card'" not in line
        ), (how, listed.stdout)


def test_effect_redo_on_a_run_that_ended_is_refused_with_why(cli: Cli, in_doubt: str) -> None:
    assert cli("resume", in_doubt).returncode == 1
    done = cli("effect", in_doubt, "charge", "card", "--done", "--result", '"receipt-1"')
    assert done.returncode == 0, done.stderr
    retried = cli("retry", in_doubt)
    assert retried.returncode == 0, (retried.stdout, retried.stderr)
    for how in ("--redo", "--done"):
        refused = cli("effect", in_doubt, "charge", "card", how)
        assert refused.returncode == 4, (how, refused.stdout, refused.stderr)
        lines = refused.stderr.strip().splitlines()
        assert len(lines) == 1 and "succeeded" in lines[0] and "card" in lines[0], lines


def test_stats_is_whole_at_80_columns_and_piped(cli: Cli, in_doubt: str) -> None:
    cli("resume", in_doubt)
    cli("effect", in_doubt, "charge", "card", "--redo")
    assert cli("retry", in_doubt).returncode == 0
    for how, narrow in _narrow(cli).items():
        table = narrow("stats")
        assert table.returncode == 0, (how, table.stderr)
        _whole(table.stdout)
        assert f"template {NAME}" in table.stdout, (how, table.stdout)
        assert all(len(line.rstrip()) <= 80 for line in table.stdout.splitlines()), table.stdout
        assert "interrupted" not in table.stdout


def test_gate_decisions_show_the_round_they_were_made_in(cli: Cli, tmp_path: Path) -> None:
    from stageline.config import load_settings
    from stageline.runner import Runner

    async def decided() -> None:  # in this process: only ``show`` is under test
        env = {"STAGELINE_HOME": str(tmp_path / "home"), "STAGELINE_MODEL": "offline"}
        async with Runner.open(load_settings(cwd=tmp_path, env=env)) as runner:
            await runner.start("blog_post", {"topic": "x"}, run_id="b1")
            await runner.request_changes("b1", note="shorter")
            await runner.request_changes("b1", note="a title please")
            assert str((await runner.approve("b1")).status) == "succeeded"

    asyncio.run(decided())
    shown = cli("show", "b1", COLUMNS="80").stdout
    rows = [
        line.split()
        for line in shown.split("decisions", 1)[1].splitlines()
        if line.startswith("editor_approval")
    ]
    assert [(r[2], r[4]) for r in rows] == [("1", "changes"), ("2", "changes"), ("3", "approve")], (
        shown
    )
    _whole(shown)
    assert "a title please" in shown


@pytest.mark.timeout(240)  # a hang guard: nothing here is timed
def test_sigterm_prints_the_resume_hint_and_the_node_reruns_as_a_new_try(
    tmp_path: Path, cli: Cli, cli_env: dict[str, str]
) -> None:
    (tmp_path / "slow.py").write_text(SLOW)
    (tmp_path / "hold").touch()
    proc = subprocess.Popen(
        [sys.executable, "-m", "stageline.cli", "run", "slow.py", "--run-id", "s1"],
        cwd=tmp_path,
        env=cli_env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        while not (tmp_path / "slow.started").exists():
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, (out, err)
    assert "continue run s1 with `stageline resume s1`" in err, err
    assert "Traceback" not in err

    (tmp_path / "hold").unlink()
    resumed = cli("resume", "s1")
    assert resumed.returncode == 0, (resumed.stdout, resumed.stderr)
    records = [
        r for r in json.loads(cli("show", "s1", "--json").stdout)["records"] if r["node"] == "slow"
    ]
    assert [(r["try_no"], r["status"]) for r in records] == [(1, "failed"), (2, "succeeded")]
    first, second = records
    assert first["failure_phase"] == "interrupted"
    assert second["started_at"] >= first["finished_at"]  # its own start: no downtime counted
