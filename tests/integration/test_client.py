"""The synchronous facade (``stageline.connect``): an app that is not async drives runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypedDict

import pytest
from langgraph.types import interrupt

import stageline
from stageline.config import Settings
from stageline.errors import AlreadyDecided, RunNotFound, UsageError
from stageline.ledger import RunStatus
from stageline.templates import Template


def test_an_app_starts_waits_decides_reads_and_forks_without_asyncio(
    sqlite_settings: Settings,
) -> None:
    with stageline.connect(sqlite_settings) as client:
        started = client.start("blog_post", {"topic": "sync apps"})
        assert started.status in (RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.WAITING)
        rid = started.run.run_id
        waiting = client.wait(rid, timeout=60)
        assert waiting.status is RunStatus.WAITING
        assert [w.name for w in client.pending(rid)] == ["editor_approval"]
        again = client.changes(rid, note="shorter", actor="ed")
        assert again.status is RunStatus.WAITING
        done = client.approve(rid, note="fine", actor="ed")
        assert done.status is RunStatus.SUCCEEDED
        with pytest.raises(AlreadyDecided):
            client.reject(rid, actor="late")
        assert [r.run_id for r in client.runs(status="succeeded", template="blog_post")] == [rid]
        got = client.get(rid)
        assert got.records and [w.actor for w in got.waits] == ["ed", "ed"]

        steps = client.history(rid)
        draft = next(c.step for c in steps if c.nodes == ["draft"])
        fork = client.fork(rid, at_step=draft, changes={"topic": "forks"})
        assert fork.status is RunStatus.WAITING and fork.state["topic"] == "forks"
        assert client.get(rid).forks[0].run_id == fork.run.run_id
        assert client.cancel(fork.run.run_id).status is RunStatus.CANCELLED

        sent = client.start("blog_post", {"topic": "at once"}, wait=True)
        assert sent.status is RunStatus.WAITING
        with pytest.raises(RunNotFound):
            client.get("nosuch")
    with pytest.raises(UsageError, match="closed"):
        client.get(rid)


def test_wait_times_out_on_a_run_nobody_advances(sqlite_settings: Settings) -> None:
    with stageline.connect(sqlite_settings) as client:
        queued = client._call(client.runner.create("blog_post", {"topic": "t"}))
        with pytest.raises(TimeoutError, match="still running"):
            client.wait(queued.run_id, timeout=0.3)


def test_connect_takes_a_url_a_folder_or_a_db_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("STAGELINE_HOME", str(tmp_path / "home"))
    with stageline.connect("memory://") as client:
        assert client.settings.database_url == "memory://"
    with stageline.connect(tmp_path / "x.db") as client:
        assert client.settings.database_url == f"sqlite:///{tmp_path / 'x.db'}"
    with stageline.connect(tmp_path) as client:
        assert client.settings.root == tmp_path.resolve()
    with pytest.raises(UsageError, match="not a project folder"):
        stageline.connect(tmp_path / "nothing-here.txt")


class Asking(TypedDict, total=False):
    said: Any


async def ask(state: Asking, ctx: Any) -> dict[str, Any]:
    return {"said": interrupt(["pick", "one"])}


def test_an_app_answers_a_graphs_own_interrupt(sqlite_settings: Settings) -> None:
    with stageline.connect(sqlite_settings) as client:
        started = client.start(Template("sync_asks", state=Asking).add_stage("ask", ask), {})
        rid = started.run.run_id
        [wait] = client.wait(rid, timeout=60).waiting
        assert wait.payload["value"] == ["pick", "one"]
        done = client.respond(rid, {"picked": "one"}, actor="ed", wait_id=wait.wait_id)
        assert done.status is RunStatus.SUCCEEDED and done.state["said"] == {"picked": "one"}
        with pytest.raises(AlreadyDecided):
            client.respond(rid, "late", wait_id=wait.wait_id)
