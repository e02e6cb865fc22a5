"""LangGraph's JavaScript SDK (``@langchain/langgraph-sdk``, pinned in tests/js/package.json)
drives a running ``stageline serve``: ``node tests/js/sdk_flow.mjs`` does the core flow, the
calls Agent Inbox makes, the store and the errors, one JSON line per step.

``npm ci`` installs the SDK into tests/js/node_modules when it is missing or another version
(once, under a file lock, however many xdist workers ask). Without ``node``/``npm`` the test is
skipped, except where CI=true: there it fails.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from server_fixtures import Server

JS = Path(__file__).parents[1] / "js"
SDK = "@langchain/langgraph-sdk"
STEPS = [
    "assistants.search",
    "assistants.get",
    "assistants.getGraph",
    "threads.create",
    "runs.wait",
    "threads.getState",
    "threads.search(interrupted)",
    "threads.get(interrupted)",
    "runs.create(resume)",
    "runs.join",
    "threads.get(idle)",
    "runs.stream",
    "store",
    "errors",
    "done",
]


def _installed(pinned: str) -> bool:
    found = JS / "node_modules" / SDK / "package.json"
    return found.is_file() and json.loads(found.read_text())["version"] == pinned


@pytest.fixture(scope="session")
def js_sdk() -> Path:
    """tests/js with its node_modules installed by ``npm ci`` (from the committed lock file)."""
    missing = [tool for tool in ("node", "npm") if shutil.which(tool) is None]
    if missing:
        why = f"{' and '.join(missing)} not found on PATH"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{why}; the JavaScript SDK test must run where CI=true")
        pytest.skip(f"{why}; install Node.js 20+ to run the JavaScript SDK test")
    pinned = json.loads((JS / "package.json").read_text())["dependencies"][SDK]
    with (JS / ".install.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one installer; the others wait, then find it done
        if not _installed(pinned):
            done = subprocess.run(
                ["npm", "ci", "--no-audit", "--no-fund"],
                cwd=JS,
                capture_output=True,
                text=True,
                timeout=600,
            )
            assert done.returncode == 0, f"npm ci in {JS} failed:\n{done.stdout}\n{done.stderr}"
        assert _installed(pinned), f"npm ci did not install {SDK} {pinned}"
    return JS


def test_the_js_sdk_does_the_core_flow_agent_inbox_and_the_store(
    js_sdk: Path, serve_project: Callable[..., Server]
) -> None:
    server = serve_project()
    done = subprocess.run(
        ["node", str(js_sdk / "sdk_flow.mjs"), server.url],
        env={**os.environ, "STAGELINE_TOKEN": server.tokens["decide"]},
        capture_output=True,
        text=True,
        timeout=240,
    )
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    failed = [line for line in lines if not line["ok"]]
    assert done.returncode == 0 and not failed, (failed, done.stderr, server.log())
    assert [line["step"] for line in lines] == STEPS
    shown = {line["step"]: line for line in lines}
    assert shown["runs.wait"]["gate"] == "editor_approval"
    assert shown["runs.stream"]["updates"][-1] == "__interrupt__"
    assert set(shown["runs.stream"]["events"]) == {"metadata", "values", "updates"}

    # What the SDK did is what stageline recorded: the thread's decision, by the token's name.
    tid = shown["threads.create"]["thread_id"]
    decided = json.loads(server.cli("show", tid, "--json").stdout)
    assert decided["run"]["status"] == "succeeded"
    [decision] = decided["decisions"]
    assert (decision["actor"], decision["response"]["decision"]) == ("decider", "approve")


def test_the_readme_names_the_tested_version() -> None:
    pinned = json.loads((JS / "package.json").read_text())["dependencies"][SDK]
    locked = json.loads((JS / "package-lock.json").read_text())["packages"]
    assert locked[f"node_modules/{SDK}"]["version"] == pinned  # an exact pin, and the lock agrees
    readme = (JS.parents[1] / "README.md").read_text()
    assert f"`{SDK}` (tested: {pinned}," in readme
