"""DESIGN.md rule 1 for the server: routes call the runner; none holds lifecycle plumbing."""

from __future__ import annotations

from pathlib import Path

import pytest

import stageline

SERVER = Path(stageline.__file__).parent / "server"

LIFECYCLE = (
    ".transition(",  # moving a run between statuses
    "acquire_lease",  # taking a run to advance it
    "release_lease",
    ".decide_wait(",  # recording a decision or an answer
    ".settle_wait(",
    ".open_waits(",
    ".create_run(",  # making a run row
    "Command(",  # resuming the graph by hand
    "astream(",  # driving the graph
    "request_cancel",
    "delete_run",
)


@pytest.mark.parametrize("path", sorted(SERVER.rglob("*.py")), ids=lambda p: p.name)
def test_the_server_leaves_the_lifecycle_to_the_runner(path: Path) -> None:
    text = path.read_text()
    found = [f for f in LIFECYCLE if f in text]
    assert not found, f"{path.relative_to(SERVER)} reaches into the lifecycle: {found}"
