"""Two real processes decide the same gate, or answer the same question, at the same moment.

Two worker processes each run the CLI (``run_cli``, what ``stageline`` runs) once per trial.
Before each trial both wait on a barrier file; the test releases them together. The database
decides: exactly one decision is recorded and applied per trial, the other process gets the
"already decided" conflict (exit 5).
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stageline.config import load_settings
from stageline.runner import Runner

GATE_TRIALS = 16
QUESTION_TRIALS = 8

TEMPLATES = """
from typing import Any, TypedDict

from stageline.templates import Template


class State(TypedDict, total=False):
    text: str
    qa_history: list
    answers: dict


async def write(state: State, ctx: Any) -> dict[str, Any]:
    return {"text": "draft"}


gate = Template("race_gate", state=State)
gate.add_stage("write", write).add_gate("approval")
gate.add_edge("write", "approval")

question = Template("race_question", state=State)
question.add_question("ask", questions=["Which?"], answers_key="answers")

template = gate
"""

QUESTION_FILE = """
from race import question as template
"""

WORKER = """
import json
import sys
import time
from pathlib import Path

from stageline.cli._main import run_cli

name, plan, sync = sys.argv[1], json.loads(Path(sys.argv[2]).read_text()), Path(sys.argv[3])
codes = []
for i, trial in enumerate(plan):
    (sync / f"{name}.ready.{i}").touch()
    while not (sync / f"go.{i}").exists():
        time.sleep(0.0002)
    codes.append(run_cli(trial[name]))
(sync / f"{name}.codes").write_text(json.dumps(codes))
"""


def _env(tmp_path: Path, cli_env: dict[str, str]) -> dict[str, str]:
    """``cli``'s environment with the project folder first on the import path."""
    path = os.pathsep.join(p for p in (str(tmp_path), cli_env.get("PYTHONPATH")) if p)
    return {**cli_env, "PYTHONPATH": path}


async def _waiting_runs(tmp_path: Path) -> tuple[list[str], list[str]]:
    settings = load_settings(cwd=tmp_path, env={"STAGELINE_HOME": str(tmp_path / "home")})
    gates, questions = [], []
    async with Runner.open(settings) as runner:
        for i in range(GATE_TRIALS):
            run = await runner.start(str(tmp_path / "race.py"), {}, run_id=f"g{i}")
            gates.append(run.run.run_id)
        for i in range(QUESTION_TRIALS):
            run = await runner.start(str(tmp_path / "race_q.py"), {}, run_id=f"q{i}")
            questions.append(run.run.run_id)
    return gates, questions


