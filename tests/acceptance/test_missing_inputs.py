"""A missing required input is a usage error before anything exists, at every door: the CLI
exits 2 with one line that names it and how to pass it, the API answers 422 naming it; and a
failure that retry cannot fix does not suggest retry."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

from server_fixtures import Server

Cli = Callable[..., subprocess.CompletedProcess[str]]

REFUSES = """
from typing import Any, TypedDict

from stageline.errors import InputError
from stageline.templates import Template


class State(TypedDict, total=False):
    n: int


async def check(state: State, ctx: Any) -> dict[str, Any]:
    raise InputError("n must be even")


template = Template("refuses", state=State)
template.add_stage("check", check)
"""


def test_run_without_a_required_input_exits_2_and_creates_nothing(cli: Cli) -> None:
    done = cli("run", "blog_post")
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert lines == [
        "error: missing required input 'topic' (what the post is about) of template "
        "'blog_post'; pass it with -i topic=..."
    ], lines
    assert "retry" not in done.stdout + done.stderr
    assert json.loads(cli("runs", "--json").stdout) == []
    detached = cli("run", "blog_post", "--detach", "-i", "topic= ")
    assert detached.returncode == 2 and "-i topic=..." in detached.stderr
    assert json.loads(cli("runs", "--json").stdout) == []


def test_a_yaml_templates_required_key_is_asked_for(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "flow.yaml").write_text(
        "name: flow\nstate:\n  topic: {type: str, required: true}\n  count: int\n"
        "stages:\n  research: stageline.templates.builtin.blog_post:research\n"
    )
    done = cli("run", "flow.yaml", "-i", "count=2")
    assert done.returncode == 2 and "missing required input 'topic'" in done.stderr
    assert json.loads(cli("runs", "--json").stdout) == []


def test_a_failure_retry_cannot_fix_suggests_what_can(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "refuses.py").write_text(REFUSES)
    done = cli("run", "refuses.py", "-i", "n:=3", "--run-id", "r1")
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "stageline retry" not in done.stdout
    assert "fork with: stageline fork r1 -i KEY=VALUE" in " ".join(done.stdout.split())
    run = json.loads(cli("show", "r1", "--json").stdout)["run"]
    assert run["failure_phase"] == "input"


def test_the_api_answers_422_naming_the_missing_input(server: Server) -> None:
    with server.client("admin") as client:
        before = client.get("/v1/runs", params={"template": "blog_post"}).json()["runs"]
        for wait in (False, True):
            refused = client.post(
                "/v1/runs", json={"template": "blog_post", "inputs": {}, "wait": wait}
            )
            assert refused.status_code == 422, refused.text
            assert "missing required input 'topic'" in refused.json()["detail"][0]["msg"]
        thread = client.post("/threads", json={}).json()["thread_id"]
        started = client.post(
            f"/threads/{thread}/runs", json={"assistant_id": "blog_post", "input": {}}
        )
        assert started.status_code == 422 and "'topic'" in started.text, started.text
        after = client.get("/v1/runs", params={"template": "blog_post"}).json()["runs"]
        assert after == before
