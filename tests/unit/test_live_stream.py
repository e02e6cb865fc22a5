"""An advance started inside ``live_stream`` hands the stream the parts of the modes it asked
for, as the graph makes them, on a real SQLite file; an advance started outside hands it none."""

from __future__ import annotations

from typing import Any, TypedDict

from stageline.runner import LiveStream, Runner, live_stream
from stageline.stages import StageContext
from stageline.templates import Template


class S(TypedDict, total=False):
    text: str
    published: bool


async def write(state: S, ctx: StageContext) -> dict[str, Any]:
    return {"text": "draft"}


async def publish(state: S, ctx: StageContext) -> dict[str, Any]:
    return {"published": True}


def two_stages() -> Template:
    template = Template("followed", state=S).add_stage("write", write)
    return template.add_stage("publish", publish).add_edge("write", "publish")


async def test_an_advance_inside_a_live_stream_hands_it_each_update(runner: Runner) -> None:
    parts: list[tuple[tuple[str, ...], str, Any]] = []
    follow = LiveStream(frozenset({"updates"}), lambda *part: parts.append(part))
    with live_stream(follow):
        done = await runner.start(two_stages(), {})
    assert done.state == {"text": "draft", "published": True}
    assert parts == [
        ((), "updates", {"write": {"text": "draft"}}),
        ((), "updates", {"publish": {"published": True}}),
    ]
    await runner.start(two_stages(), {})  # outside: followed by nobody
    assert len(parts) == 2
