"""Services everywhere: a project's ``services`` factory reaches every process that advances
runs (a Python caller, the CLI, the local worker), so a stage after a gate finds its service."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from stageline.config import load_settings
from stageline.errors import ConfigError
from stageline.ledger import RunStatus
from stageline.runner import Runner, open_services

SERVICES = """
import contextlib
import os


@contextlib.asynccontextmanager
async def make():
    log = open("services.log", "a")
    log.write(f"open {os.getpid()}\\n")
    log.flush()
    try:
        yield {"greeter": lambda name: f"hello {name} from {os.getpid()}"}
    finally:
        log.write(f"close {os.getpid()}\\n")
        log.close()
"""

TEMPLATE = """
from typing import Any, TypedDict

from stageline.templates import Template


class State(TypedDict, total=False):
    name: str
    prepared: str
    greeting: str


async def prepare(state: State, ctx: Any) -> dict[str, Any]:
    return {"prepared": ctx.services["greeter"]("worker")}


async def greet(state: State, ctx: Any) -> dict[str, Any]:
    return {"greeting": ctx.services["greeter"](state["name"])}


template = Template("greeting", state=State)
template.add_stage("prepare", prepare).add_stage("greet", greet)
template.add_gate("approval")
template.add_sequence("prepare", "approval", "greet")
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "myapp").mkdir()
    (tmp_path / "myapp" / "__init__.py").write_text("")
    (tmp_path / "myapp" / "services.py").write_text(SERVICES)
    (tmp_path / "templates").mkdir()
    (tmp_path / "templates" / "greeting.py").write_text(TEMPLATE)
    (tmp_path / "stageline.toml").write_text('services = "myapp.services:make"\n')
    return tmp_path


def _env(project: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STAGELINE_")}
    env.update(
        STAGELINE_HOME=str(project / "home"),
        STAGELINE_MODEL="offline",
        PYTHONIOENCODING="utf-8",
        COLUMNS="200",
    )
    if (project / "database_url").exists():
        env["STAGELINE_DATABASE_URL"] = (project / "database_url").read_text()
    return env


def _cli(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "stageline.cli", *args],
        cwd=project,
        env=_env(project),
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=120,
        check=False,
    )
    assert "Traceback" not in done.stderr, done.stderr
    return done


def _state(project: Path, run_id: str) -> dict[str, Any]:
    shown = _cli(project, "show", run_id, "--json")
    assert shown.returncode == 0, shown.stderr
    return json.loads(shown.stdout)  # type: ignore[no-any-return]


def test_a_run_started_from_python_is_approved_from_the_cli_and_its_stage_finds_the_service(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in _env(project).items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(project)

    async def start() -> str:
        async with Runner.open(load_settings()) as runner:
            summary = await runner.start(
                "greeting", {"name": "ada"}, run_id="svc1", services={"extra": object()}
            )
            assert summary.status is RunStatus.WAITING
            return summary.run.run_id

    asyncio.run(start())
    approved = _cli(project, "approve", "svc1", "--as", "ed")
    assert approved.returncode == 0, (approved.stdout, approved.stderr)
    shown = _state(project, "svc1")
    assert shown["run"]["status"] == "succeeded"
    assert shown["state"]["greeting"].startswith("hello ada from ")
    log = (project / "services.log").read_text().split()
    assert log.count("open") == log.count("close") >= 1  # opened once per process, closed


def test_the_local_worker_and_show_use_the_factory_only_to_advance(project: Path) -> None:
    queued = _cli(project, "run", "greeting", "-i", "name=grace", "--run-id", "svc2", "--detach")
    assert queued.returncode == 0, queued.stderr
    while _state(project, "svc2")["run"]["status"] != "waiting":
        time.sleep(0.3)  # until the local worker advanced the run, or pytest-timeout
    assert _state(project, "svc2")["state"]["prepared"].startswith("hello worker from ")
    (project / "services.log").unlink(missing_ok=True)
    _state(project, "svc2")
    assert not (project / "services.log").exists()  # reading a run opens no service
    approved = _cli(project, "approve", "svc2")
    assert approved.returncode == 0, approved.stderr
    assert _state(project, "svc2")["state"]["greeting"].startswith("hello grace from ")


def test_a_postgres_worker_makes_the_services_for_the_runs_it_advances(
    project: Path, postgres_url: str
) -> None:
    (project / "database_url").write_text(postgres_url)
    queued = _cli(project, "run", "greeting", "-i", "name=lin", "--run-id", "svc3", "--detach")
    assert queued.returncode == 0, queued.stderr
    with (project / "worker.log").open("w") as log:
        worker = subprocess.Popen(
            [sys.executable, "-m", "stageline.cli", "worker"],
            cwd=project,
            env=_env(project),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        while _state(project, "svc3")["run"]["status"] != "waiting":
            assert worker.poll() is None, (project / "worker.log").read_text()
            time.sleep(0.3)
        prepared = _state(project, "svc3")["state"]["prepared"]
        assert prepared == f"hello worker from {worker.pid}"
    finally:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=30) == 0
    assert f"close {worker.pid}" in (project / "services.log").read_text()
    approved = _cli(project, "approve", "svc3")
    assert approved.returncode == 0, approved.stderr
    assert _state(project, "svc3")["state"]["greeting"].startswith("hello lin from ")


def test_a_bad_factory_is_a_config_error_naming_it(project: Path) -> None:
    (project / "stageline.toml").write_text('services = "myapp.nothere:make"\n')
    done = _cli(project, "run", "greeting", "-i", "name=x")
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "myapp.nothere" in done.stderr and "services" in done.stderr
    assert json.loads(_cli(project, "runs", "--json").stdout) == []  # nothing half-made


@pytest.mark.parametrize(
    "body",
    [
        "def make():\n    return {'a': 1}\n",
        "async def make():\n    return {'a': 1}\n",
        "import contextlib\n@contextlib.contextmanager\ndef make():\n    yield {'a': 1}\n",
    ],
)
async def test_open_services_takes_sync_async_and_context_manager_factories(
    tmp_path: Path, body: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = f"svc_{abs(hash(body))}"
    (tmp_path / f"{name}.py").write_text(body)
    (tmp_path / "stageline.toml").write_text(f'services = "{name}:make"\n')
    monkeypatch.delenv("STAGELINE_SERVICES", raising=False)
    async with open_services(load_settings(cwd=tmp_path, env={})) as made:
        assert made == {"a": 1}


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("nocolon", "module:callable"),
        ("json:nothing_here", "has no"),
        ("json:dumps", "failed"),
    ],
)
async def test_open_services_refuses_what_it_cannot_use(
    tmp_path: Path, spec: str, says: str
) -> None:
    (tmp_path / "stageline.toml").write_text(f'services = "{spec}"\n')
    with pytest.raises(ConfigError, match=says):
        async with open_services(load_settings(cwd=tmp_path, env={})):
            pass
