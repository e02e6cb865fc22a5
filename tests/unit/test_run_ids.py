"""Run ids are names, never paths: every runner method and the ledger refuse a malformed one."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from plain_ids import plain_id
from stageline.config import Settings
from stageline.errors import InputError
from stageline.ledger import Run, RunStatus
from stageline.names import check_run_id, is_run_id, path_under
from stageline.operations._recorder import transcript_path
from stageline.runner import Runner
from stageline.testing import memory_runner

BAD_IDS = [
    "../../../escape",
    "/some/dir",
    "",
    ".",
    "..",
    "a/b",
    "a\\b",
    "a\x00b",
    " a",
    "-a",
    ".hidden",
    "a" * 65,
    "run id",
    "é",
]
GOOD_IDS = ["a", "0", "blog1", "a.b_c-d", "A" * 64, "f3c2a1b0d9e8"]


@pytest.fixture
async def runner(memory_settings: Settings) -> AsyncIterator[Runner]:
    async with memory_runner(memory_settings) as opened:
        yield opened


@pytest.mark.parametrize("run_id", GOOD_IDS)
def test_good_ids_pass(run_id: str) -> None:
    assert is_run_id(run_id) and check_run_id(run_id) == run_id


@pytest.mark.parametrize("run_id", BAD_IDS, ids=plain_id)
def test_bad_ids_are_refused_naming_the_rule(run_id: str) -> None:
    assert not is_run_id(run_id)
    with pytest.raises(InputError, match="is not a valid run id: use 1-64 letters"):
        check_run_id(run_id)


def test_an_error_never_echoes_a_huge_id() -> None:
    with pytest.raises(InputError) as caught:
        check_run_id("x" * 1_000_000)
    assert len(str(caught.value)) < 300


def test_paths_stay_under_their_folder(tmp_path: Path) -> None:
    assert path_under(tmp_path, "a", "b.md") == (tmp_path / "a" / "b.md").resolve()
    for parts in (("..", "x"), ("/etc/passwd",), ("a", "..", "..", "x")):
        with pytest.raises(InputError, match="leaves"):
            path_under(tmp_path, *parts)


def test_run_dir_refuses_a_path_as_run_id(memory_settings: Settings) -> None:
    assert memory_settings.run_dir("r1").parent == (memory_settings.home / "runs").resolve()
    for bad in ("../x", "/tmp/x", ""):
        with pytest.raises(InputError):
            memory_settings.run_dir(bad)


def test_a_node_name_cannot_put_a_transcript_outside_the_run(tmp_path: Path) -> None:
    assert transcript_path(tmp_path, "build").name == "build.jsonl"
    with pytest.raises(InputError, match="leaves"):
        transcript_path(tmp_path, "../../../escape")


async def test_start_and_create_refuse_before_anything_is_recorded(runner: Runner) -> None:
    for bad in BAD_IDS:
        with pytest.raises(InputError, match="not a valid run id"):
            await runner.start("blog_post", {"topic": "a"}, run_id=bad)
        with pytest.raises(InputError, match="not a valid run id"):
            await runner.create("blog_post", {"topic": "a"}, run_id=bad)
    assert await runner.ledger.list_runs() == []


METHODS: dict[str, Callable[[Runner, str], Awaitable[Any]]] = {
    "resume": lambda r, i: r.resume(i),
    "retry": lambda r, i: r.retry(i),
    "cancel": lambda r, i: r.cancel(i),
    "status": lambda r, i: r.status(i),
    "approve": lambda r, i: r.approve(i),
    "reject": lambda r, i: r.reject(i),
    "request_changes": lambda r, i: r.request_changes(i, note="shorter"),
    "answer": lambda r, i: r.answer(i, {"q": "a"}),
}


@pytest.mark.parametrize("method", sorted(METHODS))
@pytest.mark.parametrize("run_id", ["../../../escape", "/some/dir", ""], ids=plain_id)
async def test_every_runner_method_refuses_a_malformed_id(
    runner: Runner, method: str, run_id: str
) -> None:
    with pytest.raises(InputError, match="not a valid run id"):
        await METHODS[method](runner, run_id)


async def test_the_ledger_refuses_to_create_or_read_a_malformed_id(runner: Runner) -> None:
    with pytest.raises(InputError):
        await runner.ledger.create_run(
            Run(
                run_id="../x",
                template="t",
                template_version="1",
                status=RunStatus.QUEUED,
                inputs={},
            )
        )
    with pytest.raises(InputError):
        await runner.ledger.get_run("/etc")
    assert await runner.ledger.list_runs() == []