@pytest.mark.timeout(900)  # a hang guard: nothing here is timed
def test_two_processes_deciding_at_once_record_exactly_one_decision(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    sys.path.insert(0, str(tmp_path))
    try:
        (tmp_path / "race.py").write_text(TEMPLATES)
        (tmp_path / "race_q.py").write_text(QUESTION_FILE)
        (tmp_path / "worker.py").write_text(WORKER)
        gates, questions = asyncio.run(_waiting_runs(tmp_path))
    finally:
        sys.path.remove(str(tmp_path))
    plan = [
        {"a": ["approve", run, "--as", "a"], "b": ["reject", run, "--as", "b"]} for run in gates
    ]
    plan += [
        {
            "a": ["answer", run, "-a", "q1=from a", "--as", "a"],
            "b": ["answer", run, "-a", "q1=from b", "--as", "b"],
        }
        for run in questions
    ]
    sync = tmp_path / "sync"
    sync.mkdir()
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    workers = [
        subprocess.Popen(
            [sys.executable, "worker.py", name, "plan.json", str(sync)],
            cwd=tmp_path,
            env=_env(tmp_path, cli_env),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in ("a", "b")
    ]
    try:
        for i in range(len(plan)):
            while not all((sync / f"{n}.ready.{i}").exists() for n in ("a", "b")):
                for worker in workers:
                    if worker.poll() is not None:
                        raise AssertionError(f"a worker stopped: {worker.communicate()[1]}")
                time.sleep(0.001)
            (sync / f"go.{i}").touch()  # both released at the same moment
        for worker in workers:
            _, err = worker.communicate(timeout=600)
            assert worker.returncode == 0, err
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
            worker.communicate()  # closes its pipe
    codes = {n: json.loads((sync / f"{n}.codes").read_text()) for n in ("a", "b")}

    db = sqlite3.connect(tmp_path / "home" / "stageline.db")
    try:
        for i, run_id in enumerate(gates + questions):
            got = sorted((codes["a"][i], codes["b"][i]))
            # One did it (a rejected run exits 1); the other was told it came second.
            assert got in ([0, 5], [1, 5]) and codes["a"][i] != 1, (run_id, got)
            winner = "a" if codes["a"][i] == 0 else "b"
            taken = db.execute(
                "SELECT actor, status, response FROM stageline_waits WHERE run_id = ? "
                "AND status IN ('decided', 'applied', 'rolled_back')",
                (run_id,),
            ).fetchall()
            assert len(taken) == 1, (run_id, taken)  # exactly one decision recorded
            actor, status, response = taken[0]
            assert (actor, status) == (winner, "applied"), (run_id, taken)
            decided = db.execute(
                "SELECT COUNT(*) FROM stageline_events WHERE run_id = ? AND kind IN "
                "('gate.decided', 'question.answered')",
                (run_id,),
            ).fetchone()[0]
            assert decided == 1, run_id
            (status,) = db.execute(
                "SELECT status FROM stageline_runs WHERE run_id = ?", (run_id,)
            ).fetchone()
            if run_id in gates:  # and the winner's decision is the one applied
                assert status == ("succeeded" if winner == "a" else "rejected"), run_id
            else:
                assert status == "succeeded"
                assert json.loads(response)["answers"] == {"q1": f"from {winner}"}
    finally:
        db.close()
    seen = {codes["a"][i] for i in range(len(plan))} | {codes["b"][i] for i in range(len(plan))}
    assert {0, 5} <= seen <= {0, 1, 5}, seen


VISIT_TRIALS = int(
    os.environ.get("STAGELINE_VISIT_RACE_TRIALS") or min(50, 5 * len(os.sched_getaffinity(0)))
)
"""Trials of six processes each, scaled to the machine: 10 on 2 CPUs, 50 (the full size,
``STAGELINE_VISIT_RACE_TRIALS=50``) on 10 or more."""

TRIALS_AT_ONCE = max(1, min(5, len(os.sched_getaffinity(0)) // 2))
"""Trials are independent runs, so a few go at once, up to 30 processes (one trial on 2 CPUs):
as many as the machine can start without slowing each past its hang guard. The race is inside
a trial, between its six processes; a loaded machine is what the slow starters stand in for."""

LOOP = """
from typing import Any, TypedDict

from stageline.templates import Template


class State(TypedDict, total=False):
    draft: int
    feedback: str


async def write(state: State, ctx: Any) -> dict[str, Any]:
    return {"draft": state.get("draft", 0) + 1}


template = Template("race_visit", state=State)
template.add_stage("write", write).add_gate("approval", changes_to="write", max_changes=50)
template.add_edge("write", "approval")
"""

DECIDERS = {"c0": 0.0, "c1": 0.0, "a0": 0.5, "a1": 1.0, "a2": 1.75, "a3": 2.5}
"""Who decides (c: changes, a: approve) and how long that process is slow to start (a loaded
machine): a slow one still began before the run came back to the gate."""

SLOW = (
    "import sys, time; time.sleep(float(sys.argv[1])); from stageline.cli._main import "
    "run_cli; sys.exit(run_cli(sys.argv[2:]))"
)


def _command(name: str, run_id: str) -> list[str]:
    if name.startswith("c"):
        args = ["changes", run_id, "--note", f"more from {name}", "--as", name]
    else:
        args = ["approve", run_id, "--as", name]
    return [sys.executable, "-c", SLOW, str(DECIDERS[name]), *args]


@pytest.mark.timeout(2400)  # up to 300 processes: a hang guard, nothing here is timed
def test_a_decision_binds_to_the_visit_its_process_saw(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """Six processes decide one gate visit at once, without --state-hash; when a `changes`
    wins, the run is quickly back at the gate, while some deciders are still starting. No
    decision lands on that new visit (nobody saw it), and every loser hears that the first
    decision stands (exit 5)."""
    (tmp_path / "loop.py").write_text(LOOP)

    async def waiting() -> None:
        settings = load_settings(cwd=tmp_path, env={"STAGELINE_HOME": str(tmp_path / "home")})
        async with Runner.open(settings) as runner:
            for i in range(VISIT_TRIALS):
                await runner.start(str(tmp_path / "loop.py"), {}, run_id=f"v{i}")

    asyncio.run(waiting())
    env = _env(tmp_path, cli_env)
    done: dict[str, list[tuple[float, int]]] = {n: [] for n in DECIDERS}
    for first in range(0, VISIT_TRIALS, TRIALS_AT_ONCE):  # six fresh processes a trial
        started: dict[tuple[int, str], tuple[float, subprocess.Popen[str]]] = {}
        try:
            for i in range(first, min(first + TRIALS_AT_ONCE, VISIT_TRIALS)):
                for name in DECIDERS:  # a trial's six start at one moment
                    started[i, name] = (
                        time.time(),
                        subprocess.Popen(
                            _command(name, f"v{i}"),
                            cwd=tmp_path,
                            env=env,
                            stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE,
                            text=True,
                        ),
                    )
            for (_, name), (at, proc) in started.items():
                _, err = proc.communicate(timeout=600)
                assert proc.returncode in (0, 3, 4, 5), err
                done[name].append((at, proc.returncode))
        finally:
            for _, proc in started.values():
                if proc.poll() is None:
                    proc.kill()
                proc.communicate()  # closes its pipe

    changes_won = 0
    db = sqlite3.connect(tmp_path / "home" / "stageline.db")
    try:
        for i in range(VISIT_TRIALS):
            run_id = f"v{i}"
            released = {n: done[n][i][0] for n in DECIDERS}
            codes = {n: done[n][i][1] for n in DECIDERS}
            taken = db.execute(
                "SELECT actor, wait_id, requested_at, response FROM stageline_waits "
                "WHERE run_id = ? AND response IS NOT NULL ORDER BY decided_at",
                (run_id,),
            ).fetchall()
            for who, _, asked, _ in taken:  # none on a visit asked after its process began
                assert asked <= released[who], (run_id, taken, released)
            actor, wait_id, _, response = taken[0]
            visits = db.execute(
                "SELECT wait_id, status, requested_at FROM stageline_waits WHERE run_id = ? "
                "ORDER BY requested_at, round",
                (run_id,),
            ).fetchall()
            assert [w for w, _, _ in visits].count(wait_id) == 1  # the first visit, decided once
            winner_code = 3 if json.loads(response)["decision"] == "changes" else 0
            assert codes[actor] == winner_code, (run_id, codes)
            # Every process that began while only the first visit existed saw that one; all
            # but the winner hear that the first decision stands. (One the machine's load
            # started after the run was back at the gate saw the new visit: it may decide it.)
            again = min((a for w, _, a in visits if w != wait_id), default=float("inf"))
            on_time = [n for n in DECIDERS if n != actor and released[n] < again]
            assert {codes[n] for n in on_time} <= {5}, (run_id, codes, released, visits)
            if winner_code == 3:
                changes_won += 1
                assert len(visits) >= 2 and visits[1][0] != wait_id, (run_id, visits)
    finally:
        db.close()
    assert changes_won, "no trial had a `changes` winner: the race was not exercised"
