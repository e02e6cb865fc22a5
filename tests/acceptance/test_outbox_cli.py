"""Webhooks as a user configures them, with the CLI as separate processes: a read command
needs no sink's secret, a hanging endpoint does not keep a command from ending, and what one
process could not deliver the next one does, each event once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
if str(FIXTURES) not in sys.path:
    sys.path.insert(0, str(FIXTURES))

from loopback_hook import Endpoint  # noqa: E402

TEMPLATE = """
from typing import Any, TypedDict

from stageline.templates import Template


class State(TypedDict, total=False):
    n: int


async def step(state: State, ctx: Any) -> dict[str, Any]:
    return {"n": state.get("n", 0) + 1}


template = Template("three", state=State)
for name in ("a", "b", "c"):
    template.add_stage(name, step)
template.add_sequence("a", "b", "c")
"""


def _project(tmp_path: Path, sink: str) -> Path:
    (tmp_path / "stageline.toml").write_text(f"[stageline]\nsink_exit_timeout = 0.5\n\n{sink}")
    (tmp_path / "templates").mkdir()
    (tmp_path / "templates" / "three.py").write_text(TEMPLATE)
    return tmp_path


def _cli(project: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("STAGELINE_")}
    clean.update(STAGELINE_MODEL="offline", COLUMNS="200", PYTHONIOENCODING="utf-8", **env)
    done = subprocess.run(
        [sys.executable, "-m", "stageline.cli", *args],
        cwd=project,
        env=clean,
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=120,
        check=False,
    )
    assert "Traceback" not in done.stderr, done.stderr
    return done


def _seqs(project: Path, run_id: str) -> list[int]:
    done = _cli(project, "logs", run_id, "--json")
    assert done.returncode == 0, done.stderr
    return [e["seq"] for e in json.loads(done.stdout)]


def test_read_commands_need_no_sink_secret(tmp_path: Path) -> None:
    project = _project(
        tmp_path,
        '[[sinks]]\ntype = "webhook"\nformat = "discord"\nurl_env = "STAGELINE_TEST_UNSET_HOOK"\n',
    )
    ran = _cli(project, "run", "three", "--run-id", "r1")
    assert ran.returncode == 0, ran.stderr  # the run goes on; the sink's events wait
    for args in (
        ("runs",),
        ("runs", "--json"),
        ("show", "r1"),
        ("show", "r1", "--json"),
        ("logs", "r1"),
        ("pending",),
        ("stats",),
        ("templates",),
        ("graph", "three"),
    ):
        done = _cli(project, *args)
        assert done.returncode == 0, (args, done.stderr)
        assert "is not set" not in done.stderr, (args, done.stderr)


@pytest.fixture
def endpoint() -> Any:
    made = Endpoint("hang")
    yield made
    made.close()


def test_a_hanging_webhook_holds_nobody_up_and_the_next_process_delivers(
    tmp_path: Path,
    endpoint: Endpoint,
) -> None:
    project = _project(
        tmp_path,
        f'[[sinks]]\ntype = "webhook"\nformat = "json"\n'
        f'url = "{endpoint.url}"\nname = "hook"\ntimeout = 30\n'
        'min_level = "debug"\n',
    )
    first = _cli(project, "run", "three", "--run-id", "first")
    assert first.returncode == 0, first.stderr
    # The command ended while the endpoint held its request unanswered (it would for 30 s).
    assert endpoint.tried and endpoint.acked == [] and not endpoint.release.is_set()

    endpoint.mode = "ok"
    second = _cli(
        project, "run", "three", "--run-id", "second", STAGELINE_SINK_EXIT_TIMEOUT="30"
    )  # this one may finish its deliveries
    assert second.returncode == 0, second.stderr
    wanted = [(r, s) for r in ("first", "second") for s in _seqs(project, r)]
    counts = Counter(endpoint.acked)
    assert sorted(counts) == sorted(wanted)  # none lost, none skipped
    assert set(counts.values()) == {1}  # none acknowledged twice
    for run_id in ("first", "second"):  # in order within each run
        assert [s for r, s in endpoint.acked if r == run_id] == _seqs(project, run_id)


def test_the_local_worker_delivers_what_its_runs_write(tmp_path: Path) -> None:
    import contextlib
    import signal
    import time

    endpoint = Endpoint("ok")
    project = _project(
        tmp_path,
        f'[[sinks]]\ntype = "webhook"\nformat = "json"\n'
        f'url = "{endpoint.url}"\nname = "hook"\nmin_level = "debug"\n',
    )
    lock = project / ".stageline" / "worker.lock"
    try:
        queued = _cli(project, "run", "three", "--run-id", "bg", "--detach")
        assert queued.returncode == 0, queued.stderr
        deadline = time.monotonic() + 90  # a guard against a hang, not a speed claim
        seqs: list[int] = []
        while time.monotonic() < deadline:
            shown = _cli(project, "show", "bg", "--json")
            if json.loads(shown.stdout)["run"]["status"] == "succeeded":
                seqs = _seqs(project, "bg")
                if [s for r, s in endpoint.acked if r == "bg"] == seqs:
                    break
            time.sleep(0.3)
        assert seqs and [s for r, s in endpoint.acked if r == "bg"] == seqs
    finally:
        text = lock.read_text().strip() if lock.exists() else ""
        if text.isdigit():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(text), signal.SIGTERM)
        endpoint.close()


@pytest.mark.parametrize(
    ("table", "key"),
    [
        ("chat_id = -100123\n", "bot_token_env is required"),
        ('bot_token_env = "TG_TOKEN"\n', "chat_id is required"),
    ],
)
def test_a_telegram_table_missing_a_key_is_a_one_line_error_naming_it(
    tmp_path: Path, table: str, key: str
) -> None:
    project = _project(tmp_path, f'[[sinks]]\ntype = "telegram"\n{table}')
    done = _cli(project, "run", "three", "--run-id", "t1", TG_TOKEN="1:AAsecret")
    assert done.returncode != 0
    assert done.stderr.strip().splitlines() == [f"error: [[sinks]] #1: {key} " + _WHY[key]]
    assert "1:AAsecret" not in done.stderr + done.stdout


_WHY = {
    "bot_token_env is required": "(the variable holding the bot token)",
    "chat_id is required": "(the chat, group or @channel to post to)",
}
