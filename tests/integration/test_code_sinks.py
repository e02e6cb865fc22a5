"""Sinks given in code (``Runner.open(sinks=...)``) are not the outbox: they get the events this
process commits while it is open, inline or from an in-memory queue retried by its policy,
and nothing else. What one missed (written before it was there, or given up, or lost with the
process) no later process delivers: the README says so; ``[[sinks]]`` are for that."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypedDict

from stageline.config import Settings
from stageline.events import DeliveryError, DeliveryPolicy, SinkSpec
from stageline.ledger import RunStatus
from stageline.ledger.records import Event
from stageline.runner import Runner
from stageline.stages import StageContext
from stageline.templates import Template
from stageline.testing import RecordingSink


class S(TypedDict, total=False):
    text: str


async def write(state: S, ctx: StageContext) -> dict[str, Any]:
    return {"text": "draft"}


TEMPLATE = Template("code_sinks", state=S)
TEMPLATE.add_stage("write", write)
TEMPLATE.add_gate("approval")
TEMPLATE.add_sequence("write", "approval")


class Endpoint:
    """An ``AsyncSink`` that refuses every batch while ``down``."""

    name = "endpoint"

    def __init__(self, *, down: bool) -> None:
        self.down = down
        self.got: list[Event] = []

    async def deliver(self, events: Sequence[Event], **future_kwargs: Any) -> None:
        if self.down:
            raise DeliveryError("the endpoint is down")
        self.got.extend(events)

    async def aclose(self, **future_kwargs: Any) -> None:
        return None


def _seqs(events: Sequence[Event], run_id: str) -> list[int]:
    return [e.seq for e in events if e.run_id == run_id]


async def test_code_sinks_get_this_process_events_only_and_nothing_is_delivered_later(
    tmp_path: Path, settings_for: Callable[[str], Settings]
) -> None:
    settings = settings_for(f"sqlite:///{tmp_path / 'sinks.db'}")
    quick = DeliveryPolicy(retries=2, backoff=0.01)

    first, down = RecordingSink(), Endpoint(down=True)
    async with Runner.open(settings, sinks=(first, SinkSpec(sink=down, policy=quick))) as runner:
        waiting = await runner.start(TEMPLATE, {})
        run_id = waiting.run.run_id
        assert waiting.status is RunStatus.WAITING
        written = _seqs(await runner.ledger.events(run_id), run_id)
        # inline: every event this process committed, in order, by the time the call returns
        assert _seqs(first.events, run_id) == written
        assert await runner.bus.flush()
        [stats] = runner.bus.stats().values()
        assert stats.offered == len(written) and stats.delivered == 0  # retried here, given up
        assert stats.retries > 0 and stats.dropped == stats.offered

    second, up = RecordingSink(), Endpoint(down=False)
    async with Runner.open(settings, sinks=(second, SinkSpec(sink=up, policy=quick))) as runner:
        runner.load(TEMPLATE)
        assert second.events == []  # nothing written earlier reaches a sink given now
        done = await runner.approve(run_id, actor="ann")
        assert done.status is RunStatus.SUCCEEDED
        assert await runner.bus.flush()
        later = [s for s in _seqs(await runner.ledger.events(run_id), run_id) if s not in written]

    assert later and _seqs(second.events, run_id) == later
    # the events the endpoint missed in the first process are not delivered by the second
    assert _seqs(up.got, run_id) == later
