"""A run whose process was stopped (Ctrl-C, SIGTERM) says so: ``stopped``, with no lease, in
``runs``, ``show``, the API and the LangGraph routes; ``resume`` finishes it, ``cancel`` ends
it, ``retry`` says to resume, and a server does not take it over on its own."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from dashboard_browser import SignedIn
from server_fixtures import Server

Cli = Callable[..., subprocess.CompletedProcess[str]]

SLOW = """
import asyncio
from pathlib import Path
from typing import Any, TypedDict

from stageline.templates import Template

State = TypedDict("State", {"began": bool, "released": bool}, total=False)
template = Template("slow", state=State)


async def begin(state: Any, ctx: Any) -> dict[str, Any]:
    return {"began": True}


async def held(state: Any, ctx: Any) -> dict[str, Any]:
    Path("slow.started").touch()  # the test signals the process now, mid-step
    while Path("hold").exists():
        await asyncio.sleep(0.05)
    return {"released": True}


template.add_stage("begin", begin).add_stage("slow", held).add_sequence("begin", "slow")
"""


def _as_from_a_terminal() -> None:
    """In the child, before it starts: no signal blocked and Ctrl-C's default handling, as in a
    shell's foreground job, whatever this test process inherited or changed (a CLI started by
    an earlier test's worker once never saw its SIGINT)."""
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _stop_mid_run(
    project: Path, env: dict[str, str], template: str, run_id: str, sig: int
) -> tuple[int, str]:
    """Start ``run TEMPLATE`` in the foreground, send ``sig`` once its slow node runs; its exit
    code and standard error."""
    (project / "hold").touch()
    (project / "slow.started").unlink(missing_ok=True)
    proc = subprocess.Popen(
        [sys.executable, "-m", "stageline.cli", "run", template, "--run-id", run_id],
        cwd=project,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=_as_from_a_terminal,
    )
    try:
        while not (project / "slow.started").exists():
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.05)
        proc.send_signal(sig)
        try:
            _, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:  # say how the child held the signal, then fail
            status = Path(f"/proc/{proc.pid}/status").read_text().splitlines()
            held = [line for line in status if line.startswith(("SigBlk", "SigIgn", "SigCgt"))]
            raise AssertionError(f"run did not stop on signal {sig}: {held}") from None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return proc.returncode, err


def _run_json(cli: Cli, run_id: str) -> dict[str, object]:
    listed = {r["run_id"]: r for r in json.loads(cli("runs", "--json").stdout)}
    shown = json.loads(cli("show", run_id, "--json").stdout)["run"]
    assert listed[run_id]["status"] == shown["status"], (listed[run_id], shown)
    return shown  # type: ignore[no-any-return]


@pytest.mark.timeout(240)  # a hang guard: nothing here is timed
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["sigint", "sigterm"])
def test_a_run_stopped_by_a_signal_is_stopped_and_resume_finishes_it(
    tmp_path: Path, cli: Cli, cli_env: dict[str, str], sig: int
) -> None:
    (tmp_path / "slow.py").write_text(SLOW)
    code, err = _stop_mid_run(tmp_path, cli_env, "slow.py", "s1", sig)
    assert code == 130, err
    assert "continue run s1 with `stageline resume s1`" in err and "Traceback" not in err

    run = _run_json(cli, "s1")
    assert (run["status"], run["lease_holder"], run["lease_expires_at"]) == ("stopped", None, None)
    listed = json.loads(cli("runs", "--status", "stopped", "--json").stdout)
    assert [r["run_id"] for r in listed] == ["s1"]
    assert json.loads(cli("runs", "--status", "running", "--json").stdout) == []
    events = [e["kind"] for e in json.loads(cli("logs", "s1", "--json").stdout)]
    assert events[-1] == "run.stopped", events

    retried = cli("retry", "s1")
    assert retried.returncode == 4 and "stageline resume s1" in retried.stderr, retried.stderr

    (tmp_path / "hold").unlink()
    resumed = cli("resume", "s1")
    assert resumed.returncode == 0, (resumed.stdout, resumed.stderr)
    assert _run_json(cli, "s1")["status"] == "succeeded"


@pytest.mark.timeout(240)
def test_cancel_ends_a_stopped_run(tmp_path: Path, cli: Cli, cli_env: dict[str, str]) -> None:
    (tmp_path / "slow.py").write_text(SLOW)
    code, err = _stop_mid_run(tmp_path, cli_env, "slow.py", "c1", signal.SIGINT)
    assert code == 130, err
    cancelled = cli("cancel", "c1")
    assert cancelled.returncode == 0, cancelled.stderr
    assert "cancelled run c1" in cancelled.stdout
    assert _run_json(cli, "c1")["status"] == "cancelled"
    assert cli("resume", "c1").returncode == 4  # a cancelled run stays cancelled


@pytest.mark.timeout(300)
def test_the_api_and_the_langgraph_routes_show_a_stopped_run(
    serve_project: Callable[..., Server], signed_in: SignedIn
) -> None:
    served = serve_project(start=False)
    (served.project / "templates" / "slow.py").write_text(SLOW)
    code, err = _stop_mid_run(served.project, served.env, "slow", "a1", signal.SIGTERM)
    assert code == 130, err
    served.start()
    with served.client("admin") as client:
        run = client.get("/v1/runs/a1").json()["run"]
        assert (run["status"], run["lease_holder"]) == ("stopped", None), run
        listed = client.get("/v1/runs", params={"status": "stopped"}).json()["runs"]
        assert [r["run_id"] for r in listed] == ["a1"]
        thread = client.get("/threads/a1").json()
        assert thread["status"] == "idle", thread
    # The dashboard: its own badge, the filter, and Resume offered (a person resumes it).
    page = signed_in(served, "decide", start="/ui/runs")
    assert page.locator("tr[data-run=a1]").get_attribute("data-status") == "stopped"
    assert "stopped" in page.locator("fieldset.statuses .status").all_inner_texts()
    page.goto(served.url + "/ui/runs/a1")
    badge = page.locator("#run-status [data-run-status=stopped]")
    assert badge.count() == 1
    assert badge.evaluate("e => getComputedStyle(e).backgroundColor") not in (
        "rgba(0, 0, 0, 0)",
        "rgb(241, 245, 249)",  # the queued and cancelled badges' grey
    )
    # The server did not take the run over on its own: it waits for a person.
    with served.client("read") as client:
        assert client.get("/v1/runs/a1").json()["run"]["status"] == "stopped"
    (served.project / "hold").unlink()
    page.click("button[data-action=resume]")
    page.wait_for_selector("#run-status [data-run-status=succeeded]")
    page.context.close()
