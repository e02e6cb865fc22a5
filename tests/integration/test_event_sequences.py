"""Per-run event sequence numbers under concurrency: 100 runs at once on one runner, every
run's events numbered exactly 1..n in the ledger, and published to sinks in that order."""

from __future__ import annotations

import asyncio
import operator
from collections.abc import Callable, Sequence
from typing import Annotated, Any, TypedDict

from stageline.config import Settings
from stageline.events import DeliveryPolicy, SinkSpec
from stageline.ledger import Event, RunStatus
from stageline.runner import Runner
from stageline.stages import StageContext
from stageline.templates import Template
from stageline.testing import RecordingSink

RUNS = 100


class S(TypedDict, total=False):
    trail: Annotated[list[str], operator.add]


def step(name: str) -> Any:
    async def body(state: S, ctx: StageContext) -> dict[str, Any]:
        ctx.log.info(f"{name} begins")
        await asyncio.sleep(0)  # let the other runs in
        ctx.log.debug(f"{name} ends", n=len(state.get("trail", [])))
        return {"trail": [name]}

    body.__name__ = body.__qualname__ = name
    return body


def fan_out() -> Template:
    """a -> [b, c] -> d: parallel nodes of one run stage events in one step."""
    made = Template("seqs", state=S)
    for node in "abcd":
        made.add_stage(node, step(node))
    made.add_edge("a", "b").add_edge("a", "c").add_edge("b", "d").add_edge("c", "d")
    return made


class QueuedRecorder:
    """An async sink: what reaches a queued sink's worker, in delivery order."""

    name = "queued-recorder"

    def __init__(self) -> None:
        self.events: list[Event] = []

    async def deliver(self, events: Sequence[Event], **future_kwargs: Any) -> None:
        self.events.extend(events)

    async def aclose(self, **future_kwargs: Any) -> None:
        return None


def seqs_by_run(events: list[Event]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for event in events:
        out.setdefault(event.run_id, []).append(event.seq)
    return out


async def test_100_concurrent_runs_number_their_events_without_gaps_or_duplicates(
    backend_url: str,
    settings_for: Callable[[str], Settings],
) -> None:
    inline, queued = RecordingSink(), QueuedRecorder()
    sinks = (inline, SinkSpec(sink=queued, policy=DeliveryPolicy(queue_size=100_000, batch=500)))
    template = fan_out()
    async with Runner.open(settings_for(backend_url), sinks=sinks) as runner:
        first = await asyncio.gather(*(runner.start(template, {}) for _ in range(RUNS)))
        assert all(s.status is RunStatus.SUCCEEDED for s in first)
        # Then 100 more runs while other writers append to the finished ones (no lease: the
        # ledger numbers those after the highest seq written).
        more, _ = await asyncio.gather(
            asyncio.gather(*(runner.start(template, {}) for _ in range(RUNS))),
            asyncio.gather(
                *(
                    runner.ledger.append_events(
                        s.run.run_id,
                        [
                            Event(run_id=s.run.run_id, kind="test.note", message=str(i)),
                            Event(run_id=s.run.run_id, kind="test.note", message=f"{i}b"),
                        ],
                    )
                    for i, s in enumerate(first)
                )
            ),
        )
        assert all(s.status is RunStatus.SUCCEEDED for s in more)
        run_ids = [s.run.run_id for s in (*first, *more)]
        written = {r: await runner.ledger.events(r) for r in run_ids}
        last_seq = {r: (await runner.ledger.get_run(r)).last_seq for r in run_ids}
        bus = runner.bus
    assert len(set(run_ids)) == 2 * RUNS
    noted = {s.run.run_id for s in first}

    for run_id in run_ids:
        seqs = [e.seq for e in written[run_id]]
        assert seqs == list(range(1, len(seqs) + 1)), run_id
        # run.started, then per node started/log/log/succeeded, then run.succeeded (+ notes)
        notes = 2 if run_id in noted else 0
        assert len(seqs) == 2 + 4 * 4 + notes
        assert last_seq[run_id] == len(seqs)
        kinds = [e.kind for e in written[run_id]]
        assert kinds[0] == "run.started" and "run.succeeded" in kinds

    # sinks saw each run's events once each, in seq order: inline and through the queue
    for got in (seqs_by_run(inline.events), seqs_by_run(queued.events)):
        assert set(got) == set(run_ids)
        for run_id in run_ids:
            assert got[run_id] == [e.seq for e in written[run_id]], run_id
    stats = bus.stats()["queued-recorder"]
    assert stats.dropped == 0 and stats.delivered == len(queued.events)
