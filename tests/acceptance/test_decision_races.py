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


@pytest.mark.timeout(300)  # a hang guard: nothing here is timed
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
    plan = [{"a": ["approve", run, "--as", "a"], "b": ["reject", run, "--as", "b"]}
            for run in gates]
    plan += [{"a": ["answer", run, "-a", "q1=from a", "--as", "a"],
              "b": ["answer", run, "-a", "q1=from b", "--as", "b"]} for run in questions]
    sync = tmp_path / "sync"
    sync.mkdir()
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    workers = [
        subprocess.Popen([sys.executable, "worker.py", name, "plan.json", str(sync)],
                         cwd=tmp_path, env=_env(tmp_path, cli_env), stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
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
            _, err = worker.communicate(timeout=60)
            assert worker.returncode == 0, err
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
    codes = {n: json.loads((sync / f"{n}.codes").read_text()) for n in ("a", "b")}

    db = sqlite3.connect(tmp_path / "home" / "stageline.db")
    try:
        for i, run_id in enumerate(gates + questions):
            got = sorted((codes["a"][i], codes["b"][i]))
            assert got == [0, 5], (run_id, got)  # one did it; the other was told it came second
            winner = "a" if codes["a"][i] == 0 else "b"
            taken = db.execute(
                "SELECT actor, status, response FROM stageline_waits WHERE run_id = ? "
                "AND status IN ('decided', 'applied', 'rolled_back')", (run_id,)).fetchall()
            assert len(taken) == 1, (run_id, taken)  # exactly one decision recorded
            actor, status, response = taken[0]
            assert (actor, status) == (winner, "applied"), (run_id, taken)
            decided = db.execute(
                "SELECT COUNT(*) FROM stageline_events WHERE run_id = ? AND kind IN "
                "('gate.decided', 'question.answered')", (run_id,)).fetchone()[0]
            assert decided == 1, run_id
            (status,) = db.execute("SELECT status FROM stageline_runs WHERE run_id = ?",
                                   (run_id,)).fetchone()
            if run_id in gates:  # and the winner's decision is the one applied
                assert status == ("succeeded" if winner == "a" else "rejected"), run_id
            else:
                assert status == "succeeded"
                assert json.loads(response)["answers"] == {"q1": f"from {winner}"}
    finally:
        db.close()
    assert {codes["a"][i] for i in range(len(plan))} | {codes["b"][i] for i in
                                                         range(len(plan))} == {0, 5}


