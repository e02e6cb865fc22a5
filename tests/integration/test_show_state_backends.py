"""``show``'s own checkpoint reader against LangGraph's: the same state for the same runs, on
a SQLite file and on Postgres, and LangGraph left to judge whatever the reader cannot vouch
for (``runner._show.quick_status`` answers None, and ``show`` asks ``Runner.status``)."""

from __future__ import annotations

import json
import operator
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypedDict

from stageline.config import Settings
from stageline.ledger import RunStatus
from stageline.runner import Runner
from stageline.runner._show import quick_status
from stageline.stages import StageContext
from stageline.templates import Template

YAML = """
name: quick_gate
state:
  text: str
  log: {type: list, reducer: append}
stages:
  write: show_reader_stages:write
gates:
  approval: {}
edges:
  - [write, approval]
"""
STAGES = """
import datetime, uuid


async def write(state, ctx):
    return {"text": "draft", "log": [{"at": "write", "n": 1}]}
"""


async def _same(runner: Runner, run_id: str) -> dict[str, Any]:
    quick = await quick_status(runner.ledger, run_id, runner.settings.home)
    full = await runner.status(run_id)
    assert quick is not None, run_id  # the reader vouched for it: no LangGraph was needed
    assert json.dumps(quick.to_dict(), default=repr) == json.dumps(full.to_dict(), default=repr)
    return quick.state


async def test_the_reader_reads_the_state_langgraph_reads(
    shared_backend_url: str,
    settings_for: Callable[[str], Settings],
    tmp_path: Path,
) -> None:
    settings = settings_for(shared_backend_url)
    (tmp_path / "quick.yaml").write_text(YAML)
    (tmp_path / "show_reader_stages.py").write_text(STAGES)
    async with Runner.open(settings) as runner:
        await runner.start("blog_post", {"topic": "durable pipelines"}, run_id="b1")
        assert (await _same(runner, "b1"))["topic"] == "durable pipelines"
        await runner.request_changes("b1", note="shorter")
        await _same(runner, "b1")
        await runner.approve("b1")
        assert (await _same(runner, "b1"))["reviews"]
        await runner.start("blog_post", {"topic": "x"}, run_id="b2")
        await runner.reject("b2")
        await _same(runner, "b2")

        s1 = await runner.start(
            "sdlc", {"task": "fix the login bug", "review_threshold": 0}, run_id="s1"
        )
        assert s1.status is RunStatus.WAITING
        await _same(runner, "s1")

        await runner.start(str(tmp_path / "quick.yaml"), {}, run_id="y1")
        assert (await _same(runner, "y1"))["log"] == [{"at": "write", "n": 1}]
        await runner.approve("y1")
        assert (await _same(runner, "y1"))["text"] == "draft"


class Typed(TypedDict, total=False):
    when: Any
    trail: Annotated[list[str], operator.add]


async def test_types_off_its_short_list_are_left_to_langgraph(
    shared_backend_url: str,
    settings_for: Callable[[str], Settings],
) -> None:
    import datetime
    from decimal import Decimal

    async def stamp(state: Typed, ctx: StageContext) -> dict[str, Any]:
        return {
            "when": {
                "at": datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC),
                "amount": Decimal("1.50"),
                "tags": {"a"},
            },
            "trail": ["stamp"],
        }

    template = Template("typed", state=Typed).add_stage("stamp", stamp)
    template.add_sequence("stamp")
    async with Runner.open(settings_for(shared_backend_url)) as runner:
        done = await runner.start(template, {}, run_id="t1")
        runner_state = (await runner.status("t1")).state
        quick = await quick_status(runner.ledger, "t1", runner.settings.home)
    assert done.status is RunStatus.SUCCEEDED
    assert quick is not None and quick.state == runner_state
    assert quick.state["when"]["tags"] == {"a"}


@dataclass
class Note:
    text: str


async def test_a_type_the_template_registers_is_read_through_langgraph(
    shared_backend_url: str,
    settings_for: Callable[[str], Settings],
) -> None:
    async def write(state: Typed, ctx: StageContext) -> dict[str, Any]:
        return {"when": Note("hello")}

    template = Template("noted", state=Typed, checkpoint_types=[Note]).add_stage("write", write)
    template.add_sequence("write")
    async with Runner.open(settings_for(shared_backend_url)) as runner:
        await runner.start(template, {}, run_id="n1")
        assert await quick_status(runner.ledger, "n1", runner.settings.home) is None
        assert (await runner.status("n1")).state["when"] == Note("hello")


async def test_a_run_no_process_here_compiled_is_read_through_langgraph(
    shared_backend_url: str,
    settings_for: Callable[[str], Settings],
    tmp_path: Path,
) -> None:
    settings = settings_for(shared_backend_url)
    async with Runner.open(settings) as runner:
        await runner.start("blog_post", {"topic": "x"}, run_id="b1")
        assert await quick_status(runner.ledger, "b1", settings.home) is not None
        assert await quick_status(runner.ledger, "b1", tmp_path / "elsewhere") is None


async def test_writes_langgraph_would_still_fold_in_are_read_through_langgraph(
    shared_backend_url: str,
    settings_for: Callable[[str], Settings],
) -> None:
    """A fan-out whose one branch failed: the other's writes wait in the checkpoint, and only
    LangGraph's reducers can say what the state then shows."""

    def node(name: str, fail: bool = False) -> Any:
        async def body(state: Typed, ctx: StageContext) -> dict[str, Any]:
            if fail:
                raise RuntimeError("broken")
            return {"trail": [name]}

        body.__name__ = body.__qualname__ = name
        return body

    template = Template("fan", state=Typed)
    for name in ("a", "b", "c", "d"):
        template.add_stage(name, node(name, fail=name == "b"))
    template.add_fanout("a", ["b", "c"], join="d")
    async with Runner.open(settings_for(shared_backend_url)) as runner:
        failed = await runner.start(template, {}, run_id="f1")
        assert failed.status is RunStatus.FAILED
        assert await quick_status(runner.ledger, "f1", runner.settings.home) is None
        assert (await runner.status("f1")).state["trail"][0] == "a"
